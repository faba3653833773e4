"""Ham Table 3: SA, the A² block and the Hamburger (CD, NMF) on one feature map, inference and
training (forward + backward), with XLA flops counting every solver step."""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import layers
from experiments import efficiency_fused as fused_lib
from experiments import measure, plots
from experiments.measure import LABELS, MB


class DoubleAttention(nnx.Module):
  """A² block (Chen et al., A²-Nets, Eq. 3-5): G = Aᵀ softmax_positions(B) gathers m×n global
  descriptors, Z_i = G softmax_maps(V_i) distributes them; out = x + W_out Z, 1×1 convs with
  bias (A = φ(x), B = θ(x), V = ρ(x)). No HW×HW matrix."""

  def __init__(self, channels: int, features: int, maps: int, *, dtype=None, rngs: nnx.Rngs):
    conv = lambda i, o: nnx.Conv(i, o, (1, 1), dtype=dtype, rngs=rngs)
    self.phi, self.theta, self.rho = (conv(channels, features), conv(channels, maps),
                                      conv(channels, maps))
    self.out = conv(features, channels)

  def __call__(self, x):
    b, h, w, _ = x.shape
    a = self.phi(x).reshape(b, h * w, -1)
    gather = jax.nn.softmax(self.theta(x).reshape(b, h * w, -1), axis=1)
    distribute = jax.nn.softmax(self.rho(x).reshape(b, h * w, -1), axis=2)
    z = jnp.einsum("bmk,bnk->bnm", jnp.einsum("bnm,bnk->bmk", a, gather), distribute)
    return x + self.out(z.reshape(b, h, w, -1))


def build_module(name: str, channels: int, config, *, kernel: str | None = None,
                 unroll: bool = False):
  """The context modules of Ham Table 3 at `channels` input channels. `kernel`: SA's regular
  attention through the device's fused kernel (`efficiency_fused.regular_attention`); `unroll`:
  the Hamburger's solver loops unrolled, so XLA's flops count every step."""
  rngs = nnx.Rngs(0)
  if name == "sa":
    fused = {"attention_fn": fused_lib.regular_attention(kernel)} if kernel else {}
    return layers.GlobalAttention(channels, "softmax", num_heads=1, project="qkv",
                                  out_features=channels, rngs=rngs, **fused)
  if name == "a2":
    return DoubleAttention(channels, config.a2_features, config.a2_features, rngs=rngs)
  if name in ("ham_cd", "ham_nmf"):
    return layers.Hamburger(channels, ham=name[4:], dim=config.ham_dim, rank=config.ham_rank,
                            train_steps=config.ham_steps, eval_steps=config.ham_steps,
                            unroll=unroll, rngs=rngs)
  raise ValueError(f"unknown module {name!r}")


def _x(config, side, channels):
  return jax.ShapeDtypeStruct((config.batch, side, side, channels), jnp.float32)


def ham_flops(name, channels, side, config, program: str) -> float:
  """XLA flops of a Hamburger with every solver step counted (its loops unrolled)."""
  model = build_module(name, channels, config, unroll=True)
  return measure.layer_program(model, program, _x(config, side, channels))[1]["xla_flops"]


def _fused_module(config) -> tuple[str | None, str | None]:
  """(kernel, reason not run) of SA (one float32 head over all channels) with the fused kernel."""
  kernel = fused_lib.kernel_of(config)
  if not kernel or config.baseline != "sa":
    return None, None
  q = jax.ShapeDtypeStruct((config.batch, config.side**2, 1, config.channels), jnp.float32)
  return kernel, fused_lib.unsupported_reason(kernel, q, q, q)


def run(config) -> dict:
  programs, rows = {}, {}
  kernel, fused_reason = _fused_module(config)
  x = _x(config, config.side, config.channels)
  for name in list(config.modules) + (["sa_fused"] if kernel and not fused_reason else []):
    base_name = name.removesuffix("_fused")
    model = build_module(base_name, config.channels, config,
                         kernel=kernel if name != base_name else None)
    row = rows[name] = dict(module=name, size=f"{config.batch}×{config.side}²×{config.channels}",
                            params=measure.params_of(model), paper=config.paper.get(name))
    for program in ("infer", "train"):
      fn, row[program], compiled, args = measure.layer_program(model, program, x)
      row[program]["xla_flops_loop_corrected"] = (
          ham_flops(name, config.channels, config.side, config, program)
          if name.startswith("ham") and config.ham_loop_corrected_flops
          else row[program]["xla_flops"])
      programs[(name, program)] = (compiled, measure.concrete(args))
      if program == "infer":  # the fused row counts the regular SA's (one kernel call)
        row["madd"] = (measure.madd_of(fn, *args) / config.batch if name == base_name
                       else rows[base_name]["madd"])
  measure.time_programs(rows, programs, config)
  regular = [n for n in (config.baseline, "sa_fused") if n in rows]
  for r in rows.values():
    for program in ("infer", "train"):
      p, base = r[program], rows[config.baseline][program]
      p["memory_saving"] = 1 - p["total_bytes"] / base["total_bytes"]
      p["speedup_vs_fastest_regular"] = min(rows[n][program]["time_s"] for n in regular) / p[
          "time_s"]
    print(r, flush=True)

  def compile_at(name, side):
    _, acct, compiled, args = measure.layer_program(
        build_module(name, config.channels, config), "infer", _x(config, side, config.channels))
    return compiled, acct, args

  return {"rows": list(rows.values()), "sweep": measure.sweep(config, config.modules, compile_at),
          "fused": kernel and {"label": fused_lib.LABELS[kernel], "reason": fused_reason}}


def markdown(config, result, machine: str) -> str:
  bp = config.paper.get(config.baseline)
  both = lambda f: lambda r: f"{f(r['infer'])} / {f(r['train'])}"
  paper = lambda f: lambda r: f(r["paper"]) if r["paper"] else ""
  lines = measure.header(config, machine, config.about) + measure.md_table({
      "module": lambda r: LABELS[r["module"]], "params": lambda r: f"{r['params'] / 1e6:.3f}M",
      "paper params": paper(lambda p: f"{p[0]:.2f}M"), "MACs": lambda r: f"{r['madd'] / 1e9:.1f}G",
      "paper MACs": paper(lambda p: f"{p[1]:.1f}G"),
      "XLA GFLOP (infer)": lambda r: f"{r['infer']['xla_flops_loop_corrected'] / 1e9:.1f}",
      "temp MB infer / train": both(lambda p: f"{p['temp_bytes'] / MB:.0f}"),
      "total MB infer / train": both(lambda p: f"{p['total_bytes'] / MB:.0f}"),
      "paper MB infer / train": paper(lambda p: f"{p[3]:.0f} / {p[2]:.0f}"),
      "time ms infer / train": both(lambda p: f"{1e3 * p['time_s']:.1f}"),
      "paper ms infer / train": paper(lambda p: f"{p[5]:.1f} / {p[4]:.1f}"),
      "speed-up vs SA infer / train": both(lambda p: f"{p['speedup']:.1f}×"),
      "paper speed-up infer / train": paper(
          lambda p: f"{bp[5] / p[5]:.1f}× / {bp[4] / p[4]:.1f}×"),
      "memory saved vs SA infer / train": both(lambda p: f"{100 * p['memory_saving']:.1f}%"),
      "paper saved": paper(lambda p: f"{100 * (1 - p[3] / bp[3]):.1f}% / "
                                     f"{100 * (1 - p[2] / bp[2]):.1f}%")}, result["rows"])
  fused = result.get("fused")
  if fused and not fused["reason"]:
    lines += ["", f"Speed-ups against the fastest regular attention here (XLA's SA or "
              f"{fused['label']}), infer / train: " + ", ".join(
                  f"{LABELS.get(r['module'], fused['label'])} "
                  f"{r['infer']['speedup_vs_fastest_regular']:.1f}× / "
                  f"{r['train']['speedup_vs_fastest_regular']:.1f}×" for r in result["rows"])
              + "."]
  else:
    why = f"{fused['label']}: SA not run with it: {fused['reason']}" if fused else (
        fused_lib.NONE_HERE)
    lines += ["", f"{why}; the speed-ups are against XLA's SA."]
  lines += measure.sweep_lines(config, result["sweep"], "inference")
  return "\n".join(lines) + "\n"


def plot(config, result, path, machine: str) -> None:
  """The sweep's plot (its link is in the sweep's section)."""
  if result.get("sweep"):
    plots.sweep_plot(config, result["sweep"], path, LABELS, machine)
