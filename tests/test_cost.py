"""The cost counter against independent counts: loops of matmuls of known size, the one-step
program times the trip count, the fallback against the partitioned count, and a train step at
k micro-batches against the same step over the whole batch at once."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from attention_lab import cost
from attention_lab.train import microbatch, state as state_lib, tasks
from configs import default

M, K, N = 24, 40, 16
MATMUL = 2 * M * K * N  # one (M, K) @ (K, N): M·N·K multiply-adds, 2 FLOPs each


def _step(c, x, w):
  return jnp.tanh(c + x @ w)


def _scan(x, w):
  return jax.lax.scan(lambda c, xi: (_step(c, xi, w), None), jnp.zeros((x.shape[-2], N)), x)[0]


def _nested(x, w):  # x (outer, inner, M, K)
  return jax.lax.scan(lambda c, xo: (_scan(xo, w) + c, None), jnp.zeros((M, N)), x)[0]


def _fori(x, w):
  return jax.lax.fori_loop(0, x.shape[0], lambda i, c: _step(c, x[i], w), jnp.zeros((M, N)))


def _args(*lead):
  return (jax.ShapeDtypeStruct((*lead, M, K), jnp.float32),
          jax.ShapeDtypeStruct((K, N), jnp.float32))


def test_a_scan_counts_its_body_once_per_trip():
  one = cost.count(jax.jit(_step), jax.ShapeDtypeStruct((M, N), jnp.float32),
                   *_args())[1]
  assert one.source == cost.COMPILED
  assert MATMUL <= one.flops <= MATMUL + 4 * M * N  # the matmul, + the add (and tanh)
  partly = lambda x, w: jax.lax.scan(  # pylint: disable=unnecessary-lambda-assignment
      lambda c, xi: (_step(c, xi, w), None), jnp.zeros((M, N)), x, unroll=2)[0]
  for fn, lead, trips in ((_scan, (5,), 5), (_fori, (7,), 7), (_nested, (3, 4), 12),
                          (partly, (8,), 8)):
    compiled, counted = cost.count(jax.jit(fn), *_args(*lead))
    assert counted.source == cost.UNROLLED, fn
    assert counted.flops == pytest.approx(trips * one.flops, rel=0.02), fn
    # XLA alone counts each loop body once.
    assert cost.xla_cost(compiled)["flops"] < 0.5 * counted.flops, fn


def test_loops_around_primitives_that_hold_named_jaxprs():
  """jnp.linalg.solve is a custom_linear_solve, whose jaxprs sit in a namedtuple."""
  args = jax.ShapeDtypeStruct((6, K, K), jnp.float32), jax.ShapeDtypeStruct((6, K, N), jnp.float32)
  looped = jax.jit(lambda a, b: jax.lax.map(lambda ab: jnp.linalg.solve(*ab) @ ab[1].T, (a, b)))
  by_hand = jax.jit(lambda a, b: jnp.stack([jnp.linalg.solve(a[i], b[i]) @ b[i].T
                                            for i in range(6)]))
  counted = cost.count(looped, *args)[1]
  assert counted.source == cost.UNROLLED
  assert counted.flops == pytest.approx(cost.count(by_hand, *args)[1].flops, rel=0.01)


def test_a_program_without_loops_is_counted_as_compiled():
  compiled, counted = cost.count(jax.jit(lambda x, w: x @ w), *_args())
  assert counted.flops == cost.xla_cost(compiled)["flops"] == MATMUL
  unrolled = jax.jit(lambda x, w: jax.lax.scan(  # lowered without a loop: no second compile
      lambda c, xi: (_step(c, xi, w), None), jnp.zeros((M, N)), x, unroll=True)[0])
  assert cost.count(unrolled, *_args(5))[1].source == cost.COMPILED
  memory = compiled.memory_analysis()
  assert counted.argument_bytes == memory.argument_size_in_bytes == 4 * (M * K + K * N)
  assert counted.footprint_bytes == (counted.argument_bytes + counted.output_bytes
                                     + counted.temp_bytes - counted.alias_bytes)


def test_the_fallback_is_one_cpu_device_over_the_devices(monkeypatch):
  """Where the backend counts nothing (XLA:GPU): the whole program on one CPU device,
  unrolled and unoptimised, divided by the devices the arguments are on."""
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  x, w = _args(6)
  x = jax.ShapeDtypeStruct((6, 8 * M, K), x.dtype, sharding=NamedSharding(mesh, P(None, "data")))
  w = jax.ShapeDtypeStruct(w.shape, w.dtype, sharding=NamedSharding(mesh, P()))
  partitioned = cost.count(jax.jit(_scan), x, w)[1]
  real = cost.xla_cost
  monkeypatch.setattr(cost, "xla_cost", lambda stage: (
      {} if isinstance(stage, jax.stages.Compiled) else real(stage)))
  fallback = cost.count(jax.jit(_scan), x, w)[1]
  assert fallback.source == cost.LOWERED_CPU
  # per device: the matmul and the add (XLA counts tanh as a transcendental, not a FLOP)
  assert fallback.flops == pytest.approx(6 * (MATMUL + M * N), rel=1e-6)
  assert fallback.flops == pytest.approx(partitioned.flops, rel=0.02)
  assert fallback.temp_bytes == partitioned.temp_bytes  # memory: the compiled program's


def test_a_gpu_count_is_never_taken_from_xla_gpu(monkeypatch):
  """XLA:GPU counts no FLOPs for the GEMMs it hands to cuBLAS: on a GPU the count is the
  CPU fallback's even where the compiled program's analysis gives a number."""
  x, w = _args(6)
  on_cpu = cost.count(jax.jit(_scan), x, w)[1]
  monkeypatch.setattr(cost, "_platform", lambda args: "gpu")
  compiled, on_gpu = cost.count(jax.jit(_scan), x, w)
  assert on_gpu.source == cost.LOWERED_CPU
  assert on_gpu.flops == pytest.approx(on_cpu.flops, rel=0.02)
  assert cost.of_compiled(compiled).flops is None


def _train_step(microbatches: int, num_devices: int):
  config = default.get_config("tiny")
  config.update(microbatches=microbatches, batch_size=32)
  config.mesh.num_devices = num_devices
  mesh = state_lib.make_mesh(config, jax.devices()[:num_devices])
  task = tasks.create(config, tasks.Environment(mesh, "", config.batch_size))
  train = state_lib.StateLayout(task, mesh, "replicated")
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, P("data")))
           for k, v in task.batch_spec().items()}
  return train.train_step, state_lib.abstract_arrays(train.abstract, train.shardings), batch


@pytest.mark.parametrize("num_devices", [1, 2])
def test_four_microbatches_cost_the_flops_of_one_pass_over_the_batch(num_devices, monkeypatch):
  """The same examples through the same network: k = 4 counts k = 1's FLOPs (up to the k − 1
  extra gradient sums), as a scan (what accelerators run; XLA alone counts one micro-batch)
  and unrolled (what the CPU runs)."""
  whole = cost.count(*_train_step(1, num_devices))[1]
  unrolled = cost.count(*_train_step(4, num_devices))[1]
  monkeypatch.setattr(microbatch, "UNROLLED_ON_CPU", 0)
  compiled, scanned = cost.count(*_train_step(4, num_devices))
  assert whole.source == unrolled.source == cost.COMPILED and scanned.source == cost.UNROLLED
  assert scanned.flops == pytest.approx(whole.flops, rel=0.01)
  assert unrolled.flops == pytest.approx(whole.flops, rel=0.01)
  assert cost.xla_cost(compiled)["flops"] < 0.5 * whole.flops
