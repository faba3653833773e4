import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab import ops
from tests.ops import references as ref

# (B, Nq, Nk, H, D, Dv): single query, odd sizes, one and three heads, Nq != Nk.
SHAPES = [(1, 1, 5, 1, 3, 2), (2, 7, 5, 3, 4, 6), (1, 9, 9, 1, 8, 8)]

# The tests jit the operators: run eagerly, each jnp primitive inside them is its own XLA
# compile per shape (seconds in all on a GPU).
attention = jax.jit(ops.dot_product_attention,
                    static_argnames=("scale", "normalization", "query_chunk_size"))


def _qkv(rng, b, nq, nk, h, d, dv):
  return (rng.normal(size=(b, nq, h, d)), rng.normal(size=(b, nk, h, d)),
          rng.normal(size=(b, nk, h, dv)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("normalization", ["softmax", "mean"])
def test_matches_reference(rng, shape, normalization):
  q, k, v = _qkv(rng, *shape)
  out = attention(q, k, v, normalization=normalization)
  expected = ref.attention(q, k, v, shape[4] ** -0.5, normalization=normalization)
  np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


def test_default_scale_is_that_of_jax_nn(rng):
  q, k, v = _qkv(rng, 2, 6, 4, 2, 5, 5)
  np.testing.assert_allclose(
      attention(q, k, v), jax.jit(jax.nn.dot_product_attention)(q, k, v), rtol=1e-5)
  np.testing.assert_allclose(
      attention(q, k, v, scale=0.3),
      ref.attention(q, k, v, 0.3), rtol=1e-10)


@pytest.mark.parametrize("bias_shape", [(2, 3, 7, 5), (1, 3, 1, 5), (7, 5)])
@pytest.mark.parametrize("chunk", [None, 2, 7])
def test_bias(rng, bias_shape, chunk):
  q, k, v = _qkv(rng, 2, 7, 5, 3, 4, 6)
  bias = rng.normal(size=bias_shape)
  out = attention(q, k, v, bias=bias, query_chunk_size=chunk)
  np.testing.assert_allclose(out, ref.attention(q, k, v, 0.5, bias), rtol=1e-10)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7, 100])
def test_chunked_equals_unchunked(rng, chunk):
  q, k, v = _qkv(rng, 2, 7, 5, 3, 4, 6)
  full = attention(q, k, v)
  np.testing.assert_allclose(attention(q, k, v, query_chunk_size=chunk), full, rtol=1e-12)


def test_chunked_gradient_equals_unchunked(rng):
  q, k, v = _qkv(rng, 1, 7, 5, 2, 3, 3)
  loss = lambda c: lambda q, k, v: jnp.sum(
      jnp.sin(ops.dot_product_attention(q, k, v, query_chunk_size=c)))
  g_full = jax.jit(jax.grad(loss(None), argnums=(0, 1, 2)))(q, k, v)
  g_chunk = jax.jit(jax.grad(loss(3), argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g_chunk, g_full):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_mean_is_linear_order_and_equals_quadratic_form(rng):
  q, k, v = _qkv(rng, 2, 7, 5, 3, 4, 6)
  quadratic = jnp.einsum("bqhd,bkhd,bkhe->bqhe", q, k, v) * 0.5 / 5
  np.testing.assert_allclose(
      ops.dot_product_attention(q, k, v, normalization="mean"), quadratic, rtol=1e-10)
  # No (Nq, Nk) array anywhere in the computation: the largest intermediate is D×Dv.
  jaxpr = jax.make_jaxpr(
      lambda q, k, v: ops.dot_product_attention(q, k, v, normalization="mean"))(
          jnp.zeros((1, 64, 1, 4)), jnp.zeros((1, 48, 1, 4)), jnp.zeros((1, 48, 1, 4)))
  shapes = [var.aval.shape for eqn in jaxpr.eqns for var in eqn.outvars]
  assert not any(64 in s and 48 in s for s in shapes), shapes


@pytest.mark.parametrize("grid", [(5, 7), (4, 4), (3, 4, 5), (7,)])
def test_pool_keys_values(rng, grid):
  k = rng.normal(size=(2, *grid, 3, 4))
  v = rng.normal(size=(2, *grid, 3, 5))
  pk, pv = jax.jit(ops.pool_keys_values)(k, v)
  np.testing.assert_allclose(pk, ref.avg_pool_grid(k, 2), rtol=1e-12)
  np.testing.assert_allclose(pv, ref.avg_pool_grid(v, 2), rtol=1e-12)
  assert pk.shape[1] == np.prod([-(-s // 2) for s in grid])
