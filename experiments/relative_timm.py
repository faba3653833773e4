"""Relative self-attention (AA Eq. 3-4) beside timm's BottleneckAttn; AA-ResNet-50 beside ResNet-50.

  python -m experiments.relative_timm --config=configs/efficiency/relative_timm.py[:tiny]

The case and the goals: configs/efficiency/relative_timm.py. timm's column is optional (skipped
without timm). Ours is also accounted by XLA, with its kernels and its passes over the logits.
"""

import json
import math
import re
import time

import jax
import jax.numpy as jnp
from absl import flags
from flax import nnx
from ml_collections import config_flags

from attention_lab import layers, models
from experiments import measure

_KERNEL = re.compile(r"= (\w+)\[([\d,]*)\][^ ]* (fusion|dot|copy|transpose|concatenate|pad|"
                     r"reduce|convolution|custom-call|scatter|gather|dynamic-update-slice)\(")


def load_bottleneck_attn():
  """timm's BottleneckAttn class, or None (with a line saying how to install it)."""
  try:
    from timm.layers.bottleneck_attn import BottleneckAttn  # pylint: disable=g-import-not-at-top
    return BottleneckAttn
  except (ImportError, RuntimeError) as e:
    print(f"timm column skipped ({e}): pip install timm", flush=True)
    return None


def timm_program(cls, config, side, mode):
  """(run, ()) calling timm's BottleneckAttn forward (no_grad) or forward + backward."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  module = cls(config.channels, config.channels, feat_size=(side, side),
               num_heads=config.heads, dim_head=config.head_dim)
  x = torch.randn(config.batch, config.channels, side, side, requires_grad=mode == "train")

  def run():
    if mode == "forward":
      with torch.no_grad():
        module(x)
    else:
      module.zero_grad(set_to_none=True)
      x.grad = None
      module(x).backward(torch.ones_like(x))
  return run, ()


def hlo_counts(text: str, row_logits: int) -> dict:
  """Kernels of the entry computation and loop bodies; those writing ≥ row_logits elements."""
  kernels, big = 0, 0
  for block in re.split(r"\n(?=%|ENTRY)", text):
    head = block.split("\n", 1)[0]
    if head.startswith("ENTRY") or "body" in head.split("(")[0]:
      for m in _KERNEL.finditer(block):
        kernels += 1
        big += math.prod(int(d) for d in filter(None, m.group(2).split(","))) >= row_logits
  return {"kernels": kernels, "logits_passes": big}


def our_program(config, side, mode):
  """(compiled, args, XLA accounting with `hlo_counts`) of our layer's `mode` pass."""
  model = layers.GlobalAttention(config.channels, "relative", num_heads=config.heads,
                                 project="qkv", use_bias=False, spatial_shape=(side, side),
                                 query_chunk_size="auto", rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (config.batch, side, side, config.channels))
  program = "infer" if mode == "forward" else "train"
  _, acct, compiled, args = measure.layer_program(model, program, x)
  acct.update(hlo_counts(compiled.as_text(), config.batch * config.heads * side ** 3))
  return compiled, args, acct


def _times(programs, repeats, min_sample_s) -> dict:
  times = measure.time_side_by_side(programs, repeats, min_sample_s)
  return {k: {"time_s": t["time_s"], "min_s": min(t["samples"]), "samples": t["samples"]}
          for k, t in times.items()}


def measure_side(config, side, timm_cls) -> dict:
  big = side >= 56  # seconds per call: one call per sample, no calibration runs
  repeats = config.huge_repeats if side >= 112 else config.big_repeats if big else config.repeats
  result = {}
  for mode in config.modes:
    programs = {}
    if timm_cls is not None and side <= config.timm_max_side:
      programs["timm"] = timm_program(timm_cls, config, side, mode)
    compiled, args, acct = our_program(config, side, mode)
    programs["after"] = (compiled, args)
    row = {"accounting": {"after": acct},
           "measured_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           **_times(programs, repeats, 0.0 if big else config.min_sample_s)}
    if "timm" in row:
      row["after_speedup_vs_timm"] = row["timm"]["time_s"] / row["after"]["time_s"]
    print(side, mode, {k: v for k, v in row.items() if k != "accounting"}, flush=True)
    result[mode] = row
  return result


def measure_resnets(config) -> dict:
  """AA-ResNet-50 / ResNet-50 forward + backward (params and input), side by side."""
  size, batch = config.resnet_size, config.resnet_batch
  programs, accts = {}, {}
  x = jax.random.normal(jax.random.key(0), (batch, size, size, 3))
  g = jnp.ones((batch, 1000), jnp.float32)
  for key in ("resnet50", "aa_resnet50"):
    model = models.create(key, num_classes=1000, rngs=nnx.Rngs(0), image_size=size)
    fn, params, rest = measure.training_fn(model)
    compiled, accts[key] = measure.compile_fn(fn, params, rest, x, g)
    programs[key] = (compiled, (params, rest, x, g))
  out = _times(programs, config.resnet_repeats, config.min_sample_s)
  for k in programs:
    out[k].update(temp_bytes=accts[k]["temp_bytes"], xla_flops=accts[k]["xla_flops"])
  out.update(ratio=out["aa_resnet50"]["time_s"] / out["resnet50"]["time_s"], batch=batch,
             size=size)
  print("resnets", out, flush=True)
  return out


def _timed(r):
  ms = lambda t: f"{t * 1e3:.1f}" if t < 10 else f"{t:.1f} s"
  return f"{ms(r['time_s'])} ({ms(r['min_s'])})"


def markdown(config, result) -> str:
  lines = [
      "# Relative self-attention beside timm's BottleneckAttn", "",
      f"Measured on {measure.machine_line(result['machine'])}; torch "
      f"{result.get('torch', 'not installed')}, timm {result.get('timm', 'not installed')} "
      f"({result.get('torch_threads', '?')} threads). Command: `python -m "
      "experiments.relative_timm --config=configs/efficiency/relative_timm.py`. "
      + result.get("note", ""), "",
      config.about.format(**config.to_dict()), "",
      "| grid | pass | timm ms | ours ms | speed-up | temp MiB | kernels | logits passes | "
      "XLA bytes MB |", "|---|---|---|---|---|---|---|---|---|"]
  for side in sorted(result["sides"], key=int):
    for mode, row in result["sides"][side].items():
      a = row["accounting"]["after"]
      lines.append(
          f"| {side}² | {mode} | {_timed(row['timm']) if 'timm' in row else 'not run'} | "
          f"{_timed(row['after'])} | "
          f"{measure.fmt(row.get('after_speedup_vs_timm'), '.2f', '×', '—')} | "
          f"{a['temp_bytes'] / 2**20:.1f} | {a['kernels']} | {a['logits_passes']} | "
          f"{a['xla_bytes_accessed'] / 1e6:.0f} |")
  lines += ["", "## Goals", ""] + [f"- {k}: {v}" for k, v in result.get("goals", {}).items()]
  if rn := result.get("resnets"):
    lines += ["", f"## AA-ResNet-50 vs ResNet-50, forward + backward at {rn['size']}², "
              f"batch {rn['batch']}", "", "Gradients of <logits, 1> w.r.t. the parameters and "
              "the input, interleaved medians (min).", "",
              "| model | ms | temp MiB | XLA GFLOP | / ResNet-50 |", "|---|---|---|---|---|"]
    lines += [f"| {label} | {_timed(rn[key])} | {rn[key]['temp_bytes'] / 2**20:.0f} | "
              f"{rn[key]['xla_flops'] / 1e9:.1f} | "
              f"{rn[key]['time_s'] / rn['resnet50']['time_s']:.3f}× |"
              for key, label in (("resnet50", "ResNet-50"), ("aa_resnet50", "AA-ResNet-50"))]
  return "\n".join(lines + measure.timing_lines(result.get("calibration"))) + "\n"


def goals(result) -> dict:
  """The goals of configs/efficiency/relative_timm.py, met or not, from the measured rows."""
  goal = lambda ok, value: f"{'met' if ok else 'NOT met'} ({value})"
  out = {}
  for side, rows in result["sides"].items():
    for mode, row in rows.items():
      if (speedup := row.get("after_speedup_vs_timm")) is not None:
        out[f"{side}² {mode} ≥ timm"] = goal(speedup >= 1, f"{speedup:.2f}×")
  if "train" in result["sides"].get("56", {}):
    temp = result["sides"]["56"]["train"]["accounting"]["after"]["temp_bytes"] / measure.GIB
    out["56² train temporaries ≤ 0.5 GiB"] = goal(temp <= 0.5, f"{temp:.3f} GiB")
  if result.get("resnets"):
    ratio = result["resnets"]["ratio"]
    out["AA-ResNet-50 ≤ 1.15× ResNet-50"] = goal(ratio <= 1.15, f"{ratio:.3f}×")
  return out


def run(config) -> dict:
  timm_cls = load_bottleneck_attn()
  result = {"machine": measure.machine(), "sides": {}}
  if timm_cls is not None:
    import timm  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    result.update(torch=torch.__version__, timm=timm.__version__,
                  torch_threads=torch.get_num_threads())
  for side in config.sides:
    result["sides"][str(side)] = measure_side(config, side, timm_cls)
    if config.out_dir:  # keep what is measured if a later size fails
      (measure.out_dir_of(config) / f"relative_timm_{side}.json").write_text(
          json.dumps(result["sides"][str(side)], default=str))
  if config.aa_resnet:
    result["resnets"] = measure_resnets(config)
  result["goals"] = goals(result)
  result["calibration"] = measure.calibration(config.get("calibration", ""))
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
    result.setdefault("resnets", previous.get("resnets"))
    result.update(goals=goals(result), note="Sizes measured in separate runs where the rows say "
                  "so. ")
  print(measure.write(out, "relative_timm", result, markdown(config, result)))


if __name__ == "__main__":
  # Defined here, not at import: tests import this module beside experiments.efficiency.
  config_flags.DEFINE_config_file("config", None, "relative_timm config.")
  measure.run(main)
