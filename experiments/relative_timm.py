"""Relative self-attention (AA Eq. 3-4) beside timm's BottleneckAttn; AA-ResNet-50 beside ResNet-50.

  python -m experiments.relative_timm --config=configs/efficiency/relative_timm.py[:tiny]

See configs/efficiency/relative_timm.py for the case and the goals. Every
program of one grid size and mode is compiled (ours) or built (timm), warmed
up and timed in interleaved rounds (`measure.time_side_by_side`, median and
minimum of the samples). Ours is also accounted by XLA: temporaries
(memory_analysis), bytes accessed (cost_analysis), the number of kernels of
the compiled program (fusions, dots, copies, ... in the entry computation and
loop bodies) and how many of them write an array of at least one query
row's logits (B·H·Y·XY elements): the passes over the logits.
torch/timm are optional: without them the timm column says so.
"""

import json
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp
from absl import flags
from flax import nnx
from ml_collections import config_flags

from attention_lab import layers, models
from experiments import measure

GIB = measure.GIB


# ----------------------------------------------------------------------------------------------
# timm (optional).


def load_bottleneck_attn():
  """timm's BottleneckAttn class, or None without torch/timm.

  timm/__init__ imports torchvision; where only a CPU torch wheel is installed and
  torchvision is absent or built for another torch, the module file
  timm/layers/bottleneck_attn.py (which needs only torch and three timm helper
  modules) is imported without running timm's package __init__ files.
  """
  try:
    import torch  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return None
  try:
    from timm.layers.bottleneck_attn import BottleneckAttn  # pylint: disable=g-import-not-at-top
    return BottleneckAttn
  except (ImportError, RuntimeError):
    pass
  import importlib.util  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("timm")
  if spec is None or spec.origin is None:
    return None
  for name in [n for n in sys.modules if n == "timm" or n.startswith("timm.")]:
    del sys.modules[name]
  root = pathlib.Path(spec.origin).parent
  for name, path in (("timm", root), ("timm.layers", root / "layers")):
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
  from timm.layers.bottleneck_attn import BottleneckAttn  # pylint: disable=g-import-not-at-top
  return BottleneckAttn


def timm_program(cls, config, side, mode):
  """(run, ()) calling timm's BottleneckAttn forward (no_grad) or forward + backward."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  module = cls(config.channels, config.channels, feat_size=(side, side),
               num_heads=config.heads, dim_head=config.head_dim)
  x = torch.randn(config.batch, config.channels, side, side, requires_grad=mode == "train")
  g = torch.ones(config.batch, config.channels, side, side)

  def run():
    if mode == "forward":
      with torch.no_grad():
        module(x)
    else:
      module.zero_grad(set_to_none=True)
      x.grad = None
      module(x).backward(g)
  return run, ()


# ----------------------------------------------------------------------------------------------
# Ours.

_KERNEL = re.compile(r"= (\w+)\[([\d,]*)\][^ ]* (fusion|dot|copy|transpose|concatenate|pad|"
                     r"reduce|convolution|custom-call|scatter|gather|dynamic-update-slice)\(")


def hlo_counts(text: str, row_logits: int) -> dict:
  """Kernels of the entry computation and loop bodies; those writing ≥ row_logits elements."""
  kernels, big = 0, 0
  for block in re.split(r"\n(?=%|ENTRY)", text):
    head = block.split("\n", 1)[0]
    if not (head.startswith("ENTRY") or "body" in head.split("(")[0]):
      continue
    for m in _KERNEL.finditer(block):
      kernels += 1
      size = 1
      for dim in filter(None, m.group(2).split(",")):
        size *= int(dim)
      big += size >= row_logits
  return {"kernels": kernels, "logits_passes": big}


def our_program(config, side, mode):
  chunk = "auto"
  model = layers.GlobalAttention(config.channels, "relative", num_heads=config.heads,
                                 project="qkv", use_bias=False, spatial_shape=(side, side),
                                 query_chunk_size=chunk, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (config.batch, side, side, config.channels))
  if mode == "forward":
    fn, state = measure.inference_fn(model)
    args = (state, x)
  else:
    fn, params, rest = measure.training_fn(model)
    args = (params, rest, x, jnp.ones_like(x))
  compiled, acct = measure.compile_fn(fn, *args)
  row_logits = config.batch * config.heads * side * side * side
  acct.update(hlo_counts(compiled.as_text(), row_logits), chunk=chunk)
  return compiled, args, acct


def measure_side(config, side, timm_cls) -> dict:
  result = {}
  for mode in config.modes:
    programs, accts = {}, {}
    if timm_cls is not None and side <= config.timm_max_side:
      programs["timm"] = timm_program(timm_cls, config, side, mode)
    compiled, args, accts["after"] = our_program(config, side, mode)
    programs["after"] = (compiled, args)
    print(side, mode, accts["after"], flush=True)
    big = side >= 56  # seconds per call: one call per sample, no calibration runs
    repeats = (config.huge_repeats if side >= 112 else config.big_repeats) if big else \
        config.repeats
    times = measure.time_side_by_side(programs, repeats, 0.0 if big else config.min_sample_s)
    row = {"accounting": accts, "measured_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    for name, t in times.items():
      row[name] = {"time_s": t["time_s"], "min_s": min(t["samples"]), "samples": t["samples"]}
    if "timm" in times:
      row["after_speedup_vs_timm"] = times["timm"]["time_s"] / times["after"]["time_s"]
    print(side, mode, {k: v for k, v in row.items() if k != "accounting"}, flush=True)
    result[mode] = row
  return result


def measure_resnets(config) -> dict:
  """AA-ResNet-50 / ResNet-50 forward + backward (params and input) at 224², side by side."""
  size, batch = config.resnet_size, config.resnet_batch
  programs, accts = {}, {}
  x = jax.random.normal(jax.random.key(0), (batch, size, size, 3))
  g = jnp.ones((batch, 1000), jnp.float32)
  for key in ("resnet50", "aa_resnet50"):
    model = models.create(key, num_classes=1000, rngs=nnx.Rngs(0), image_size=size)
    fn, params, rest = measure.training_fn(model)
    compiled, accts[key] = measure.compile_fn(fn, params, rest, x, g)
    programs[key] = (compiled, (params, rest, x, g))
    print(key, accts[key], flush=True)
  times = measure.time_side_by_side(programs, config.resnet_repeats, config.min_sample_s)
  out = {k: {"time_s": t["time_s"], "min_s": min(t["samples"]), "samples": t["samples"],
             "temp_bytes": accts[k]["temp_bytes"], "xla_flops": accts[k]["xla_flops"]}
         for k, t in times.items()}
  out["ratio"] = out["aa_resnet50"]["time_s"] / out["resnet50"]["time_s"]
  out["batch"], out["size"] = batch, size
  print("resnets", out, flush=True)
  return out


# ----------------------------------------------------------------------------------------------
# Report.


def _ms(t):
  return f"{t * 1e3:.1f}" if t < 10 else f"{t:.1f} s"


def markdown(config, result) -> str:
  m = result["machine"]
  lines = [
      "# Relative self-attention beside timm's BottleneckAttn", "",
      f"Measured on {measure.machine_line(m)}; torch {result.get('torch', 'not installed')}, "
      f"timm {result.get('timm', 'not installed')} ({result.get('torch_threads', '?')} threads). "
      "Command: `python -m experiments.relative_timm "
      "--config=configs/efficiency/relative_timm.py`. " + result.get("note", ""), "",
      f"Case: 1×1 qkv projection + 2D relative self-attention, batch {config.batch}, "
      f"{config.channels} channels, {config.heads} heads × {config.head_dim}. Ours: "
      "`GlobalAttention(relative, project='qkv', use_bias=False)` with the library default "
      "(`query_chunk_size='auto'`), *after*; *before* = the operator before its blocked custom VJP "
      "(unchunked, its default; chunk 448 at 112²; in git history, "
      "`experiments/relative_timm.py` at commit 1ab22cf), in the rows measured while it was "
      "kept. Times: median (min) of interleaved "
      "samples after warm-up, all programs of a row in the same rounds. Speed-up = timm / "
      "ours (> 1: ours faster).", "",
      "| grid | pass | timm ms | before ms | after ms | after vs timm | before vs timm | "
      "after vs before | temp MiB before → after | kernels before → after | "
      "logits passes before → after | XLA bytes MB before → after |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for side in sorted(result["sides"], key=int):
    for mode in config.modes:
      row = result["sides"][side][mode]
      a = row["accounting"]["after"]
      b = row["accounting"].get("before")
      timm = (f"{_ms(row['timm']['time_s'])} ({_ms(row['timm']['min_s'])})" if "timm" in row
              else "not run" if result.get("timm") else "not installed")
      fmt = lambda k: f"{_ms(row[k]['time_s'])} ({_ms(row[k]['min_s'])})" if k in row else "—"
      pair = lambda k, f: f"{f(b[k])} → {f(a[k])}" if b else f(a[k])
      sp = lambda k: f"{row[k]:.2f}×" if k in row else "—"
      lines.append(
          f"| {side}² | {mode} | {timm} | {fmt('before')} | {fmt('after')} | "
          f"{sp('after_speedup_vs_timm')} | {sp('before_speedup_vs_timm')} | "
          f"{sp('after_speedup_vs_before')} | {pair('temp_bytes', lambda v: f'{v / 2**20:.1f}')} | "
          f"{pair('kernels', str)} | {pair('logits_passes', str)} | "
          f"{pair('xla_bytes_accessed', lambda v: f'{v / 1e6:.0f}')} |")
  lines += ["", "Kernels: XLA kernels (fusions, dots, copies, ...) of the compiled program, "
            "entry and loop bodies (a loop body counted once); logits passes: those that "
            "write an array of at least one query row's logits (B·H·Y·XY elements). XLA "
            "bytes: cost_analysis 'bytes accessed' (a while loop's body counted once, so "
            "chunked programs read as less than they move)."]
  goals = result.get("goals", {})
  if goals:
    lines += ["", "## Goals", ""] + [f"- {k}: {v}" for k, v in goals.items()]
  rn = result.get("resnets")
  if rn:
    lines += ["", f"## AA-ResNet-50 vs ResNet-50, forward + backward at {rn['size']}², "
              f"batch {rn['batch']}", "",
              "Gradients of <logits, 1> w.r.t. the parameters and the input (a training step "
              "without the optimizer update), interleaved medians (min).", "",
              "| model | ms | temp MiB | XLA GFLOP | / ResNet-50 |", "|---|---|---|---|---|"]
    for key, label in (("resnet50", "ResNet-50"), ("aa_resnet50", "AA-ResNet-50 (after)"),
                       ("aa_resnet50_before", "AA-ResNet-50 (before)")):
      if key not in rn:
        continue
      r = rn[key]
      lines.append(f"| {label} | {_ms(r['time_s'])} ({_ms(r['min_s'])}) | "
                   f"{r['temp_bytes'] / 2**20:.0f} | {r['xla_flops'] / 1e9:.1f} | "
                   f"{r['time_s'] / rn['resnet50']['time_s']:.3f}× |")
  return "\n".join(lines) + "\n"


def run(config) -> dict:
  timm_cls = load_bottleneck_attn()
  result = {"machine": measure.machine(), "sides": {}}
  if timm_cls is not None:
    import timm  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    result.update(torch=torch.__version__, timm=timm.__version__ if hasattr(timm, "__version__")
                  else "installed", torch_threads=torch.get_num_threads())
  for side in config.sides:
    result["sides"][str(side)] = measure_side(config, side, timm_cls)
    if config.out_dir:  # keep what is measured if a later size fails
      pathlib.Path(config.out_dir).mkdir(parents=True, exist_ok=True)
      pathlib.Path(config.out_dir, f"relative_timm_{side}.json").write_text(
          json.dumps(result["sides"][str(side)], default=str))
  goals = {}
  for side in config.sides:
    for mode in config.modes:
      row = result["sides"][str(side)][mode]
      if "after_speedup_vs_timm" in row:
        sp = row["after_speedup_vs_timm"]
        goals[f"{side}² {mode} ≥ timm"] = f"{'met' if sp >= 1 else 'NOT met'} ({sp:.2f}×)"
  if "56" in result["sides"] and "train" in result["sides"]["56"]:
    temp = result["sides"]["56"]["train"]["accounting"]["after"]["temp_bytes"] / GIB
    goals["56² train temporaries ≤ 0.5 GiB"] = f"{'met' if temp <= 0.5 else 'NOT met'} " \
                                               f"({temp:.3f} GiB)"
  if config.aa_resnet:
    result["resnets"] = measure_resnets(config)
    ratio = result["resnets"]["ratio"]
    goals["AA-ResNet-50 ≤ 1.15× ResNet-50"] = f"{'met' if ratio <= 1.15 else 'NOT met'} " \
                                              f"({ratio:.3f}×)"
  result["goals"] = goals
  return result


def main(argv):
  del argv
  config = flags.FLAGS.config
  result = run(config)
  out = measure.out_dir_of(config)
  saved = out / "relative_timm.json"
  if config.merge and saved.exists():  # keep the sizes (and ResNets) this run did not measure
    previous = json.loads(saved.read_text())
    result["sides"] = {**previous.get("sides", {}), **result["sides"]}
    if "resnets" not in result and "resnets" in previous:
      result["resnets"] = previous["resnets"]
    result["goals"] = {**previous.get("goals", {}), **result["goals"]}
    result["note"] = "Sizes measured in separate runs where the rows say so. "
  print(measure.write(out, "relative_timm", result, markdown(config, result)))


if __name__ == "__main__":
  # Defined here, not at import: tests import this module beside experiments.efficiency,
  # which defines its own --config.
  config_flags.DEFINE_config_file("config", None, "relative_timm config.")
  measure.run(main)
