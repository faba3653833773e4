"""Ham Table 3: context modules on one feature map, inference and training.

Run through `python -m experiments.efficiency --config=configs/efficiency/ham_table3.py`.

SA (`layers.GlobalAttention`, one head), the A² block (`DoubleAttention` here:
Chen et al., A²-Nets, NeurIPS 2018; attention_lab.layers has none) and the
Hamburger (CD, NMF), each as an inference program (evaluation mode) and a
training program (forward + backward, `measure.training_fn`), compiled once:
parameters, MACs, XLA FLOPs with the solver loops counted K times, XLA memory,
times side by side; and the inference programs against the grid side.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments import efficiency_fused as fused_lib
from experiments import measure
from experiments.measure import LABELS, MB


class DoubleAttention(nnx.Module):
  """A² block: gather global descriptors, distribute them back (A²-Nets Eq. 3-5).

  A = φ(x) (m features), B = θ(x) (n attention maps, softmax over positions),
  V = ρ(x) (n attention vectors, softmax over the n maps); G = Aᵀ softmax(B)
  (m×n global descriptors), Z_i = G softmax(V_i); out = x + W_out Z. All maps
  are 1×1 convolutions with bias. Time O(HW·(C·(m+2n) + m·C + 2·m·n)), memory
  O(HW·(m+2n)); no HW×HW matrix. With C = m = n = 512 at 128² this is Ham
  Table 3's A² row: 1.05M parameters, 25.8G multiply-adds.
  """

  def __init__(self, channels: int, features: int, maps: int, *, dtype=None, rngs: nnx.Rngs):
    conv = lambda i, o: nnx.Conv(i, o, (1, 1), kernel_init=_INIT, dtype=dtype, rngs=rngs)
    self.phi, self.theta, self.rho = conv(channels, features), conv(channels, maps), conv(
        channels, maps)
    self.out = conv(features, channels)

  def __call__(self, x):
    b, h, w, _ = x.shape
    a = self.phi(x).reshape(b, h * w, -1)                      # (B, N, m)
    gather = jax.nn.softmax(self.theta(x).reshape(b, h * w, -1), axis=1)   # over positions
    distribute = jax.nn.softmax(self.rho(x).reshape(b, h * w, -1), axis=2)  # over maps
    g = jnp.einsum("bnm,bnk->bmk", a, gather)                  # (B, m, n)
    z = jnp.einsum("bmk,bnk->bnm", g, distribute)              # (B, N, m)
    return x + self.out(z.reshape(b, h, w, -1))


def _INIT(key, shape, dtype=jnp.float32):  # pylint: disable=invalid-name
  """N(0, 0.02) kernels (DCGAN/SAGAN practice), drawn by numpy from the key's bits.

  Numpy sampling needs no XLA compilation per kernel shape (each jax.random
  initialiser compiles separately, ~1 s apiece on a small CPU), which keeps the
  efficiency tables' tiny presets fast. Deterministic for a given key.
  """
  seed = int(np.asarray(jax.random.key_data(key)).ravel()[-1])
  return jnp.asarray(np.random.default_rng(seed).normal(0.0, 0.02, shape), dtype)


# Builders of the Ham Table 3 rows (experiments/efficiency.py, experiments/performance_goals.py).


def build_module(name: str, channels: int, config):
  """The context modules of Ham Table 3 at `channels` input channels."""
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  rngs = nnx.Rngs(0)
  if name == "sa":
    return layers.GlobalAttention(channels, "softmax", num_heads=1, project="qkv",
                                  out_features=channels, rngs=rngs)
  if name == "a2":
    return DoubleAttention(channels, config.a2_features, config.a2_features, rngs=rngs)
  if name in ("ham_cd", "ham_nmf"):
    return layers.Hamburger(channels, ham=name[4:], dim=config.ham_dim, rank=config.ham_rank,
                            train_steps=config.ham_steps, eval_steps=config.ham_steps,
                            rngs=rngs)
  raise ValueError(f"unknown module {name!r}")


def ham_flops(name, channels, side, config, program: str) -> float:
  """XLA flops of a Hamburger with every solver step counted (loops unrolled for counting)."""
  model = build_module(name, channels, config)
  with measure.unrolled_loops():
    return module_program(model, program, config.batch, side, channels)[1]["xla_flops"]


def module_program(model, program, batch, side, channels):
  """(fn, accounting, compiled, abstract args) for 'infer' or 'train' at (batch, side, side,
  channels)."""
  x = jax.ShapeDtypeStruct((batch, side, side, channels), jnp.float32)
  if program == "infer":
    fn, state = measure.inference_fn(model)
    args = (state, x)
  else:
    fn, params, rest = measure.training_fn(model)
    args = (params, rest, x, x)
  compiled, acct = measure.compile_fn(fn, *args)
  return fn, acct, compiled, args


def _fused_module(config) -> tuple[str | None, str | None]:
  """(kernel, reason not run) of the baseline SA with the device's fused attention.

  SA is one head over all channels in float32 (the table's module), so q is
  (B, side², 1, channels)."""
  kernel = fused_lib.kernel_of(config)
  if not kernel or config.baseline != "sa":
    return None, None
  q = jax.ShapeDtypeStruct((config.batch, config.side**2, 1, config.channels), jnp.float32)
  return kernel, fused_lib.unsupported_reason(kernel, q, q, q)


def _programs(name, config, kernel):
  """{program: (fn, accounting, compiled, abstract args)} of one row ('sa_fused': SA through
  the fused kernel), the accounting with `xla_flops_loop_corrected`."""
  model = build_module(name.removesuffix("_fused"), config.channels, config)
  out = {}
  for program in ("infer", "train"):
    if name.endswith("_fused"):
      with fused_lib.replaced_regular_attention(kernel):
        out[program] = module_program(model, program, config.batch, config.side,
                                      config.channels)
    else:
      out[program] = module_program(model, program, config.batch, config.side, config.channels)
    acct = out[program][1]
    acct["xla_flops_loop_corrected"] = (
        ham_flops(name, config.channels, config.side, config, program)
        if name.startswith("ham") and config.ham_loop_corrected_flops else acct["xla_flops"])
  return model, out


def run(config) -> dict:
  side, channels = config.side, config.channels
  programs, results = {}, {}
  kernel, fused_reason = _fused_module(config)
  names = list(config.modules) + (["sa_fused"] if kernel and not fused_reason else [])
  for name in names:
    model, compiled = _programs(name, config, kernel)
    fn, _, _, args = compiled["infer"]
    results[name] = dict(module=name, size=f"{config.batch}×{side}²×{channels}",
                         params=measure.params_of(model),
                         madd=measure.madd_of(fn, *args) / config.batch,
                         **{p: c[1] for p, c in compiled.items()})
    for program, (_, _, exe, args) in compiled.items():
      programs[(name, program)] = (exe, measure.concrete(args))
  for program in ("infer", "train"):
    chosen = {k: v for k, v in programs.items() if k[1] == program}
    for (name, _), t in measure.time_side_by_side(chosen, config.repeats,
                                                  config.min_sample_s).items():
      results[name][program].update(time_s=t["time_s"], time_samples=t["samples"])
  base = results[config.baseline]
  regular = [n for n in (config.baseline, "sa_fused") if n in results]
  for name, r in results.items():
    for program in ("infer", "train"):
      r[program]["speedup"] = base[program]["time_s"] / r[program]["time_s"]
      r[program]["memory_saving"] = 1 - r[program]["total_bytes"] / base[program]["total_bytes"]
      fastest = min(results[n][program]["time_s"] for n in regular)
      r[program]["speedup_vs_fastest_regular"] = fastest / r[program]["time_s"]
    r["paper"] = config.paper.get(name)
    print(r, flush=True)

  def compile_at(name, side):
    model = build_module(name, config.channels, config)
    _, acct, compiled, args = module_program(model, "infer", config.batch, side, config.channels)
    return compiled, acct, args

  fused = None if not kernel else {"label": fused_lib.LABELS[kernel], "reason": fused_reason}
  sweep = measure.sweep(config, config.modules, compile_at)
  return {"rows": list(results.values()), "sweep": sweep, "fused": fused}


def markdown(config, result, machine: str) -> str:
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine}. Command: `{measure.command_of(config)}`.", "",
      "Input 1×128×128×512 (the paper's 1×512×128×128, channels-last), float32. Params: every "
      "trainable parameter. MACs: multiply-adds of the convolutions and matrix products of the "
      "inference forward (the paper's torchprofile convention), solver loops counted K times. "
      "XLA GFLOP: cost_analysis with the solver loops counted K times (XLA counts a loop body "
      "once, so the Hamburger is counted on its program with the loops unrolled; see "
      "`efficiency_modules.ham_flops`). Memory: XLA memory_analysis, temporaries + arguments + "
      "outputs (arguments include the parameters and, in training, the input and the output "
      "cotangent). Inference = evaluation mode forward; training = forward + backward (grads "
      "w.r.t. parameters and input of <out, g>). Time: median of "
      f"{config.repeats} interleaved samples after warm-up. The paper measured PyTorch on an "
      "NVIDIA TITAN Xp ('GPU load', 'GPU time'), so compare ratios, not absolute values.", "",
      "| module | params | paper params | MACs | paper MACs | XLA GFLOP (infer) | "
      "temp MB infer / train | total MB infer / train | paper MB infer / train | "
      "time ms infer / train | paper ms infer / train | speed-up vs SA infer / train | "
      "paper speed-up infer / train | memory saved vs SA infer / train | paper saved |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  base_paper = config.paper.get(config.baseline)
  for r in result["rows"]:
    p = r["paper"]
    i, t = r["infer"], r["train"]
    if p:
      pspeed = f"{base_paper[5] / p[5]:.1f}× / {base_paper[4] / p[4]:.1f}×"
      psaved = f"{100 * (1 - p[3] / base_paper[3]):.1f}% / {100 * (1 - p[2] / base_paper[2]):.1f}%"
      ppar, pmac = f"{p[0]:.2f}M", f"{p[1]:.1f}G"
      pmem, ptime = f"{p[3]:.0f} / {p[2]:.0f}", f"{p[5]:.1f} / {p[4]:.1f}"
    else:
      pspeed = psaved = ppar = pmac = pmem = ptime = ""
    lines.append(
        f"| {LABELS[r['module']]} | {r['params'] / 1e6:.3f}M | {ppar} | {r['madd'] / 1e9:.1f}G | "
        f"{pmac} | {i['xla_flops_loop_corrected'] / 1e9:.1f} | "
        f"{i['temp_bytes'] / MB:.0f} / {t['temp_bytes'] / MB:.0f} | "
        f"{i['total_bytes'] / MB:.0f} / {t['total_bytes'] / MB:.0f} | {pmem} | "
        f"{1e3 * i['time_s']:.1f} / {1e3 * t['time_s']:.1f} | {ptime} | "
        f"{i['speedup']:.1f}× / {t['speedup']:.1f}× | {pspeed} | "
        f"{100 * i['memory_saving']:.1f}% / {100 * t['memory_saving']:.1f}% | {psaved} |")
  fused = result.get("fused")
  if fused is None:
    lines += ["", "Fused regular attention (cuDNN flash on a GPU, Pallas flash on a TPU): none "
              "on this device; the speed-ups are against XLA's SA."]
  elif fused["reason"]:
    lines += ["", f"{fused['label']}: SA not run with it: {fused['reason']}; the speed-ups are "
              "against XLA's SA."]
  else:
    lines += ["", f"Speed-ups against the fastest regular attention here (XLA's SA or "
              f"{fused['label']}), infer / train: " + ", ".join(
                  f"{LABELS.get(r['module'], fused['label'])} "
                  f"{r['infer']['speedup_vs_fastest_regular']:.1f}× / "
                  f"{r['train']['speedup_vs_fastest_regular']:.1f}×" for r in result["rows"])
              + "."]
  lines += measure.sweep_lines(config, result["sweep"], "inference")
  return "\n".join(lines) + "\n"


