"""The papers' efficiency tables, measured from config files, beside the papers' numbers.

  python -m experiments.efficiency --config=configs/efficiency/<table>.py[:tiny]

Tables (`config.kind`):
- "operators": SAO Table 2, KAO Table 1 — one attention operator on synthetic
  input, Q = K = V = the input, 1 head;
- "modules": Ham Table 3 — SA, the A² double-attention block, Ham (CD, NMF)
  at 1×128×128×512, inference and training (forward + backward)
  (experiments/efficiency_modules.py);
- "gan": Refined-SA Tables 2-3 — SAGAN, ISAGAN, SGAN 64×64 generator +
  discriminator: forward and backward time, largest batch in a memory budget;
- "aa": AA Table 9 — memory of the attention maps per stage of AA-ResNet-50;
- "nets": SAO Table 5 — a training step of whole networks (MobileNetV2, SANet,
  AttnNet; KANets; AA-ResNet-50): XLA memory at batch 128, time side by side;
- "performance_goals": the library against hardware floors (experiments/performance_goals.py).
Each kind other than "operators" (this module) is a module of experiments/ with
`run(config)` and `markdown(config, result, machine_line)`; the shared work is
experiments/measure.py, the plots are experiments/plots.py's.

Conventions, the same for every table:
- MAdd / MACs: multiply-adds of every dot product and convolution of the
  traced computation (`experiments.model_stats.count_madd`, loops counted
  trip-count times) — the convention of the papers' profilers (TF profile,
  torchprofile). Beside it XLA's own `cost_analysis()["flops"]` of the
  compiled program (2 per multiply-add, plus elementwise ops; note that XLA
  counts the body of a while loop once, whatever its trip count).
- Memory: XLA's `compile().memory_analysis()` — temporaries, arguments,
  outputs — deterministic, independent of the machine's load. "total" is
  temporaries + arguments + outputs.
- Time: the operators of one size are compiled, warmed up, then timed side by
  side in interleaved rounds; each sample runs the compiled program enough
  times back to back to last ≥ `min_sample_s` and ends with
  `jax.block_until_ready`; we report the median of `repeats` (≥ 5) samples.
- Ratios (speed-up, memory saving) are against the config's `baseline` row at
  the same size, measured in the same run. On a GPU or TPU the tables with
  regular softmax attention add the device's fused kernel beside XLA's (cuDNN
  flash / Pallas flash, `experiments.efficiency_fused`; its row says why where
  its rules exclude the shape or dtype) and give the speed-ups also against the
  faster of the two; on a CPU there is no such row.
- `config.dtype` (operators, SAO Table 5): the compute dtype, float32 by
  default; another dtype writes <table>_<dtype>.{md,json,png}. Absolute times are for this machine
  (written into the results); the papers' are TF/PyTorch on their hardware.

Writes experiments/results/<table>.{md,json,png} with the
machine they were measured on; the notes of the md file (measure.NOTES) are kept.
"""

import importlib
import json

import jax
import jax.numpy as jnp
from ml_collections import config_flags

from attention_lab import ops
from experiments import efficiency_fused as fused_lib
from experiments import measure as measure_lib
from experiments import plots
from experiments.measure import LABELS, MB, compile_fn, madd_of, machine_line, time_side_by_side

_CONFIG = None  # the --config flag, defined when run (tests import this module beside others)


# ----------------------------------------------------------------------------------------------
# Operators (SAO Table 2, KAO Table 1).


def _flat(x):
  return x.reshape(x.shape[0], -1, *x.shape[-2:])


OPERATORS = {
    "attn": lambda x: ops.dot_product_attention(_flat(x), _flat(x), _flat(x)),
    "attn_pool": lambda x: ops.dot_product_attention(_flat(x), *ops.pool_keys_values(x, x)),
    "attn_mean": lambda x: ops.dot_product_attention(_flat(x), _flat(x), _flat(x),
                                                     normalization="mean"),
    "sao": lambda x: ops.siamese_attention(_flat(x), _flat(x), _flat(x),
                                           jnp.ones(x.shape[-2:], x.dtype)),
    "kao_kv": lambda x: ops.kronecker_attention_kv(x, x, x),
    "kao_qkv": lambda x: ops.kronecker_attention_qkv(x, x, x),
}


def elementwise_pass(x):
  """One read + one write of x: the memory-bandwidth floor of any operator on x."""
  return x * 2.0


def measure(op: str, x, repeats: int) -> dict:
  """MAdd per example, XLA accounting and median time of one operator on x (B, *S, H, D)."""
  compiled, acct = compile_fn(OPERATORS[op], x)
  timing = time_side_by_side({op: (compiled, (x,))}, repeats)[op]
  return {"madd": madd_of(OPERATORS[op], x) / x.shape[0], **acct, "time_s": timing["time_s"]}


def _dtype(config):
  return jnp.dtype(config.get("dtype", "float32"))


def _operator_input(batch, side, channels, heads, dtype):
  shape = (batch, side, side, heads, channels // heads)
  return jax.random.normal(jax.random.key(0), shape, dtype)


def _fused_operator(kernel):
  attend = fused_lib.fused_attention(kernel)
  return lambda x: attend(_flat(x), _flat(x), _flat(x))


def run_operators(config) -> dict:
  rows, fused = [], []
  kernel = fused_lib.kernel_of(config)
  for side, channels in config.sizes:
    x = _operator_input(config.batch, side, channels, config.heads, dtype=_dtype(config))
    programs, accts = {}, {}
    for op in (*config.operators, "pass"):
      fn = elementwise_pass if op == "pass" else OPERATORS[op]
      compiled, accts[op] = compile_fn(fn, x)
      programs[op] = (compiled, (x,))
    reason = kernel and fused_lib.unsupported_reason(kernel, _flat(x), _flat(x), _flat(x))
    if kernel and not reason:
      try:
        compiled, accts["fused"] = compile_fn(_fused_operator(kernel), x)
        programs["fused"] = (compiled, (x,))
      except (NotImplementedError, ValueError, RuntimeError) as e:  # a rule jax checks, not us
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    times = time_side_by_side(programs, config.repeats, config.min_sample_s)
    if kernel:
      fused.append(_fused_row(config, kernel, reason, side, channels, times, accts))
    base = config.baseline
    for op in config.operators:
      paper = _paper(config, op, side)
      r = dict(size=f"{config.batch}×{side}²×{channels}", side=side, channels=channels,
               operator=op, madd=madd_of(OPERATORS[op], x) / config.batch, **accts[op],
               time_s=times[op]["time_s"], time_samples=times[op]["samples"],
               inner=times[op]["inner"], pass_time_s=times["pass"]["time_s"])
      r["time_over_pass"] = r["time_s"] / r["pass_time_s"]
      r["speedup"] = times[base]["time_s"] / r["time_s"]
      r["memory_saving"] = 1 - r["total_bytes"] / accts[base]["total_bytes"]
      r["temp_saving"] = 1 - r["temp_bytes"] / max(accts[base]["temp_bytes"], 1)
      r["paper"] = paper
      rows.append(r)
      print({k: v for k, v in r.items() if k != "time_samples"}, flush=True)
  sweep = measure_lib.sweep(config, config.operators, _sweep_program(config))
  return {"rows": rows, "sweep": sweep, "fused": fused}


def _sweep_program(config):
  """compile_at(op, side) of the sweep: the operator on (batch, side², heads, channels/heads)."""
  def compile_at(op, side):
    x = jax.ShapeDtypeStruct(
        (config.batch, side, side, config.heads, config.sweep_channels // config.heads),
        _dtype(config))
    return (*compile_fn(OPERATORS[op], x), (x,))
  return compile_at


def _fused_row(config, kernel, reason, side, channels, times, accts) -> dict:
  """The fused kernel at one size (or why not), and every operator's speed-up against the
  fastest regular attention measured there (XLA's or the fused kernel)."""
  regular = {"attn": times["attn"]["time_s"]} if "attn" in times else {}
  if "fused" in times:
    regular["fused"] = times["fused"]["time_s"]
  fastest = min(regular, key=regular.get) if regular else None
  row = dict(size=f"{config.batch}×{side}²×{channels}", side=side, kernel=kernel,
             label=fused_lib.LABELS[kernel], reason=reason,
             xla_attn_time_s=regular.get("attn"), fastest=fastest)
  if "fused" in times:
    row.update(time_s=times["fused"]["time_s"], time_samples=times["fused"]["samples"],
               **accts["fused"])
  if fastest:
    row["speedup_vs_fastest_regular"] = {
        op: regular[fastest] / times[op]["time_s"] for op in config.operators}
  print({k: v for k, v in row.items() if k != "time_samples"}, flush=True)
  return row


def fused_lines(result, operators) -> list:
  """Markdown: the device's fused regular attention beside XLA's, and speed-ups against the
  fastest of the two. Absent on a CPU (no fused kernel there)."""
  fused = result.get("fused") or []
  if not fused:
    return ["", "Fused regular attention (cuDNN flash on a GPU, Pallas flash on a TPU): none "
            "on this device, so the speed-ups above are against XLA's regular attention only."]
  label = fused[0]["label"]
  lines = ["", f"## Against the fastest regular attention on this device ({label})", "",
           f"{label} runs `experiments.efficiency_fused` on the same input; where its rules do "
           "not allow the shape or dtype, the row says why and XLA's attention is the "
           "fastest regular attention.", "",
           f"| input | XLA Attn ms | {label} ms | fastest regular | " + " | ".join(
               f"{LABELS[op]} speed-up" for op in operators) + " |",
           "|---|---|---|---|" + "---|" * len(operators)]
  for f in fused:
    t = f"{1e3 * f['time_s']:.3f}" if f.get("time_s") else f"not run: {f['reason']}"
    xla = f"{1e3 * f['xla_attn_time_s']:.3f}" if f.get("xla_attn_time_s") else "—"
    best = {"attn": "XLA", "fused": label, None: "—"}[f["fastest"]]
    speed = f.get("speedup_vs_fastest_regular") or {}
    lines.append(f"| {f['size']} | {xla} | {t} | {best} | " + " | ".join(
        f"{speed[op]:.2f}×" if op in speed else "—" for op in operators) + " |")
  return lines


def _paper(config, op, side) -> dict | None:
  """The paper's row: {madd_m, memory_mb, time_ms, saving, speedup} (missing keys: None)."""
  entry = config.paper.get(op, {}).get(str(side))
  if entry is None:
    return None
  keys = ("madd_m", "memory_mb", "time_ms", "saving", "speedup")
  return dict(zip(keys, tuple(entry) + (None,) * (len(keys) - len(entry))))


def operators_markdown(config, result, machine: str) -> str:
  fmt = measure_lib.fmt
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine}. Command: `{measure_lib.command_of(config)}`. Input "
      f"dtype {config.get('dtype', 'float32')}.", "",
      "MAdd: multiply-adds of the dot products per example (the papers' convention; softmax, "
      "means and pooling are not multiply-adds); XLA flops: `cost_analysis()` of the whole "
      "batch. Memory: XLA `memory_analysis()` of the whole batch — temp = temporaries, "
      "total = temporaries + arguments (the input) + outputs. Time: median of "
      f"{config.repeats} samples after warm-up, operators interleaved in one run. Ratios "
      f"against {LABELS[config.baseline]} at the same size. Paper columns: "
      f"{config.paper_source}.", "",
      "| input | operator | MAdd | paper MAdd | XLA GFLOP | temp MB | total MB | paper MB | "
      "saved (total) | saved (temp) | paper saved | time ms | paper ms | speed-up | "
      "paper speed-up |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in result["rows"]:
    p = r["paper"] or {}
    lines.append(
        f"| {r['size']} | {LABELS[r['operator']]} | {r['madd'] / 1e6:.2f}m | "
        f"{fmt(p.get('madd_m'), '.2f', 'm')} | {r['xla_flops'] / 1e9:.4f} | "
        f"{r['temp_bytes'] / MB:.2f} | {r['total_bytes'] / MB:.2f} | "
        f"{fmt(p.get('memory_mb'), '.2f')} | {100 * r['memory_saving']:.2f}% | "
        f"{100 * r['temp_saving']:.2f}% | {fmt(p.get('saving'), '.2f', '%')} | "
        f"{1e3 * r['time_s']:.3f} | {fmt(p.get('time_ms'), '.2f')} | {r['speedup']:.2f}× | "
        f"{fmt(p.get('speedup'), '.2f', '×')} |")
  lines += ["", "One elementwise pass (x·2, read + write of the input) measured in the same "
            "rounds, for the 'close to the hardware' goal:", "",
            "| input | pass ms | " + " | ".join(
                f"{LABELS[op]} / pass" for op in config.operators) + " |",
            "|---|---|" + "---|" * len(config.operators)]
  for size in dict.fromkeys(r["size"] for r in result["rows"]):
    rs = [r for r in result["rows"] if r["size"] == size]
    lines.append(f"| {size} | {1e3 * rs[0]['pass_time_s']:.4f} | " + " | ".join(
        f"{r['time_over_pass']:.1f}×" for r in rs) + " |")
  lines += fused_lines(result, config.operators)
  lines += measure_lib.sweep_lines(config, result["sweep"], "operators")
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Entry point.


# The table modules of the other kinds (imported when used: they import experiments.measure).
_MODULES = {"modules": "efficiency_modules", "gan": "efficiency_gan", "aa": "efficiency_aa",
            "nets": "efficiency_nets", "performance_goals": "performance_goals"}


def table(kind: str):
  """(run(config), markdown(config, result, machine_line)) of a table kind."""
  if kind == "operators":
    return run_operators, operators_markdown
  if kind not in _MODULES:
    raise ValueError(f"config.kind = {kind!r}: must be one of operators|{'|'.join(_MODULES)}")
  module = importlib.import_module(f"experiments.{_MODULES[kind]}")
  return module.run, module.markdown


def main(argv):
  """Measures the config's table (or, with --config.render_only, re-renders its saved JSON)."""
  del argv
  config = _CONFIG.value
  out_dir = measure_lib.out_dir_of(config)
  run, markdown = table(config.kind)
  stem = measure_lib.output_stem(config)
  if config.get("render_only", False):
    result = json.loads((out_dir / f"{stem}.json").read_text())
  else:
    result = run(config)
    result["machine"] = measure_lib.machine()
  result["config"] = config.to_dict()
  text = markdown(config, result, machine_line(result["machine"]))
  if config.table in plots.TABLE_PLOTS:
    text += "\n" + plots.table_plot(config.table, result, out_dir, stem) + "\n"
  if result.get("sweep"):
    plots.sweep_plot(config, result["sweep"], out_dir / f"{stem}.png", LABELS,
                     machine_line(result["machine"]))
  print(measure_lib.write(out_dir, stem, result, text))


if __name__ == "__main__":
  _CONFIG = config_flags.DEFINE_config_file("config", None, "Efficiency table config.")
  measure_lib.run(main)
