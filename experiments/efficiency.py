"""The papers' efficiency tables, measured from config files, beside the papers' numbers.

  python -m experiments.efficiency --config=configs/efficiency/<table>.py[:tiny]

Tables (`config.kind`):
- "operators": SAO Table 2, KAO Table 1 — one attention operator on synthetic
  input, Q = K = V = the input, 1 head;
- "modules": Ham Table 3 — SA, the A² double-attention block, Ham (CD, NMF)
  at 1×128×128×512, inference and training (forward + backward);
- "gan": Refined-SA Tables 2-3 — SAGAN, ISAGAN, SGAN 64×64 generator +
  discriminator: forward and backward time, largest batch in a memory budget;
- "aa": AA Table 9 — memory of the attention maps per stage of AA-ResNet-50;
- "nets": SAO Table 5 — a training step of whole networks (MobileNetV2, SANet,
  AttnNet; KANets; AA-ResNet-50): XLA memory at batch 128, time side by side;
- "performance_goals": the library against hardware floors (experiments/performance_goals.py).
Each kind other than "operators" and "modules" is a module of experiments/ with
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
import matplotlib
from ml_collections import config_flags

from attention_lab import ops
from experiments import efficiency_fused as fused_lib
from experiments import measure as measure_lib
from experiments import plots
from experiments.efficiency_modules import build_module, module_program, ham_flops
from experiments.measure import GIB, LABELS, MB, compile_fn, madd_of, machine_line
from experiments.measure import params_of, time_side_by_side

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

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


def _operator_input(batch, side, channels, heads, rank=2, dtype=jnp.float32):
  shape = (batch, *(side,) * rank, heads, channels // heads)
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
  sweep = run_operator_sweep(config)
  return {"rows": rows, "sweep": sweep, "fused": fused}


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


def run_operator_sweep(config) -> list:
  """Time and XLA memory of every operator against the grid side (plots)."""
  points = []
  for side in config.sweep_sides:
    x_abstract = jax.ShapeDtypeStruct(
        (config.batch, side, side, config.heads, config.sweep_channels // config.heads),
        _dtype(config))
    programs, accts = {}, {}
    for op in config.operators:
      compiled, acct = compile_fn(OPERATORS[op], x_abstract)
      accts[op] = acct
      if acct["total_bytes"] <= config.memory_budget_gib * GIB:
        programs[op] = compiled
    if not programs:
      continue
    x = _operator_input(config.batch, side, config.sweep_channels, config.heads,
                        dtype=_dtype(config))
    times = time_side_by_side({op: (c, (x,)) for op, c in programs.items()},
                              config.sweep_repeats, config.min_sample_s)
    for op in config.operators:
      points.append(dict(side=side, positions=side * side, operator=op, **accts[op],
                         time_s=times[op]["time_s"] if op in times else None,
                         over_budget=op not in programs))
    print(f"sweep {side}²: " + ", ".join(
        f"{op} {1e3 * t['time_s']:.3f}ms" for op, t in times.items()), flush=True)
  return points


def operators_markdown(config, result, machine: str) -> str:
  fmt = lambda v, f, suffix="": "" if v is None else format(v, f) + suffix
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
  lines += _sweep_lines(config, result["sweep"], "operators")
  return "\n".join(lines) + "\n"


def _sweep_lines(config, sweep, what) -> list:
  if not sweep:
    return []
  ops_ = list(dict.fromkeys(p["operator"] for p in sweep))
  stem = measure_lib.output_stem(config)
  lines = ["", f"## Sweep over the grid side ({what}; plot: [{stem}.png]({stem}.png))", "",
           f"{config.sweep_note} Entries 'over budget' passed the memory budget of "
           f"{config.memory_budget_gib} GiB (XLA total) and were compiled but not run.", "",
           "| side | " + " | ".join(f"{LABELS[o]} ms | {LABELS[o]} MB" for o in ops_) + " |",
           "|---|" + "---|---|" * len(ops_)]
  for side in dict.fromkeys(p["side"] for p in sweep):
    cells = []
    for o in ops_:
      p = next(p for p in sweep if p["side"] == side and p["operator"] == o)
      t = "over budget" if p["time_s"] is None else f"{1e3 * p['time_s']:.3f}"
      cells.append(f"{t} | {p['total_bytes'] / MB:.1f}")
    lines.append(f"| {side}² | " + " | ".join(cells) + " |")
  return lines


def plot_sweep(config, result, out_dir):
  """<stem>.png: time and memory of every operator against the grid side, where the table
  has a sweep (linked from the sweep section of the markdown)."""
  sweep = result.get("sweep")
  if not sweep:
    return
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for op in dict.fromkeys(p["operator"] for p in sweep):
    pts = [p for p in sweep if p["operator"] == op]
    timed = [p for p in pts if p["time_s"] is not None]
    line, = axes[0].loglog([p["positions"] for p in timed], [1e3 * p["time_s"] for p in timed],
                           "o-", label=LABELS[op])
    axes[1].loglog([p["positions"] for p in pts], [p["total_bytes"] / MB for p in pts], "o-",
                   color=line.get_color(), label=LABELS[op])
    over = [p for p in pts if p["time_s"] is None]
    if over:
      axes[1].loglog([p["positions"] for p in over], [p["total_bytes"] / MB for p in over], "x",
                     color=line.get_color(), markersize=10)
  axes[1].axhline(config.memory_budget_gib * GIB / MB, color="k", ls="--", lw=0.8,
                  label=f"budget {config.memory_budget_gib} GiB")
  for ax, ylabel in zip(axes, ("time (ms, median)", "XLA memory, temp+args+out (MB)")):
    ax.set_xlabel("spatial positions H·W")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(f"{config.title}\n{config.sweep_note}\n{machine_line(result['machine'])}",
               fontsize=8)
  fig.tight_layout()
  fig.savefig(out_dir / f"{measure_lib.output_stem(config)}.png", dpi=100)
  plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Modules (Ham Table 3).


def _concrete(args, key=0):
  """Replaces ShapeDtypeStructs in args by random arrays (state stays as is)."""
  def fill(a):
    if isinstance(a, jax.ShapeDtypeStruct):
      return jax.random.uniform(jax.random.key(key), a.shape, a.dtype)
    return a
  return jax.tree.map(fill, args, is_leaf=lambda a: isinstance(a, jax.ShapeDtypeStruct))


def _fused_module(config) -> tuple[str | None, str | None]:
  """(kernel, reason not run) of the baseline SA with the device's fused attention.

  SA is one head over all channels in float32 (the table's module), so q is
  (B, side², 1, channels)."""
  kernel = fused_lib.kernel_of(config)
  if not kernel or config.baseline != "sa":
    return None, None
  q = jax.ShapeDtypeStruct((config.batch, config.side**2, 1, config.channels), jnp.float32)
  return kernel, fused_lib.unsupported_reason(kernel, q, q, q)


def run_modules(config) -> dict:
  rows = []
  side, channels = config.side, config.channels
  programs, results = {}, {}
  kernel, fused_reason = _fused_module(config)
  names = list(config.modules) + (["sa_fused"] if kernel and not fused_reason else [])
  for name in names:
    model = build_module(name.removesuffix("_fused"), channels, config)
    r = dict(module=name, size=f"{config.batch}×{side}²×{channels}", params=params_of(model))
    for program in ("infer", "train"):
      model = build_module(name.removesuffix("_fused"), channels, config)
      if name.endswith("_fused"):
        with fused_lib.replaced_regular_attention(kernel):
          fn, acct, compiled, args = module_program(model, program, config.batch, side,
                                                    channels)
      else:
        fn, acct, compiled, args = module_program(model, program, config.batch, side, channels)
      if program == "infer":
        r["madd"] = madd_of(fn, *args) / config.batch
      if name.startswith("ham") and config.ham_loop_corrected_flops:
        acct["xla_flops_loop_corrected"] = ham_flops(name, channels, side, config, program)
      else:
        acct["xla_flops_loop_corrected"] = acct["xla_flops"]
      r[program] = acct
      programs[(name, program)] = (compiled, _concrete(args))
    results[name] = r
  for program in ("infer", "train"):
    chosen = {k: v for k, v in programs.items() if k[1] == program}
    times = time_side_by_side(chosen, config.repeats, config.min_sample_s)
    for (name, _), t in times.items():
      results[name][program]["time_s"] = t["time_s"]
      results[name][program]["time_samples"] = t["samples"]
  base = results[config.baseline]
  regular = [n for n in (config.baseline, "sa_fused") if n in results]
  for name in names:
    r = results[name]
    for program in ("infer", "train"):
      r[program]["speedup"] = base[program]["time_s"] / r[program]["time_s"]
      r[program]["memory_saving"] = 1 - r[program]["total_bytes"] / base[program]["total_bytes"]
      fastest = min(results[n][program]["time_s"] for n in regular)
      r[program]["speedup_vs_fastest_regular"] = fastest / r[program]["time_s"]
    r["paper"] = config.paper.get(name)
    rows.append(r)
    print({k: v for k, v in r.items()}, flush=True)
  sweep = run_module_sweep(config)
  fused = None if not kernel else {"label": fused_lib.LABELS[kernel], "reason": fused_reason}
  return {"rows": rows, "sweep": sweep, "fused": fused}


def run_module_sweep(config) -> list:
  points = []
  for side in config.sweep_sides:
    programs, accts = {}, {}
    for name in config.modules:
      model = build_module(name, config.channels, config)
      _, acct, compiled, args = module_program(model, "infer", config.batch, side,
                                                config.channels)
      accts[name] = acct
      if acct["total_bytes"] <= config.memory_budget_gib * GIB:
        programs[name] = (compiled, _concrete(args))
    times = time_side_by_side(programs, config.sweep_repeats, config.min_sample_s)
    for name in config.modules:
      points.append(dict(side=side, positions=side * side, operator=name, **accts[name],
                         time_s=times[name]["time_s"] if name in times else None,
                         over_budget=name not in programs))
    print(f"sweep {side}²: " + ", ".join(
        f"{n} {1e3 * t['time_s']:.3f}ms" for n, t in times.items()), flush=True)
  return points


def modules_markdown(config, result, machine: str) -> str:
  fmt = lambda v, f, suffix="": "" if v is None else format(v, f) + suffix
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine}. Command: `{measure_lib.command_of(config)}`.", "",
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
  del fmt
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
  lines += _sweep_lines(config, result["sweep"], "inference")
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Entry point.


# The table modules of the other kinds (imported when used: they import experiments.measure).
_MODULES = {"gan": "efficiency_gan", "aa": "efficiency_aa", "nets": "efficiency_nets",
            "performance_goals": "performance_goals"}


def table(kind: str):
  """(run(config), markdown(config, result, machine_line)) of a table kind."""
  if kind == "operators":
    return run_operators, operators_markdown
  if kind == "modules":
    return run_modules, modules_markdown
  if kind not in _MODULES:
    raise ValueError(f"config.kind = {kind!r}: must be one of operators|modules|"
                     f"{'|'.join(_MODULES)}")
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
  plot_sweep(config, result, out_dir)
  print(measure_lib.write(out_dir, stem, result, text))


if __name__ == "__main__":
  _CONFIG = config_flags.DEFINE_config_file("config", None, "Efficiency table config.")
  measure_lib.run(main)
