"""Micro-batches give the whole batch's gradients and metrics; BatchNorm statistics advance once
per micro-batch."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from clu import metrics
from flax import nnx

from attention_lab.train import microbatch


@flax.struct.dataclass
class Metrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  top1: metrics.Average.from_output("top1")


class MLP(nnx.Module):
  def __init__(self, batch_norm: bool, rngs: nnx.Rngs):
    self.norm = nnx.BatchNorm(5, momentum=0.9, rngs=rngs) if batch_norm else None
    self.hidden = nnx.Linear(5, 7, rngs=rngs)
    self.out = nnx.Linear(7, 3, rngs=rngs)

  def __call__(self, x):
    if self.norm is not None:
      x = self.norm(x)
    return self.out(jax.nn.relu(self.hidden(x)))


def _grad_fn(graphdef):
  """jax.grad of the mean cross-entropy, out = (metrics, batch-mean loss)."""
  def loss_fn(params, rest, batch):
    model = nnx.merge(graphdef, params, rest, copy=True)
    logits = model(batch["x"])
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
    values = Metrics.single_from_model_output(
        loss=per_example, top1=jnp.argmax(logits, -1) == batch["y"])
    loss = jnp.mean(per_example)
    return loss, (nnx.state(model, nnx.Not(nnx.Param)), (values, loss))
  return jax.grad(loss_fn, has_aux=True)


def _batch(key, size):
  kx, ky = jax.random.split(key)
  return {"x": jax.random.normal(kx, (size, 5)) * 2.0 + 0.5,
          "y": jax.random.randint(ky, (size,), 0, 3)}


def _model(batch_norm):
  return nnx.split(MLP(batch_norm, nnx.Rngs(0)), nnx.Param, ...)


@pytest.mark.parametrize("unroll", [False, True])  # a scan (accelerators), unrolled (CPU)
def test_four_microbatches_equal_one_batch_after_three_sgd_steps(unroll):
  graphdef, params, rest = _model(batch_norm=False)
  grad_fn, tx = _grad_fn(graphdef), optax.sgd(0.1, momentum=0.9)

  def step(params, opt_state, batch, k):
    grads, (_, (values, loss)) = microbatch.accumulate(grad_fn, params, rest, batch, k,
                                                       unroll=unroll)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, values, loss

  step = jax.jit(step, static_argnums=3)
  runs = {}
  for k in (1, 4):
    p, opt_state, history = params, tx.init(params), []
    for i in range(3):
      p, opt_state, values, loss = step(p, opt_state, _batch(jax.random.key(i), 12), k)
      history.append((values.compute(), values.loss.count, loss))
    runs[k] = p, history
  for a, b in zip(jax.tree.leaves(runs[1][0]), jax.tree.leaves(runs[4][0])):
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-7)
  moved = jax.tree.leaves(jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), params, runs[4][0]))
  assert max(moved) > 1e-2  # the steps did train
  for (one, count_one, loss_one), (four, count_four, loss_four) in zip(runs[1][1], runs[4][1]):
    assert count_one == count_four == 12
    np.testing.assert_allclose(four["loss"], one["loss"], rtol=1e-6)
    np.testing.assert_allclose(four["loss"], loss_four, rtol=1e-6)
    np.testing.assert_allclose(loss_four, loss_one, rtol=1e-6)
    assert four["top1"] == one["top1"]


@pytest.mark.parametrize("unroll", [False, True])
def test_batch_norm_statistics_advance_once_per_microbatch(unroll):
  graphdef, params, rest = _model(batch_norm=True)
  grad_fn, batch = _grad_fn(graphdef), _batch(jax.random.key(3), 6)
  grads, (new_rest, (values, _)) = jax.jit(
      lambda p, r, b: microbatch.accumulate(grad_fn, p, r, b, 2, unroll=unroll))(
          params, rest, batch)
  # Two sequential steps over the strided micro-batches, gradients averaged.
  parts = [jax.tree.map(lambda x, i=i: x[i::2], batch) for i in range(2)]
  g0, (r0, _) = grad_fn(params, rest, parts[0])
  g1, (r1, _) = grad_fn(params, r0, parts[1])
  for a, b0, b1 in zip(*map(jax.tree.leaves, (grads, g0, g1))):
    np.testing.assert_allclose(a, (b0 + b1) / 2, rtol=1e-5, atol=1e-7)
  for a, b in zip(jax.tree.leaves(new_rest), jax.tree.leaves(r1)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  # Independent float64 reference: BatchNorm sits on the input, so its statistics are the
  # micro-batches' feature means and (biased) variances, each blended with momentum 0.9.
  x = [np.asarray(p["x"], np.float64) for p in parts]
  mean = 0.9 * (0.1 * x[0].mean(0)) + 0.1 * x[1].mean(0)
  var = 0.9 * (0.9 + 0.1 * x[0].var(0)) + 0.1 * x[1].var(0)
  np.testing.assert_allclose(new_rest["norm"]["mean"][...], mean, rtol=1e-5)
  np.testing.assert_allclose(new_rest["norm"]["var"][...], var, rtol=1e-5)
  _, (whole, _) = grad_fn(params, rest, batch)  # one update from all 6 differs
  assert not np.allclose(whole["norm"]["mean"][...], mean, rtol=1e-3)
  assert int(values.loss.count) == 6


def test_one_microbatch_is_the_plain_computation():
  graphdef, params, rest = _model(batch_norm=True)
  grad_fn, batch = _grad_fn(graphdef), _batch(jax.random.key(0), 8)
  plain = jax.make_jaxpr(grad_fn)(params, rest, batch)
  one = jax.make_jaxpr(lambda p, r, b: microbatch.accumulate(grad_fn, p, r, b, 1))(
      params, rest, batch)
  assert str(one) == str(plain) and "scan" not in str(one)
  four = jax.make_jaxpr(lambda p, r, b: microbatch.accumulate(grad_fn, p, r, b, 4))(
      params, rest, batch)
  assert "scan" in str(four)


def _loops(k, unroll=None, size=16):
  graphdef, params, rest = _model(batch_norm=True)
  return jax.jit(lambda p, r, b: microbatch.accumulate(_grad_fn(graphdef), p, r, b, k, unroll)
                 ).lower(params, rest, _batch(jax.random.key(0), size)).as_text().count(
                     "stablehlo.while")


def test_on_the_cpu_small_k_is_unrolled_and_large_k_a_scan():
  """XLA:CPU runs a scan's convolutions many times slower than unrolled code; accelerators
  keep the scan (tests/test_aot.py: a TPU step at k = 2 has its loop)."""
  assert _loops(1) == _loops(4) == _loops(microbatch.UNROLLED_ON_CPU) == 0
  assert _loops(4, unroll=False) == 1
  assert _loops(2 * microbatch.UNROLLED_ON_CPU, size=32) == 1


def test_split_is_strided():
  parts = microbatch.split({"a": jnp.arange(12).reshape(6, 2)}, 3)["a"]
  np.testing.assert_array_equal(parts[1], [[2, 3], [8, 9]])


@pytest.mark.parametrize("k, batch, match", [
    (0, {"x": jnp.ones((4, 2))}, "positive int"),
    (True, {"x": jnp.ones((4, 2))}, "positive int"),
    (2.0, {"x": jnp.ones((4, 2))}, "positive int"),
    (3, {"x": jnp.ones((4, 2))}, r"must divide the batch size: batch\['x'\]"),
    (2, {"x": jnp.ones(())}, "must divide"),
])
def test_bad_microbatches(k, batch, match):
  with pytest.raises(ValueError, match=f"microbatches.*{match}"):
    microbatch.accumulate(lambda p, c, b: (p, (c, None)), {}, {}, batch, k)


def test_sharded_batch():
  """A batch sharded over the 8 test devices: micro-batches split each device's share."""
  graphdef, params, rest = _model(batch_norm=False)
  grad_fn = _grad_fn(graphdef)
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  batch = jax.device_put(_batch(jax.random.key(5), 32), sharding)
  run = jax.jit(lambda b, k: microbatch.accumulate(grad_fn, params, rest, b, k)[0],
                static_argnums=1)
  for a, b in zip(jax.tree.leaves(run(batch, 2)), jax.tree.leaves(run(batch, 1))):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # No example moves between devices (a contiguous split all-gathers the batch).
  assert "all-gather" not in run.lower(batch, 2).compile().as_text()
