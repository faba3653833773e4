"""What one call of a jitted program costs on each device: FLOPs, bytes accessed and memory.

The one counter behind the run's perf/ scalars (train/perf.py), `attention_lab.aot` and
experiments/ (measure.accounting, measure.compile_fn).

Memory is the compiled program's `memory_analysis()`: arguments, outputs, temporaries and the
bytes of donated arguments that outputs reuse (aliased); its footprint on a device is
arguments + outputs + temporaries − aliased.

FLOPs and bytes accessed are XLA's cost analysis of the compiled program. For a program
partitioned over a mesh XLA compiles one program per device, so they are per device. XLA
counts a multiply-add as 2 FLOPs, as the devices' peak figures do, and counts elementwise
work too. It counts the body of a `while` loop once, whatever its trip count; the loops of
our programs are scans of a static length (`lax.scan`: the micro-batches of
train/microbatch.py; `lax.fori_loop` with static bounds: the Hamburger solvers). So a program
with such a loop is counted as its twin with every scan unrolled: the same jaxpr with each
scan's `unroll` set to its length, which jax lowers as straight-line code (no `while`),
compiled for the same devices and shardings, for counting only. The twin runs the same
operations, each scan body once per trip, so its count is the program's. A `while_loop` of
dynamic trip count stays counted once, as do loops inside a primitive's lowering (threefry's
rounds: a few integer operations). Only a program with scans costs a second compile.

XLA:GPU's count cannot be used: its cost analysis leaves out the GEMMs and convolutions it
hands to cuBLAS and cuDNN as custom calls (on an H100 with jax 0.11.2 it gave 0.04 GFLOP for
an attention of 10 GFLOP of multiply-adds). There, where a backend gives no count, or where
it cannot compile the twin (XLA:TPU refuses a program that does not fit), the twin is lowered for one CPU device over the whole
(global) arguments, and its `Lowered.cost_analysis()` (the HLO before XLA's optimisations:
the same FLOPs, but bytes accessed without fusion, an upper bound) is divided by the number
of devices: data parallel, every device does an equal share.

The count is tested against independent ones (tests/test_cost.py): a scan of matmuls of
known size, and a train step at k = 4 micro-batches against the same step at k = 1 over the
same batch, whose mathematics is identical.
"""

import dataclasses

import jax
from jax.extend import core as jax_core

COMPILED = "compiled program"
UNROLLED = "compiled program, loops unrolled"
LOWERED_CPU = "one CPU device's unoptimised program / devices"


@dataclasses.dataclass(frozen=True)
class Cost:
  """One call of a program on one device. FLOPs and bytes None where no count was had."""
  flops: float | None
  bytes_accessed: float | None
  argument_bytes: int
  output_bytes: int
  temp_bytes: int
  alias_bytes: int
  source: str  # how FLOPs and bytes were counted: COMPILED, UNROLLED or LOWERED_CPU

  @property
  def footprint_bytes(self) -> int:
    """Arguments + outputs + temporaries − aliased: the program's memory on a device."""
    return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


def xla_cost(stage) -> dict[str, float]:
  """{'flops', 'bytes accessed'} of a Compiled or Lowered program as XLA counts it (a loop
  body once); {} where the backend gives none."""
  try:
    cost = stage.cost_analysis()
  except Exception:  # pylint: disable=broad-except  # e.g. a backend without the analysis
    return {}
  if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
    cost = cost[0] if cost else None
  cost = cost or {}
  if not cost.get("flops", 0) > 0:
    return {}
  return {"flops": float(cost["flops"]), "bytes accessed": float(cost.get("bytes accessed", 0))}


def _loops(jaxpr) -> int:
  """The number of scans in `jaxpr` (recursively) that jax lowers as a `while` of more than
  one trip (`length // unroll` trips; unroll 0 or ≥ length: straight-line code)."""
  def loops(eqn) -> bool:
    unroll = eqn.params["unroll"]
    return unroll >= 1 and eqn.params["length"] // unroll >= 2
  return sum((eqn.primitive.name == "scan" and loops(eqn))
             + sum(_loops(sub) for sub in _sub_jaxprs(eqn)) for eqn in jaxpr.eqns)


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(v, jax_core.ClosedJaxpr):
        yield v.jaxpr
      elif isinstance(v, jax_core.Jaxpr):
        yield v


def _unrolled_value(value):
  if isinstance(value, jax_core.ClosedJaxpr):
    return value.replace(jaxpr=unrolled(value.jaxpr))
  if isinstance(value, jax_core.Jaxpr):
    return unrolled(value)
  if isinstance(value, tuple) and any(
      isinstance(v, (jax_core.ClosedJaxpr, jax_core.Jaxpr)) for v in value):
    items = [_unrolled_value(v) for v in value]
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # namedtuples
  return value


def unrolled(jaxpr):
  """`jaxpr` with every scan (recursively, in every sub-jaxpr) fully unrolled."""
  eqns = []
  for eqn in jaxpr.eqns:
    params = {name: _unrolled_value(value) for name, value in eqn.params.items()}
    if eqn.primitive.name == "scan":
      params["unroll"] = max(params["length"], 1)
    eqns.append(eqn.replace(params=params))
  return jaxpr.replace(eqns=eqns)


def _num_devices(args) -> int:
  sets = [x.sharding.device_set for x in jax.tree.leaves(args)
          if getattr(x, "sharding", None) is not None]
  return max((len(s) for s in sets), default=1)


def _platform(args) -> str:
  """The platform of the devices `args` are placed on ('cpu' when none is given)."""
  for x in jax.tree.leaves(args):
    devices = getattr(getattr(x, "sharding", None), "device_set", None)
    if devices:
      return next(iter(devices)).platform
  return jax.default_backend()


def _twin(closed, flat_args):
  """The lowered program of `closed` (a ClosedJaxpr) with its scans unrolled, over
  `flat_args` (their shardings; the outputs' left to XLA)."""
  return jax.jit(jax_core.jaxpr_as_fun(closed.replace(jaxpr=unrolled(closed.jaxpr)))).lower(
      *flat_args)


def on_one_cpu(jitted, *args) -> dict[str, float]:
  """The fallback count: {'flops', 'bytes accessed'} per device of `jitted`'s plain function
  (`__wrapped__`) with its scans unrolled, lowered for one CPU device over the whole `args`,
  divided by the number of devices `args` are placed on."""
  cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=cpu), args)
  cost = xla_cost(_twin(jax.jit(jitted.__wrapped__).trace(*abstract).jaxpr,
                        jax.tree.leaves(abstract)))
  devices = _num_devices(args)
  return {k: v / devices for k, v in cost.items()}


def _flops_and_bytes(jitted, args, traced, compiled) -> tuple[dict[str, float], str]:
  """({'flops', 'bytes accessed'} per device, source): the compiled program's count, its
  unrolled twin's where it has scans, or else `on_one_cpu`'s."""
  loops = _loops(traced.jaxpr.jaxpr) > 0
  cost = {} if _platform(args) in ("gpu", "cuda", "rocm") else xla_cost(compiled)
  if cost and loops:  # a backend that counts: count the twin on it
    try:
      cost = xla_cost(_twin(traced.jaxpr, jax.tree.leaves(args)).compile())
    except jax.errors.JaxRuntimeError:  # e.g. XLA:TPU: the twin does not fit
      cost = {}
  if cost:
    return cost, UNROLLED if loops else COMPILED
  return on_one_cpu(jitted, *args), LOWERED_CPU


def memory(compiled) -> dict[str, int]:
  """argument_bytes, output_bytes, temp_bytes and alias_bytes of a compiled program."""
  m = compiled.memory_analysis()
  return {"argument_bytes": int(m.argument_size_in_bytes),
          "output_bytes": int(m.output_size_in_bytes),
          "temp_bytes": int(m.temp_size_in_bytes), "alias_bytes": int(m.alias_size_in_bytes)}


def of_compiled(compiled) -> Cost:
  """The Cost of a compiled program as XLA counts it, a loop body once (counting every trip
  needs the function: `count`); FLOPs and bytes None on a GPU, whose count is not usable."""
  on_gpu = _platform(compiled.input_shardings) in ("gpu", "cuda", "rocm")
  cost = {} if on_gpu else xla_cost(compiled)
  return Cost(cost.get("flops"), cost.get("bytes accessed"), **memory(compiled), source=COMPILED)


def count(jitted, *args, compiled=None) -> tuple["jax.stages.Compiled", Cost]:
  """(compiled program, its Cost) of `jitted` (a `jax.jit` function) on `args` (arrays or
  ShapeDtypeStructs with shardings), every scan counted once per trip. The program is
  compiled here, unless the caller passes it (`compiled`, e.g. compiled with options); a
  call of `jitted` on such arguments then reuses it from JAX's cache."""
  traced = jitted.trace(*args)
  compiled = compiled or traced.lower().compile()
  cost, source = _flops_and_bytes(jitted, args, traced, compiled)
  return compiled, Cost(cost.get("flops"), cost.get("bytes accessed"), **memory(compiled),
                        source=source)
