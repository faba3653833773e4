"""The one efficiency harness of experiments/: XLA accounting, MAdd, programs, their time on
the device (CUPTI or a profiler trace on an accelerator, wall time on the CPU), the calibration
rows, and the markdown / json output with the machine line and the commit. Defines no flags
(tables import it) and imports no other module of experiments/.
"""

import contextlib
import functools
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from absl import app
from flax import nnx

from attention_lab import cli, cost, devices

REPO = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"
MB = 1e6
GIB = 2**30
NOTES = "<!-- The notes below are kept when the table is regenerated. -->"
LABELS = {"attn": "Attn", "attn_pool": "Attn+Pool", "attn_mean": "Attn1/N", "sao": "SAO",
          "kao_kv": "KAO_KV", "kao_qkv": "KAO_QKV", "sa": "SA", "a2": "A²",
          "ham_cd": "Ham (CD)", "ham_nmf": "Ham (NMF)", "sagan": "SAGAN", "isagan": "ISAGAN",
          "sgan": "SGAN", "sa_fused": "SA (fused attention)"}


def run(main: Callable) -> None:
  """`app.run(main)`; a ValueError (bad flag or config value) is one line `error: ...`, exit 2."""
  def guarded(argv):
    try:
      return main(argv)
    except ValueError as e:
      cli.fail((str(e).strip().splitlines() or [type(e).__name__])[0])
  app.run(guarded, flags_parser=cli.parse_flags)


def output_stem(config) -> str:
  """`config.table`, with the compute dtype appended unless float32."""
  dtype = config.get("dtype", "float32")
  return config.table if dtype == "float32" else f"{config.table}_{dtype}"


def command_of(config) -> str:
  dtype = config.get("dtype", "float32")
  return (f"python -m experiments.efficiency --config=configs/efficiency/{config.table}.py"
          + ("" if dtype == "float32" else f" --config.dtype={dtype}"))


def out_dir_of(config) -> pathlib.Path:
  """`config.out_dir` or experiments/results, created."""
  out = pathlib.Path(config.get("out_dir", "") or RESULTS)
  out.mkdir(parents=True, exist_ok=True)
  return out


def write(out: pathlib.Path, stem: str, result, text: str) -> str:
  """Writes <stem>.json (unless result is None; a dict gains the commit measured at,
  `commit`) and <stem>.md: text, then the replaced md's notes (from the `NOTES` line on).
  Returns the markdown written."""
  md = out / f"{stem}.md"
  old = md.read_text() if md.exists() else ""
  if NOTES in old:
    text = text.rstrip("\n") + "\n\n" + old[old.index(NOTES):]
  if isinstance(result, dict):
    result = {**result, "commit": result.get("commit") or commit()}
  if result is not None:
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
  md.write_text(text)
  return text


def fmt(value, spec: str, suffix: str = "", missing: str = "") -> str:
  """`value` formatted with `spec` and `suffix`; `missing` where it is None (a paper's gap)."""
  return missing if value is None else format(value, spec) + suffix


def verdict(met: bool) -> str:
  """A goal's verdict as the tables write it."""
  return "**met**" if met else "**not met**"


def header(config, machine: str, about: str) -> list:
  """A table's title, machine, command and protocol paragraph (`about`, formatted with the
  config's fields)."""
  return [f"# {config.title}", "", f"Measured on {machine}. Command: `{command_of(config)}`.",
          ""] + ([about.format(**config.to_dict()), ""] if about else [])


def md_table(columns: dict, rows) -> list:
  """Markdown lines of a table: columns {header: cell(row) -> str}."""
  return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
          + ["| " + " | ".join(cell(r) for cell in columns.values()) + " |" for r in rows])


COMMIT_ENV = "EXPERIMENTS_COMMIT"  # the commit, where the tree has no git (a copied tree)


@functools.cache
def commit() -> str | None:
  """`git rev-parse HEAD` of this tree, "+dirty" when tracked files outside
  experiments/results differ from it (results are written while measuring); else
  $EXPERIMENTS_COMMIT; None without either."""
  git = lambda *a: subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=30, check=True).stdout.strip()
  try:
    head = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)experiments/results")
  except (OSError, subprocess.SubprocessError):
    return os.environ.get(COMMIT_ENV) or None
  return head + ("+dirty" if changed else "")


def machine() -> dict:
  cpu = platform.processor() or platform.machine()
  with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
    cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
  dev = jax.devices()[0]
  return {"cpu": cpu, "cores": os.cpu_count(), "device": f"{dev.platform}:{dev.device_kind}",
          "jax": jax.__version__, "python": platform.python_version(), "commit": commit()}


def machine_line(m: dict | None = None) -> str:
  m = m or machine()
  return (f"{m['cpu']}, {m['cores']} cores, device {m['device']}, jax {m['jax']}, commit "
          f"{short_commit(m.get('commit'))}")


def short_commit(sha: str | None) -> str:
  """A commit as a line shows it: 12 hex digits (and "+dirty"), or "unknown"."""
  if not sha:
    return "unknown"
  head, dirty, _ = sha.partition("+dirty")
  return head[:12] + dirty


def accounting(compiled) -> dict:
  """attention_lab.cost's count of a compiled program, a loop body once (`compile_fn` counts
  every trip): xla_flops and xla_bytes_accessed (NaN without a count), and memory; total =
  temporaries + arguments + outputs, peak = total − aliased (donated) bytes."""
  c = cost.of_compiled(compiled)
  acct = {"xla_flops": float("nan") if c.flops is None else c.flops,
          "xla_bytes_accessed": float("nan") if c.bytes_accessed is None else c.bytes_accessed,
          "temp_bytes": c.temp_bytes, "arg_bytes": c.argument_bytes, "out_bytes": c.output_bytes,
          "alias_bytes": c.alias_bytes}
  acct["total_bytes"] = acct["temp_bytes"] + acct["arg_bytes"] + acct["out_bytes"]
  acct["peak_bytes"] = c.footprint_bytes
  return acct


def compile_fn(fn: Callable, *args, donate_argnums=()):
  """Compiles fn for args (arrays or ShapeDtypeStructs); returns (compiled, `accounting`) with
  FLOPs and bytes counted by attention_lab.cost.count: every scan once per trip."""
  compiled, c = cost.count(jax.jit(fn, donate_argnums=donate_argnums), *args)
  counted = {"xla_flops": c.flops, "xla_bytes_accessed": c.bytes_accessed}
  return compiled, {**accounting(compiled), **{k: v for k, v in counted.items() if v is not None}}


def sub_jaxprs(eqn):
  """The jaxprs inside an equation (a scan's or a pjit's body, a cond's branches...)."""
  for value in eqn.params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(v, jax.extend.core.ClosedJaxpr):
        yield v.jaxpr
      elif isinstance(v, jax.extend.core.Jaxpr):
        yield v


def count_madd(jaxpr) -> int:
  """Multiply-adds of every dot_general and conv_general_dilated in a jaxpr (recursive; a
  scan's body × its length)."""
  total = 0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == "dot_general":
      (lhs_contract, _), _ = eqn.params["dimension_numbers"]
      lhs = eqn.invars[0].aval.shape
      total += math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contract)
    elif name == "conv_general_dilated":  # kernel (out, in, *spatial): in × spatial per output
      rhs, spec = eqn.invars[1].aval.shape, eqn.params["dimension_numbers"].rhs_spec
      total += math.prod(eqn.outvars[0].aval.shape) * math.prod(rhs[d] for d in spec[1:])
    else:
      trips = eqn.params.get("length", 1) if name == "scan" else 1
      total += trips * sum(count_madd(sub) for sub in sub_jaxprs(eqn))
  return total


def madd_of(fn: Callable, *args) -> int:
  """Multiply-adds of the dot products and convolutions of fn's jaxpr (loops × trip count)."""
  return count_madd(jax.make_jaxpr(fn)(*args).jaxpr)


def params_of(model) -> int:
  return sum(math.prod(v.shape) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))


# Time. On an accelerator a call from Python costs ~45 µs of dispatch and launch, longer than
# most kernels at the papers' sizes, so a loop of calls times the host: there the device's own
# time per call is read (CUPTI, else a profiler trace). The CPU runs programs on the host: wall.
TIMING_ENV = "EXPERIMENTS_TIMING"  # forces a method: wall | cupti | trace
METHODS = {
    "wall": "host wall time: the median of samples of back-to-back calls (a sample lasts "
            "≥ min_sample_s), the programs interleaved; on an accelerator it includes the "
            "dispatch of each call",
    "cupti": "device time: the kernels' summed time of each call, recorded by CUPTI "
             "(`jax.experimental.mosaic.gpu.profiler.measure`), the median over calls",
    "trace": "device time: the device's summed time of each call, read from a `jax.profiler` "
             "trace with `jax.profiler.ProfileData` (GPU: the kernels and copies of the "
             "/device:GPU:* plane's stream lines; TPU: the /device:TPU:* plane's XLA Modules "
             "line; CPU: the /host:CPU plane's XLA thunks), the median over calls"}
DEVICE_PLANES = {"gpu": "/device:GPU:", "tpu": "/device:TPU:", "cpu": "/host:CPU"}


def _device_line(platform_name: str, line: str) -> bool:
  return {"gpu": line.startswith("Stream #"), "tpu": line == "XLA Modules"}.get(
      platform_name, True)


def device_events(planes, platform_name: str) -> list[tuple[float, float]]:
  """(start ns, duration ns) of the work of one device in a trace, from the first plane of
  `DEVICE_PLANES[platform_name]` (by name) that has any: a GPU's kernels and copies (its
  "Stream #" lines), a TPU's program runs (its "XLA Modules" line), the CPU's XLA thunks (the
  events with an hlo_module stat). `planes`: jax.profiler.ProfileData's, or objects alike
  (name, lines; a line's name, events; an event's start_ns, duration_ns, stats pairs)."""
  prefix = DEVICE_PLANES[platform_name]
  for plane in sorted((p for p in planes if p.name.startswith(prefix)), key=lambda p: p.name):
    events = [(e.start_ns, e.duration_ns) for line in plane.lines
              if _device_line(platform_name, line.name) for e in line.events
              if platform_name != "cpu" or "hlo_module" in dict(e.stats)]
    if events:
      return events
  return []


def per_call_seconds(events, calls: int) -> list[float]:
  """Seconds of each of `calls` identical back-to-back calls from their device events (start,
  duration ns): in start order, split into `calls` groups of equal count (as CUPTI's measure
  splits kernels), each group's durations summed; one figure (the mean) when `calls` does
  not divide the count."""
  if not events:
    raise ValueError("no device events in the trace")
  durations = [d for _, d in sorted(events)]
  if len(durations) % calls:
    return [sum(durations) / calls / 1e9]
  k = len(durations) // calls
  return [sum(durations[i * k:(i + 1) * k]) / 1e9 for i in range(calls)]


def cupti_seconds(compiled, args, calls: int) -> list[float]:
  """Kernel seconds of each of `calls` back-to-back calls (after one warm-up), by CUPTI."""
  from jax.experimental.mosaic.gpu import profiler  # pylint: disable=g-import-not-at-top
  _, ms = profiler.measure(compiled, iterations=calls)(*args)
  if ms is None:
    raise RuntimeError("CUPTI recorded no kernel")
  return [m / 1e3 for m in ([ms] if calls == 1 else ms)]


def trace_seconds(compiled, args, calls: int) -> list[float]:
  """Device seconds of each of `calls` calls (after one warm-up), read from a jax.profiler
  trace of them alone."""
  jax.block_until_ready(compiled(*args))
  with tempfile.TemporaryDirectory() as log_dir:
    with jax.profiler.trace(log_dir):
      for _ in range(calls):
        jax.block_until_ready(compiled(*args))
    (path,) = pathlib.Path(log_dir).rglob("*.xplane.pb")
    planes = jax.profiler.ProfileData.from_file(str(path)).planes
    return per_call_seconds(device_events(planes, jax.default_backend()), calls)


DEVICE_SECONDS = {"cupti": cupti_seconds, "trace": trace_seconds}
FALLBACKS = []  # programs this process timed otherwise than `timing()` says, and why


def device_seconds(name: str, compiled, args, calls: int) -> tuple[list[float], str]:
  """(seconds of each of `calls` calls, method) by `timing()`'s method; a program that
  method fails on (CUPTI's kernel sequences differing between calls, say) is timed by the
  trace, else by wall, and listed in FALLBACKS."""
  methods = dict.fromkeys((timing()["method"], "trace"))
  for method in methods:
    try:
      return DEVICE_SECONDS[method](compiled, args, calls), method
    except Exception as e:  # pylint: disable=broad-except  # recorded; the next method runs
      FALLBACKS.append(f"{name}: {method} failed ({_why(e)})")
  return _wall({name: (compiled, args)}, calls, 0.0, 1)[name]["samples"], "wall"


def _why(e: Exception) -> str:
  return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _probe(method: str) -> str | None:
  """None if `method` times a tiny program here (two positive figures), else why not."""
  x = jnp.ones((1024,), jnp.float32)
  try:
    seconds = DEVICE_SECONDS[method](jax.jit(lambda x: x + 1).lower(x).compile(), (x,), 2)
  except Exception as e:  # pylint: disable=broad-except  # any failure means: fall back
    return _why(e)
  return None if len(seconds) == 2 and min(seconds) > 0 else f"gave {seconds}"


@functools.cache
def timing() -> dict:
  """How this process times compiled programs: {method, why, platform, device_kind, l2_bytes}.
  $EXPERIMENTS_TIMING if set; else wall on the CPU, and on an accelerator the first that
  works of CUPTI (GPU only) and the profiler trace, else wall (each fallback says why)."""
  d = jax.devices()[0]
  entry = devices.lookup(d.device_kind)
  info = {"platform": d.platform, "device_kind": d.device_kind,
          "l2_bytes": entry.l2_bytes if entry else None}
  forced = os.environ.get(TIMING_ENV)
  if forced:
    if forced not in METHODS:
      raise ValueError(f"${TIMING_ENV} = {forced!r}: must be one of {'|'.join(METHODS)}")
    return {**info, "method": forced, "why": f"${TIMING_ENV}={forced}"}
  if d.platform == "cpu":
    return {**info, "method": "wall", "why": "the CPU runs programs on the host"}
  failures = []
  for method in ("cupti", "trace") if d.platform == "gpu" else ("trace",):
    why = _probe(method)
    if why is None:
      return {**info, "method": method, "why": "; ".join(failures)}
    failures.append(f"{method} not available ({why})")
  return {**info, "method": "wall", "why": "; ".join(failures)}


def _finish(out) -> None:
  """Waits for a call's work: JAX arrays, and PyTorch's CUDA queue where torch is in use."""
  jax.block_until_ready(out)
  torch = sys.modules.get("torch")
  if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
    torch.cuda.synchronize()


def _sample(compiled, args, inner: int) -> float:
  start, out = time.perf_counter(), None
  for _ in range(inner):
    out = compiled(*args)
  _finish(out)
  return (time.perf_counter() - start) / inner


def _wall(programs: dict, repeats: int, min_sample_s: float, warmup: int) -> dict:
  inner = {}
  for name, (compiled, args) in programs.items():
    for _ in range(max(1, warmup)):
      _sample(compiled, args, 1)
    once = min(_sample(compiled, args, 1) for _ in range(2)) if min_sample_s > 0 else 1.0
    inner[name] = max(1, min(1000, math.ceil(min_sample_s / max(once, 1e-7))))
  samples = {name: [] for name in programs}
  for _ in range(repeats):
    for name, (compiled, args) in programs.items():
      samples[name].append(_sample(compiled, args, inner[name]))
  return {name: {"time_s": statistics.median(s), "samples": s, "inner": inner[name],
                 "method": "wall"} for name, s in samples.items()}


def time_side_by_side(programs: dict, repeats: int, min_sample_s: float = 0.01,
                      warmup: int = 1) -> dict:
  """{name: (program, args)} → {name: {time_s (median), samples, inner, method}}. A compiled
  JAX program is timed by `timing()`'s method: on the device, `repeats` calls back to back
  after a warm-up (inner 1); or wall: warm-up, an inner count per program so a sample lasts
  ≥ min_sample_s, then `repeats` interleaved rounds (a shared machine's load drifts hit every
  program alike). Other callables (PyTorch) are timed by wall, their CUDA queue waited for."""
  method = timing()["method"]
  on_device = {name for name, (fn, _) in programs.items()
               if method != "wall" and isinstance(fn, jax.stages.Compiled)}
  times = _wall({n: p for n, p in programs.items() if n not in on_device}, repeats,
                min_sample_s, warmup)
  for name in on_device:
    samples, used = device_seconds(name, *programs[name], max(1, repeats))
    times[name] = {"time_s": statistics.median(samples), "samples": samples, "inner": 1,
                   "method": used}
  return {name: times[name] for name in programs}


def time_programs(rows: dict, programs: dict, config) -> None:
  """Times {(row, program): (compiled, args)} side by side per program, into
  rows[row][program]: time_s, time_samples, speedup against `config.baseline`."""
  for program in dict.fromkeys(p for _, p in programs):
    chosen = {k: v for k, v in programs.items() if k[1] == program}
    for (name, _), t in time_side_by_side(chosen, config.repeats, config.min_sample_s).items():
      rows[name][program].update(time_s=t["time_s"], time_samples=t["samples"])
    for name, _ in chosen:
      rows[name][program]["speedup"] = (rows[config.baseline][program]["time_s"]
                                        / rows[name][program]["time_s"])


# Calibration: a pass over more than any L2 and a large bfloat16 matmul, timed as the tables
# time their programs, against the device's HBM bandwidth and bf16 peak (devices.py). Sizes:
# (elements of the float32 pass, matmul side) on an accelerator, on the CPU (a bf16 8192²
# matmul there takes ~20 s) and for the :tiny presets.
CALIBRATION_SIZES = {"accelerator": (2**26, 8192), "cpu": (2**26, 2048), "tiny": (2**12, 64)}
CALIBRATION_REPEATS = 5


def calibration_rows(pass_s: float, elements: int, matmul_s: float, side: int,
                     device_kind: str) -> list[dict]:
  """The calibration rows: bytes moved by a float32 pass x·2 (read + write: 8 per element) and
  FLOPs of a side² bf16 matmul (2·side³), their rates, and the fraction of the device's HBM
  bandwidth and bf16 peak (None where devices.py has no entry, e.g. a CPU)."""
  entry = devices.lookup(device_kind)
  rows = [dict(program="elementwise pass x·2", size=f"{4 * elements / MB:.3g} MB float32",
               time_s=pass_s, work=8.0 * elements, unit="GB/s",
               device_figure=entry and entry.memory_bandwidth, figure="HBM bandwidth"),
          dict(program="matmul", size=f"{side}² bfloat16", time_s=matmul_s,
               work=2.0 * side**3, unit="TFLOP/s",
               device_figure=entry and entry.peak("bfloat16"), figure="bf16 peak")]
  for r in rows:
    r["rate"] = r["work"] / r["time_s"]
    r["fraction"] = r["rate"] / r["device_figure"] if r["device_figure"] else None
  return rows


def calibration(preset: str = "") -> dict:
  """{timing: `timing()`, rows: `calibration_rows`} measured here; `preset` "tiny": tiny sizes."""
  size = "tiny" if preset == "tiny" else "cpu" if jax.default_backend() == "cpu" else (
      "accelerator")
  elements, side = CALIBRATION_SIZES[size]
  x, a = jnp.ones((elements,), jnp.float32), jnp.ones((side, side), jnp.bfloat16)
  programs = {"pass": (compile_fn(lambda x: x * 2.0, x)[0], (x,)),
              "matmul": (compile_fn(lambda a: a @ a, a)[0], (a,))}
  t = time_side_by_side(programs, CALIBRATION_REPEATS, 0.0)
  rows = calibration_rows(t["pass"]["time_s"], elements, t["matmul"]["time_s"], side,
                          jax.devices()[0].device_kind)
  return {"timing": timing(), "rows": rows, "fallbacks": list(FALLBACKS)}


def timing_lines(calibrated: dict | None) -> list:
  """Markdown: how the table's times were taken (method, why a fallback, L2) and the
  calibration rows."""
  if not calibrated:
    return []
  t = calibrated["timing"]
  rate = lambda r, v: f"{v / 1e9:.1f}" if r["unit"] == "GB/s" else f"{v / 1e12:.2f}"
  l2 = (f"Calls run back to back, so a program whose data fit in the device's "
        f"{t['l2_bytes'] / 2**20:.0f} MiB L2 ran L2-warm (no flush between calls); the "
        "calibration pass is larger than the L2." if t.get("l2_bytes") else
        "Calls run back to back: caches warm.")
  return ["", "## Timing and calibration", "",
          f"Times are {METHODS[t['method']]}" + (f" ({t['why']})" if t["why"] else "")
          + f". {l2}", *(["", "Timed otherwise: " + "; ".join(calibrated["fallbacks"]) + "."]
                          if calibrated.get("fallbacks") else []), "",
          "Calibration, timed the same way (shows whether the timing reaches the hardware):",
          ""] + md_table({
              "program": lambda r: r["program"], "size": lambda r: r["size"],
              "time ms": lambda r: f"{1e3 * r['time_s']:.4f}",
              "achieved": lambda r: f"{rate(r, r['rate'])} {r['unit']}",
              "device figure": lambda r: (f"{rate(r, r['device_figure'])} {r['unit']} "
                                          f"({r['figure']})" if r["device_figure"] else "—"),
              "fraction": lambda r: fmt(r["fraction"] and 100 * r["fraction"], ".1f", "%",
                                        "—")}, calibrated["rows"])


def inference_fn(model):
  """(fn(state, x) -> y, state) of a module in evaluation mode."""
  model.eval()
  graphdef, state = nnx.split(model)
  return (lambda state, x: nnx.merge(graphdef, state)(x)), state


def training_fn(model):
  """(fn(params, rest, x, g) -> (grads, new rest), params, rest): forward + backward of the loss
  <out, g> (a fixed cotangent, as inside a network) w.r.t. parameters and input; non-parameter
  state (batch statistics, RNG counters) carried as in a train step."""
  model.train()
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def step(params, rest, x, g):
    def loss(params, x, rest):
      m = nnx.merge(graphdef, params, rest, copy=True)
      return jnp.vdot(m(x).astype(jnp.float32), g), nnx.state(m, nnx.Not(nnx.Param))

    (_, new_rest), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        params, x, rest)
    return grads, new_rest

  return step, params, rest


def grad_of_square_sum(fn: Callable, argnums=0) -> Callable:
  """An operator's forward + backward: gradients of Σ fn(*args)² w.r.t. `argnums`."""
  return jax.grad(lambda *a: jnp.sum(jnp.square(fn(*a))), argnums=argnums)


def train_step(build: Callable, tx, loss: Callable, *, abstract: bool):
  """(step(state, inputs, targets) -> state, state) of a network as the tasks train it (the
  library's TrainableModel of `build` and optax `tx`); `abstract`: state as ShapeDtypeStructs.
  Compile with `donate_argnums=0` for the trainer's memory."""
  from attention_lab.train.tasks import base  # pylint: disable=g-import-not-at-top
  net = base.TrainableModel(build, tx, 0)

  def step(state, inputs, targets):
    def loss_fn(params):
      model = net.model({**state, "params": params}, train=True)
      return loss(model(inputs), targets), base.non_params(model)

    grads, rest = jax.grad(loss_fn, has_aux=True)(state["params"])
    return net.update(state, grads, rest)

  return step, jax.eval_shape(net.init) if abstract else net.init()


def layer_program(model, program: str, x):
  """(fn, XLA accounting, compiled, abstract args) of a layer's 'infer' (`inference_fn`) or
  'train' (`training_fn`, cotangent shaped as x) program on input x."""
  fn, *state = (inference_fn if program == "infer" else training_fn)(model)
  args = (*state, x) if program == "infer" else (*state, x, x)
  compiled, acct = compile_fn(fn, *args)
  return fn, acct, compiled, args


def concrete(args, key=0):
  """Replaces the ShapeDtypeStructs in args by random arrays."""
  fill = lambda a: (jax.random.uniform(jax.random.key(key), a.shape, a.dtype)
                    if isinstance(a, jax.ShapeDtypeStruct) else a)
  return jax.tree.map(fill, args, is_leaf=lambda a: isinstance(a, jax.ShapeDtypeStruct))


def sweep(config, names, compile_at: Callable) -> list:
  """Time and XLA memory of `names` at each `config.sweep_sides`; compile_at(name, side) →
  (compiled, accounting, abstract args). Programs over `config.memory_budget_gib` (XLA total)
  are compiled, not run (time_s None, over_budget)."""
  points = []
  for side in config.sweep_sides:
    programs, accts = {}, {}
    for name in names:
      compiled, accts[name], args = compile_at(name, side)
      if accts[name]["total_bytes"] <= config.memory_budget_gib * GIB:
        programs[name] = (compiled, concrete(args))
    times = time_side_by_side(programs, config.sweep_repeats, config.min_sample_s)
    points += [dict(side=side, positions=side * side, operator=name, **accts[name],
                    time_s=times[name]["time_s"] if name in times else None,
                    over_budget=name not in programs) for name in names]
    print(f"sweep {side}²: " + ", ".join(
        f"{n} {1e3 * t['time_s']:.3f}ms" for n, t in times.items()), flush=True)
  return points


def sweep_lines(config, sweep_points, what: str) -> list:
  """Markdown of a sweep: ms and MB per name and side, linking the table's plot."""
  if not sweep_points:
    return []
  stem = output_stem(config)
  at = {(p["side"], p["operator"]): p for p in sweep_points}
  ms = lambda p: "over budget" if p["time_s"] is None else f"{1e3 * p['time_s']:.3f}"
  columns = {"side": lambda side: f"{side}²"}
  for o in dict.fromkeys(p["operator"] for p in sweep_points):
    columns[f"{LABELS[o]} ms"] = lambda side, o=o: ms(at[side, o])
    columns[f"{LABELS[o]} MB"] = lambda side, o=o: f"{at[side, o]['total_bytes'] / MB:.1f}"
  return ["", f"## Sweep over the grid side ({what}; plot: [{stem}.png]({stem}.png))", "",
          f"{config.sweep_note} Entries 'over budget' passed the memory budget of "
          f"{config.memory_budget_gib} GiB (XLA total) and were compiled but not run.", ""
          ] + md_table(columns, dict.fromkeys(p["side"] for p in sweep_points))
