"""SAO Table 2 and KAO Table 1: one operator on Q = K = V (1 head) at the papers' sizes, beside
the papers' MAdd, memory and speed-ups; one elementwise pass timed in the same rounds; on a GPU /
TPU regular attention also through the device's fused kernel (experiments/efficiency_fused.py);
a sweep over the grid side. The table kind "operators" of experiments/efficiency.py.
"""

import jax
import jax.numpy as jnp

from attention_lab import ops
from experiments import efficiency_fused as fused_lib
from experiments import measure as measure_lib
from experiments import plots
from experiments.measure import LABELS, MB, compile_fn, fmt, madd_of, time_side_by_side


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


def _fused_operator(kernel):
  attend = fused_lib.fused_attention(kernel)
  return lambda x: attend(_flat(x), _flat(x), _flat(x))


def _input(config, side, channels, abstract=False):
  shape = (config.batch, side, side, config.heads, channels // config.heads)
  dtype = jnp.dtype(config.get("dtype", "float32"))
  return (jax.ShapeDtypeStruct(shape, dtype) if abstract
          else jax.random.normal(jax.random.key(0), shape, dtype))


def run(config) -> dict:
  rows, fused = [], []
  kernel, base = fused_lib.kernel_of(config), config.baseline
  for side, channels in config.sizes:
    x = _input(config, side, channels)
    fns = {op: OPERATORS[op] for op in config.operators} | {"pass": elementwise_pass}
    reason = kernel and fused_lib.unsupported_reason(kernel, *(_flat(x),) * 3)
    if kernel and not reason:
      fns["fused"] = _fused_operator(kernel)
    programs, accts = {}, {}
    for op, fn in fns.items():
      try:
        compiled, accts[op] = compile_fn(fn, x)
        programs[op] = (compiled, (x,))
      except (NotImplementedError, ValueError, RuntimeError) as e:  # a rule jax checks
        if op != "fused":
          raise
        reason = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    times = time_side_by_side(programs, config.repeats, config.min_sample_s)
    size = f"{config.batch}×{side}²×{channels}"
    if kernel:
      regular = {k: times[k]["time_s"] for k in ("attn", "fused") if k in times}
      fastest = min(regular, key=regular.get) if regular else None
      f = dict(size=size, side=side, kernel=kernel, label=fused_lib.LABELS[kernel], reason=reason,
               xla_attn_time_s=regular.get("attn"), fastest=fastest)
      if "fused" in times:
        f.update(time_s=times["fused"]["time_s"], time_samples=times["fused"]["samples"],
                 **accts["fused"])
      if fastest:
        f["speedup_vs_fastest_regular"] = {
            op: regular[fastest] / times[op]["time_s"] for op in config.operators}
      fused.append(f)
    for op in config.operators:
      entry = config.paper.get(op, {}).get(str(side))
      keys = ("madd_m", "memory_mb", "time_ms", "saving", "speedup")
      r = dict(size=size, side=side, channels=channels, operator=op,
               madd=madd_of(OPERATORS[op], x) / config.batch, **accts[op],
               time_s=times[op]["time_s"], time_samples=times[op]["samples"],
               inner=times[op]["inner"], pass_time_s=times["pass"]["time_s"],
               paper=None if entry is None else dict(zip(keys, tuple(entry) + (None,) * 5)))
      r.update(time_over_pass=r["time_s"] / r["pass_time_s"],
               speedup=times[base]["time_s"] / r["time_s"],
               memory_saving=1 - r["total_bytes"] / accts[base]["total_bytes"],
               temp_saving=1 - r["temp_bytes"] / max(accts[base]["temp_bytes"], 1))
      rows.append(r)
      print({k: v for k, v in r.items() if k != "time_samples"}, flush=True)

  def compile_at(op, side):
    x = _input(config, side, config.sweep_channels, abstract=True)
    return (*compile_fn(OPERATORS[op], x), (x,))

  return {"rows": rows, "sweep": measure_lib.sweep(config, config.operators, compile_at),
          "fused": fused}


def fused_lines(result, operators) -> list:
  """Markdown: the device's fused regular attention beside XLA's, and the speed-ups against the
  faster of the two (none on a CPU)."""
  fused = result.get("fused") or []
  if not fused:
    return ["", f"{fused_lib.NONE_HERE}, so the speed-ups above are against XLA's regular "
            "attention only."]
  label = fused[0]["label"]
  speed = lambda f, op: fmt((f.get("speedup_vs_fastest_regular") or {}).get(op), ".2f", "×", "—")
  return ["", f"## Against the fastest regular attention on this device ({label})", "",
          f"{label} on the same input; where its rules exclude the shape or dtype the row says "
          "why, and XLA's attention is the fastest regular attention.", ""] + measure_lib.md_table(
      {"input": lambda f: f["size"],
       "XLA Attn ms": lambda f: fmt(f["xla_attn_time_s"] and 1e3 * f["xla_attn_time_s"], ".3f",
                                    missing="—"),
       f"{label} ms": lambda f: (f"{1e3 * f['time_s']:.3f}" if f.get("time_s")
                                 else f"not run: {f['reason']}"),
       "fastest regular": lambda f: {"attn": "XLA", "fused": label, None: "—"}[f["fastest"]],
       **{f"{LABELS[op]} speed-up": (lambda f, op=op: speed(f, op)) for op in operators}}, fused)


ABOUT_OPERATORS = (
    "Input dtype {dtype}. MAdd: multiply-adds of the dot products per example (softmax, means "
    "and pooling are not multiply-adds); XLA flops: `cost_analysis()` of the whole batch. "
    "Memory: XLA `memory_analysis()` of the whole batch: temp = temporaries, total = "
    "temporaries + arguments (the input) + outputs. Time: median of {repeats} samples "
    "(method: Timing and calibration, below). Ratios against Attn at the same size."
    " Paper columns: {paper_source}.")


def markdown(config, result, machine: str) -> str:
  paper = lambda key, spec, suffix="": lambda r: fmt((r["paper"] or {}).get(key), spec, suffix)
  lines = measure_lib.header(config, machine, ABOUT_OPERATORS) + measure_lib.md_table({
      "input": lambda r: r["size"], "operator": lambda r: LABELS[r["operator"]],
      "MAdd": lambda r: f"{r['madd'] / 1e6:.2f}m", "paper MAdd": paper("madd_m", ".2f", "m"),
      "XLA GFLOP": lambda r: f"{r['xla_flops'] / 1e9:.4f}",
      "temp MB": lambda r: f"{r['temp_bytes'] / MB:.2f}",
      "total MB": lambda r: f"{r['total_bytes'] / MB:.2f}", "paper MB": paper("memory_mb", ".2f"),
      "saved (total)": lambda r: f"{100 * r['memory_saving']:.2f}%",
      "saved (temp)": lambda r: f"{100 * r['temp_saving']:.2f}%",
      "paper saved": paper("saving", ".2f", "%"), "time ms": lambda r: f"{1e3 * r['time_s']:.3f}",
      "paper ms": paper("time_ms", ".2f"), "speed-up": lambda r: f"{r['speedup']:.2f}×",
      "paper speed-up": paper("speedup", ".2f", "×")}, result["rows"])
  sizes = {r["size"]: [s for s in result["rows"] if s["size"] == r["size"]]
           for r in result["rows"]}
  lines += ["", "One elementwise pass (x·2, read + write of the input) measured in the same "
            "rounds, for the 'close to the hardware' goal:", ""] + measure_lib.md_table(
      {"input": lambda rs: rs[0]["size"], "pass ms": lambda rs: f"{1e3 * rs[0]['pass_time_s']:.4f}",
       **{f"{LABELS[op]} / pass": (lambda rs, i=i: f"{rs[i]['time_over_pass']:.1f}×")
          for i, op in enumerate(config.operators)}}, sizes.values())
  lines += fused_lines(result, config.operators)
  lines += measure_lib.sweep_lines(config, result["sweep"], "operators")
  return "\n".join(lines) + "\n"


def plot(config, result, path, machine: str) -> None:
  """The sweep's plot (its link is in the sweep's section)."""
  if result.get("sweep"):
    plots.sweep_plot(config, result["sweep"], path, LABELS, machine)
