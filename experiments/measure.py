"""The one efficiency harness of experiments/: XLA accounting, MAdd, programs, interleaved
timing, and the markdown / json output with the machine line. Defines no flags (tables import it)
and imports no other module of experiments/.
"""

import contextlib
import json
import math
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from absl import app
from flax import nnx

from attention_lab import cli, cost

RESULTS = pathlib.Path(__file__).parent / "results"
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
  """Writes <stem>.json (unless result is None) and <stem>.md: text, then the replaced md's
  notes (from the `NOTES` line on). Returns the markdown written."""
  md = out / f"{stem}.md"
  old = md.read_text() if md.exists() else ""
  if NOTES in old:
    text = text.rstrip("\n") + "\n\n" + old[old.index(NOTES):]
  if result is not None:
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
  md.write_text(text)
  return text


def fmt(value, spec: str, suffix: str = "", missing: str = "") -> str:
  """`value` formatted with `spec` and `suffix`; `missing` where it is None (a paper's gap)."""
  return missing if value is None else format(value, spec) + suffix


def header(config, machine: str, about: str) -> list:
  """A table's title, machine, command and protocol paragraph (`about`, formatted with the
  config's fields)."""
  return [f"# {config.title}", "", f"Measured on {machine}. Command: `{command_of(config)}`.",
          ""] + ([about.format(**config.to_dict()), ""] if about else [])


def md_table(columns: dict, rows) -> list:
  """Markdown lines of a table: columns {header: cell(row) -> str}."""
  return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
          + ["| " + " | ".join(cell(r) for cell in columns.values()) + " |" for r in rows])


def machine() -> dict:
  cpu = platform.processor() or platform.machine()
  with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
    cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
  dev = jax.devices()[0]
  return {"cpu": cpu, "cores": os.cpu_count(), "device": f"{dev.platform}:{dev.device_kind}",
          "jax": jax.__version__, "python": platform.python_version()}


def machine_line(m: dict | None = None) -> str:
  m = m or machine()
  return f"{m['cpu']}, {m['cores']} cores, device {m['device']}, jax {m['jax']}"


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


def _sample(compiled, args, inner: int) -> float:
  start, out = time.perf_counter(), None
  for _ in range(inner):
    out = compiled(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / inner


def time_side_by_side(programs: dict, repeats: int, min_sample_s: float = 0.01,
                      warmup: int = 1) -> dict:
  """{name: (compiled, args)} → {name: {time_s (median), samples, inner}}: warm-up, an inner
  count per program so a sample lasts ≥ min_sample_s, then `repeats` interleaved rounds (a
  shared machine's load drifts hit every program alike)."""
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
  return {name: {"time_s": statistics.median(s), "samples": s, "inner": inner[name]}
          for name, s in samples.items()}


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
