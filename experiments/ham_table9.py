"""Ham Table 9: the temperature T of the CD ham, what a CPU can compute beside the paper's mIoU.

  python -m experiments.ham_table9

Per T: the Hamburger's parameters (T is none), and soft CD (`ops.soft_cd`, the paper's K = 6,
β = 0.1, r = 64 bases of d = 512) on fixed synthetic tokens: the relative reconstruction error
‖X − C·Dᵀ‖/‖X‖ and the entropy of the initial codes softmax(cos/T). What they show and the
runs the mIoU needs: the notes of experiments/results/ham_table9.md.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab import cli, ops
from attention_lab.layers.hamburger import Hamburger
from experiments import measure, plots

# T: (best, mean) VOC val mIoU, Ham Table 9 (CD ham, the App. E.1 ablation setting).
PAPER = {1.0: (77.1, 77.0), 0.1: (78.2, 77.5), 0.01: (78.1, 77.5)}
DIM, RANK, STEPS, BETA, TOKENS = 512, 64, 6, 0.1, 32 * 32


def tokens(key, n: int = TOKENS, dim: int = DIM, clusters: int = RANK, noise: float = 0.5):
  """(1, n, dim) tokens around `clusters` random unit directions, fixed by `key`."""
  k_dir, k_pick, k_noise = jax.random.split(key, 3)
  directions = jax.random.normal(k_dir, (clusters, dim))
  directions /= jnp.linalg.norm(directions, axis=-1, keepdims=True)
  picks = jax.random.randint(k_pick, (n,), 0, clusters)
  return (directions[picks] + noise * jax.random.normal(k_noise, (n, dim)) / math.sqrt(dim))[None]


def solver_stats(x, temperature: float, seeds: int = 5) -> dict:
  """Means over `seeds` initial dictionaries: CD's reconstruction error, initial-code entropy."""
  errors, entropies = [], []
  for seed in range(seeds):
    bases = ops.random_bases(jax.random.key(seed), 1, x.shape[-1], RANK, distribution="normal")
    final_bases, codes = ops.soft_cd(x, bases, steps=STEPS, temperature=temperature, beta=BETA)
    recon = codes @ jnp.swapaxes(final_bases, 1, 2)
    errors.append(float(jnp.linalg.norm(x - recon) / jnp.linalg.norm(x)))
    unit = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    p = jax.nn.softmax(unit @ (bases / jnp.linalg.norm(bases, axis=1, keepdims=True))
                       / temperature, axis=-1)
    entropies.append(float(jnp.mean(-jnp.sum(p * jnp.log(p + 1e-30), axis=-1))))
  return dict(reconstruction_error=float(np.mean(errors)), code_entropy=float(np.mean(entropies)))


def hamburger_params(temperature: float) -> int:
  layer = nnx.eval_shape(lambda: Hamburger(DIM, ham="cd", dim=DIM, rank=RANK,
                                           temperature=temperature, rngs=nnx.Rngs(0)))
  return measure.params_of(layer)


def plot(rows, path):
  """The paper's mIoU per T beside the solver's reconstruction error and code entropy."""
  log_r = math.log(RANK)
  return plots.grouped_bars(
      path, "Ham Table 9: CD temperature T", [f"T = {r['temperature']:g}" for r in rows],
      [("paper VOC val mIoU (%)", {"best": [r["paper_miou_best"] for r in rows],
                                   "mean": [r["paper_miou_mean"] for r in rows]}),
       ("ours: CD solver on synthetic tokens", {
           "reconstruction error": [r["reconstruction_error"] for r in rows],
           "initial-code entropy / log r": [r["code_entropy"] / log_r for r in rows]})],
      ylims=[(76.5, 78.5), None])


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; this command takes no arguments")
  x = tokens(jax.random.key(0))
  rows = [dict(temperature=t, paper_miou_best=best, paper_miou_mean=mean,
               hamburger_params=hamburger_params(t), **solver_stats(x, t))
          for t, (best, mean) in PAPER.items()]
  lines = [
      "# Ham Table 9: temperature T of the CD ham", "",
      "Command: `python -m experiments.ham_table9` (arithmetic and the solver on fixed "
      "synthetic tokens; nothing is timed). Plot: [ham_table9.png](ham_table9.png).", "",
      "| T | paper VOC val mIoU best (mean) | Hamburger parameters (C = d = 512, r = 64) | "
      "CD reconstruction error ‖X − CDᵀ‖/‖X‖ (K = 6) | initial-code entropy (log r = "
      f"{math.log(RANK):.2f}) |", "|---|---|---|---|---|"] + [
          f"| {r['temperature']:g} | {r['paper_miou_best']} ({r['paper_miou_mean']}) | "
          f"{r['hamburger_params']:,} | {r['reconstruction_error']:.3f} | "
          f"{r['code_entropy']:.2f} |" for r in rows]
  print(measure.write(measure.RESULTS, "ham_table9", {"rows": rows}, "\n".join(lines) + "\n"))
  plot(rows, measure.RESULTS / "ham_table9.png")


if __name__ == "__main__":
  measure.run(main)
