import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers import GlobalAttention
from attention_lab.layers.global_attention import OPERATORS


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("project", ["v", "qkv"])
def test_every_operator_on_a_9x13_grid(operator, project):
  x = jax.random.normal(jax.random.key(0), (2, 9, 13, 8))
  layer = GlobalAttention(8, operator, num_heads=2, project=project, out_features=6,
                          spatial_shape=(9, 13), rngs=nnx.Rngs(0))
  y = layer(x)
  assert y.shape == (2, 9, 13, 6) and y.dtype == jnp.float32
  grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_value_only_projection_matches_the_operator():
  """project='v': q = k = x, v = xW + b, then the operator, then no output map."""
  x = jax.random.normal(jax.random.key(1), (1, 5, 7, 4))
  layer = GlobalAttention(4, "siamese", num_heads=2, rngs=nnx.Rngs(0))
  v = layer.value(x)
  heads = lambda t: t.reshape(1, 35, 2, 2)
  expected = ops.siamese_attention(heads(x), heads(x), heads(v), layer.w[...])
  np.testing.assert_allclose(layer(x), expected.reshape(1, 5, 7, 4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("operator", ["kronecker_kv", "kronecker_qkv", "mean", "softmax"])
def test_volumes(operator):
  x = jnp.ones((1, 3, 4, 5, 6))
  layer = GlobalAttention(6, operator, num_heads=3, project="qkv", rngs=nnx.Rngs(0))
  assert layer(x).shape == (1, 3, 4, 5, 6)


def test_bfloat16_compute_keeps_float32_params():
  layer = GlobalAttention(8, "relative", num_heads=2, project="qkv", spatial_shape=(5, 7),
                          dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
  y = layer(jnp.ones((1, 5, 7, 8)))
  assert y.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(y, np.float32)))
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(layer, nnx.Param)))


@pytest.mark.parametrize("kwargs,match", [
    (dict(operator="linear"), "operator must be one of"),
    (dict(operator="softmax", project="qk"), "project must be one of"),
    (dict(operator="softmax", num_heads=3), "divisible by num_heads"),
    (dict(operator="softmax", key_features=4), "key_features must equal in_features"),
    (dict(operator="relative"), "spatial_shape"),
])
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    GlobalAttention(8, rngs=nnx.Rngs(0), **kwargs)
