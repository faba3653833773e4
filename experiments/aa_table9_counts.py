"""AA Table 9's parameters and FLOPS per attention layer of AA-ResNet-50, by the paper's convention.

  python -m experiments.aa_table9_counts

The paper (appendix A.2) lists 43k / 90k / 190k parameters and 22M / 40M / 19M FLOPS per layer
(stages 2 / 3 / 4). Its parameters are the attention branch's two 1×1 convolutions with
dk = max(κ·Fout, 20·Nh) = 160 keys; its FLOPS are 2 × the MAdd of the q/k/v and output convs,
relative logits and weights·v on the attention grid. The terms are checked against `nnx`
counts and the traced jaxpr of our AugmentedConv. Which conventions were tried: the notes of
experiments/results/aa_table9_counts.md.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import cli
from attention_lab.layers.augmented_conv import AugmentedConv
from experiments import measure, model_stats

HEADS, KAPPA, UPSILON, MIN_KEY_DIMS = 8, 0.2, 0.1, 20
# (stage, layers, Fin = Fout, input side, attention side): ResNet-50's bottleneck 3×3 convs.
STAGES = (("stage 2", 4, 128, 28, 14), ("stage 3", 6, 256, 14, 14), ("stage 4", 3, 512, 7, 7))
PAPER_PARAMS = (43e3, 90e3, 190e3)
PAPER_FLOPS = (22e6, 40e6, 19e6)
PAPER_TOTALS = (1.3e6, 390e6)
PARAM_TERMS = ("qkv kernel", "output kernel")
FLOPS_TERMS = ("qkv conv", "output conv", "relative logits", "weights·v")


def _layer(cin, side, min_key_dims, downsample=False):
  return nnx.eval_shape(lambda: AugmentedConv(
      cin, cin, 3, kappa=KAPPA, upsilon=UPSILON, heads=HEADS, min_key_dims_per_head=min_key_dims,
      downsample=downsample, spatial_shape=(side, side), rngs=nnx.Rngs(0)))


def depths(channels: int, min_key_dims: int) -> tuple[int, int]:
  """(dk, dv) as AugmentedConv rounds them."""
  layer = _layer(channels, 8, min_key_dims)
  return layer.dk, layer.dv


def param_terms(cin: int, dk: int, dv: int, side: int) -> dict[str, int]:
  """The attention branch's parameters, by term (the paper's code has conv biases)."""
  return {"qkv kernel": cin * (2 * dk + dv), "qkv bias": 2 * dk + dv, "output kernel": dv * dv,
          "output bias": dv, "relative tables": 2 * (2 * side - 1) * (dk // HEADS)}


def madd_terms(cin: int, dk: int, dv: int, side: int, qkv_side: int) -> dict[str, int]:
  """Multiply-adds of the attention branch per image, by term."""
  n = side * side
  return {"qkv conv": qkv_side ** 2 * cin * (2 * dk + dv), "output conv": n * dv * dv,
          "q·k logits": n * n * dk, "relative logits": 2 * n * (2 * side - 1) * dk,
          "weights·v": n * n * dv}


def measured(cin: int, side: int, attention_side: int,
             min_key_dims: int) -> tuple[int, int, int]:
  """(attention-branch parameters, attention-branch MAdd, whole-layer MAdd) of our
  AugmentedConv, from nnx and the traced jaxpr."""
  layer = _layer(cin, side, min_key_dims, downsample=attention_side < side)
  params = sum(math.prod(v.get_value().shape) for path, v in
               nnx.to_flat_state(nnx.state(layer, nnx.Param)) if path[0] != "conv")
  graphdef, state = nnx.split(layer)
  x = jax.ShapeDtypeStruct((1, side, side, cin), jnp.float32)
  madd = lambda f: model_stats.count_madd(jax.make_jaxpr(f)(state, x).jaxpr)
  return (params, madd(lambda s, x: nnx.merge(graphdef, s)._attend(x)),  # pylint: disable=protected-access
          madd(lambda s, x: nnx.merge(graphdef, s)(x)))


def counts() -> dict:
  checks, ours_params, ours_flops, conv_params, conv_flops, with_qk = [], [], [], [], [], []
  for name, _, c, s, a in STAGES:
    for min_key in (0, MIN_KEY_DIMS):
      dk, dv = depths(c, min_key)
      p, madd, layer_madd = measured(c, s, a, min_key)
      terms_p, terms_m = param_terms(c, dk, dv, a), madd_terms(c, dk, dv, a, s)
      checks.append(dict(stage=name, dk=dk, dv=dv, params_nnx=p,
                         params_formula=(terms_p["qkv kernel"] + terms_p["output kernel"]
                                         + terms_p["relative tables"]),
                         madd_jaxpr=madd, madd_formula=sum(terms_m.values()),
                         layer_madd=layer_madd))
    ours_params.append(checks[-2]["params_nnx"])
    ours_flops.append(checks[-2]["layer_madd"])
    dk, dv = depths(c, MIN_KEY_DIMS)
    conv_params.append(sum(param_terms(c, dk, dv, a)[t] for t in PARAM_TERMS))
    grid = madd_terms(c, dk, dv, a, a)  # q/k/v on the attention grid
    conv_flops.append(2 * sum(grid[t] for t in FLOPS_TERMS))
    with_qk.append(2 * sum(grid.values()))
  return dict(stages=[s[0] for s in STAGES], paper_params=PAPER_PARAMS, paper_flops=PAPER_FLOPS,
              paper_totals=PAPER_TOTALS, ours_params=ours_params, ours_flops=ours_flops,
              convention_params=conv_params, convention_flops=conv_flops,
              convention_flops_with_qk=with_qk, checks=checks)


def markdown(r) -> str:
  k = lambda vs: " | ".join(f"{v / 1e3:.1f}k" for v in vs)
  m = lambda vs: " | ".join(f"{v / 1e6:.1f}M" for v in vs)
  worst = lambda vs, paper: f"{100 * max(abs(v - p) / p for v, p in zip(vs, paper)):.1f}%"
  small = "/".join(str(c["dk"]) for c in r["checks"][::2])
  total = lambda vs: sum(n * v for (_, n, *_), v in zip(STAGES, vs))
  lines = [
      "# AA Table 9: the parameters and FLOPS columns", "",
      "Command: `python -m experiments.aa_table9_counts` (arithmetic; nothing is timed). The "
      "memory column is reproduced in [aa_table9.md](aa_table9.md). Plot: "
      "[aa_table9_counts.png](aa_table9_counts.png).", "",
      "AA-ResNet-50's attention layers (κ = 2υ = 0.2, Nh = 8; Fin = Fout = 128 / 256 / 512; "
      "attention on 14² / 14² / 7², stage 2 after 3×3/2 pooling), with dk = κ·Fout rounded to "
      f"a multiple of Nh ({small}) and dk = max(κ·Fout, 20·Nh) = 160 (AA Sec. 4.1's minimum "
      "of 20 key dimensions per head, which models/resnet.py's AA-ResNets use).", "",
      "| per layer | dk | stage 2 | stage 3 | stage 4 | worst Δ | 13 layers |", "|---|---|---|---|---|---|---|",
      "| paper parameters | | 43k | 90k | 190k | | 1.3M |",
      f"| ours without the 20-per-head minimum (branch: qkv + output kernels + relative tables) "
      f"| {small} | {k(r['ours_params'])} | {worst(r['ours_params'], PAPER_PARAMS)} | |",
      f"| paper's convention: {' + '.join(PARAM_TERMS)} | 160 | {k(r['convention_params'])} | "
      f"{worst(r['convention_params'], PAPER_PARAMS)} | {total(r['convention_params']) / 1e6:.2f}M |",
      "| paper FLOPS | | 22M | 40M | 19M | | 390M |",
      f"| ours in aa_table9.md: MAdd of the whole AA layer, 3×3 convolution included | {small} | "
      f"{m(r['ours_flops'])} | {worst(r['ours_flops'], PAPER_FLOPS)} | |",
      f"| nearest convention: 2 × ({' + '.join(FLOPS_TERMS)}), q/k/v on the attention grid | "
      f"160 | {m(r['convention_flops'])} | {worst(r['convention_flops'], PAPER_FLOPS)} | "
      f"{total(r['convention_flops']) / 1e6:.0f}M |",
      f"| the same with the q·k logits (N²·dk) | 160 | {m(r['convention_flops_with_qk'])} | "
      f"{worst(r['convention_flops_with_qk'], PAPER_FLOPS)} | |",
      "", "## Checks of the arithmetic", "",
      "| stage | dk / dv | params: nnx count of our layer / qkv + output kernels + tables "
      "| attention-branch MAdd: traced jaxpr / sum of the terms |", "|---|---|---|---|"]
  lines += [f"| {c['stage']} | {c['dk']} / {c['dv']} | {c['params_nnx']:,} / "
            f"{c['params_formula']:,} | {c['madd_jaxpr']:,} / {c['madd_formula']:,} |"
            for c in r["checks"]]
  return "\n".join(lines) + "\n"


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; this command takes no arguments")
  from experiments import plots  # pylint: disable=g-import-not-at-top
  record = counts()
  print(measure.write(measure.RESULTS, "aa_table9_counts", record, markdown(record)))
  plots.draw("aa_table9_counts", record)


if __name__ == "__main__":
  measure.run(main)
