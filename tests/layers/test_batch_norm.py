"""BatchNorm statistics per group of examples against an explicit float64 loop over the groups."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.test_util import check_grads

from attention_lab.layers.batch_norm import BatchNorm


def _reference(x, scale, bias, group_size, epsilon):
  """Loop over the groups: each normalised with its own mean and biased variance over
  (examples, spatial); returns y and the mean over groups of the group statistics."""
  ys, means, variances = [], [], []
  for start in range(0, x.shape[0], group_size):
    part = x[start:start + group_size]
    axes = tuple(range(part.ndim - 1))
    mean = jnp.mean(part, axes)
    var = jnp.mean((part - mean) ** 2, axes)
    ys.append((part - mean) / jnp.sqrt(var + epsilon) * scale + bias)
    means.append(mean)
    variances.append(var)
  return jnp.concatenate(ys), sum(means) / len(means), sum(variances) / len(variances)


def _layer(channels, group_size, **kwargs):
  layer = BatchNorm(channels, bn_group_size=group_size, momentum=0.8, rngs=nnx.Rngs(0), **kwargs)
  layer.scale[...] = jnp.linspace(0.5, 1.5, channels)
  layer.bias[...] = jnp.linspace(-0.3, 0.4, channels)
  return layer


def _input(shape, dtype=jnp.float32):
  x = jax.random.normal(jax.random.key(1), shape, dtype) * 1.7 + 0.6
  return x + jnp.arange(shape[0], dtype=dtype).reshape(-1, *[1] * (len(shape) - 1)) * 0.3


@pytest.mark.parametrize("shape, group_size", [
    ((6, 3, 5, 7), 3), ((6, 3, 5, 7), 2), ((9, 7), 3), ((10, 2, 3), 5), ((4, 3, 2, 2, 5), 1),
])
@pytest.mark.parametrize("fast_variance", [True, False])
def test_groups_match_the_float64_loop(shape, group_size, fast_variance):
  with jax.enable_x64(True):
    x = _input(shape, jnp.float64)
    layer = _layer(shape[-1], group_size, use_fast_variance=fast_variance, dtype=jnp.float64,
                   param_dtype=jnp.float64)
    layer.mean[...] = jnp.full(shape[-1], 0.2, jnp.float32)  # nnx keeps statistics in float32
    layer.var[...] = jnp.full(shape[-1], 1.3, jnp.float32)
    expected, mean, var = _reference(x, layer.scale[...], layer.bias[...], group_size,
                                     layer.epsilon)
    y = layer(x)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(layer.mean[...], 0.8 * 0.2 + 0.2 * mean, rtol=1e-7)
    np.testing.assert_allclose(layer.var[...], 0.8 * 1.3 + 0.2 * var, rtol=1e-7)
    whole, _, _ = _reference(x, layer.scale[...], layer.bias[...], shape[0], layer.epsilon)
    assert not np.allclose(y, whole, atol=1e-3)  # groups are not the whole batch


def test_float32_groups_match_the_float64_loop():
  x = _input((6, 3, 5, 7))
  layer = _layer(7, 2)
  y = nnx.jit(lambda m, x: m(x))(layer, x)
  with jax.enable_x64(True):
    expected, mean, var = _reference(np.asarray(x, np.float64),
                                     np.asarray(layer.scale[...], np.float64),
                                     np.asarray(layer.bias[...], np.float64), 2, layer.epsilon)
    expected, mean, var = map(np.asarray, (expected, mean, var))
  np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(layer.mean[...], 0.2 * mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(layer.var[...], 0.8 + 0.2 * var, rtol=1e-5)


@pytest.mark.parametrize("group_size", [3, 1])
def test_gradients_in_float64(group_size):
  with jax.enable_x64(True):
    x = _input((6, 2, 3, 5), jnp.float64)
    layer = _layer(5, group_size, dtype=jnp.float64, param_dtype=jnp.float64,
                   use_fast_variance=False, epsilon=1e-3)
    graphdef, params, stats = nnx.split(layer, nnx.Param, nnx.BatchStat)
    weights = jnp.cos(jnp.arange(x.size, dtype=jnp.float64)).reshape(x.shape)

    def loss(x, params):
      return jnp.sum(nnx.merge(graphdef, params, stats, copy=True)(x) * weights)

    def reference(x, params):
      return jnp.sum(_reference(x, params["scale"][...], params["bias"][...], group_size,
                                1e-3)[0] * weights)

    check_grads(loss, (x, params), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)
    got, expected = jax.grad(loss, (0, 1))(x, params), jax.grad(reference, (0, 1))(x, params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
      np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("group_size", [0, 6])
@pytest.mark.parametrize("train", [True, False])
def test_whole_batch_is_nnx_batch_norm(group_size, train):
  x = _input((6, 3, 5, 7))
  ours, theirs = _layer(7, group_size), nnx.BatchNorm(7, momentum=0.8, rngs=nnx.Rngs(0))
  theirs.scale[...], theirs.bias[...] = ours.scale[...], ours.bias[...]
  for layer in (ours, theirs):
    layer.mean[...] = jnp.full(7, 0.1)
    layer.train() if train else layer.eval()
  step = lambda m, x: m(x)
  np.testing.assert_array_equal(jax.jit(step)(ours, x), jax.jit(step)(theirs, x))
  np.testing.assert_array_equal(ours(x), theirs(x))
  for a, b in zip(jax.tree.leaves(nnx.state(ours)), jax.tree.leaves(nnx.state(theirs))):
    np.testing.assert_array_equal(a, b)
  names = lambda m: {path for path, _ in nnx.to_flat_state(nnx.state(m))}
  assert names(ours) == names(theirs) == {("bias",), ("mean",), ("scale",), ("var",)}


def test_evaluation_uses_the_running_averages():
  x = _input((6, 3, 7))
  layer = _layer(7, 3)
  layer(x)
  layer.eval()
  before = [np.asarray(s) for s in jax.tree.leaves(nnx.state(layer, nnx.BatchStat))]
  expected = ((x - layer.mean[...]) / jnp.sqrt(layer.var[...] + layer.epsilon)
              * layer.scale[...] + layer.bias[...])
  np.testing.assert_allclose(layer(x), expected, rtol=1e-5, atol=1e-5)
  after = jax.tree.leaves(nnx.state(layer, nnx.BatchStat))
  assert all(map(np.array_equal, before, after))


def test_set_attributes_switches_a_whole_model():
  model = nnx.Sequential(BatchNorm(4, rngs=nnx.Rngs(0)), nnx.Linear(4, 4, rngs=nnx.Rngs(0)),
                         BatchNorm(4, rngs=nnx.Rngs(0)))
  model.set_attributes(bn_group_size=2)
  assert [m.bn_group_size for m in (model.layers[0], model.layers[2])] == [2, 2]


@pytest.mark.parametrize("kwargs, shape, match", [
    (dict(bn_group_size=-1), (4, 3), "bn_group_size must be an int >= 0"),
    (dict(bn_group_size=2.0), (4, 3), "bn_group_size must be an int >= 0"),
    (dict(bn_group_size=3), (4, 3), r"bn_group_size \(3\) must divide the batch"),
    (dict(bn_group_size=2, axis=0), (4, 3), "needs the batch on axis 0"),
])
def test_bad_group_sizes(kwargs, shape, match):
  with pytest.raises(ValueError, match=match):
    BatchNorm(shape[-1] if kwargs.get("axis") != 0 else shape[0], rngs=nnx.Rngs(0),
              **kwargs)(jnp.ones(shape))


def test_no_mask_with_groups():
  with pytest.raises(ValueError, match="mask"):
    BatchNorm(3, bn_group_size=2, rngs=nnx.Rngs(0))(jnp.ones((4, 3)), mask=jnp.ones((4, 3), bool))
