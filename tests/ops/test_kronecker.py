import jax
import numpy as np
import pytest

from attention_lab import ops
from tests.ops import references as ref

GRIDS = [(7,), (5, 7), (4, 4), (3, 4, 2)]

# The tests jit the operators: run eagerly, each jnp primitive inside them is its own XLA
# compile per shape (seconds in all on a GPU).
summary = jax.jit(ops.kronecker_summary)
attention_kv = jax.jit(ops.kronecker_attention_kv, static_argnames=("scale", "normalization"))
attention_qkv = jax.jit(ops.kronecker_attention_qkv, static_argnames=("scale", "normalization"))


@pytest.mark.parametrize("grid", GRIDS)
def test_summary_matches_loops(rng, grid):
  x = rng.normal(size=(2, *grid, 3))
  out = summary(x)
  assert out.shape == (2, sum(grid), 3)
  np.testing.assert_allclose(out, ref.kronecker_summary(x), rtol=1e-12)


def test_summary_2d_is_row_then_column_means(rng):
  x = rng.normal(size=(1, 5, 7, 2))
  out = np.asarray(summary(x))
  np.testing.assert_allclose(out[:, :5], x.mean(axis=2), rtol=1e-12)
  np.testing.assert_allclose(out[:, 5:], x.mean(axis=1), rtol=1e-12)


def _qkv(rng, grid, h=3, d=4, dv=5):
  return (rng.normal(size=(2, *grid, h, d)), rng.normal(size=(2, *grid, h, d)),
          rng.normal(size=(2, *grid, h, dv)))


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("heads", [1, 3])
def test_kv_matches_reference(rng, grid, heads):
  q, k, v = _qkv(rng, grid, h=heads)
  out = attention_kv(q, k, v)
  assert out.shape == (*q.shape[:-1], 5)
  np.testing.assert_allclose(out, ref.kronecker_kv(q, k, v, 0.5), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("heads", [1, 3])
def test_qkv_matches_reference(rng, grid, heads):
  q, k, v = _qkv(rng, grid, h=heads)
  out = attention_qkv(q, k, v, scale=0.7)
  np.testing.assert_allclose(out, ref.kronecker_qkv(q, k, v, 0.7), rtol=1e-10, atol=1e-12)


def test_qkv_output_is_row_term_plus_column_term(rng):
  q, k, v = _qkv(rng, (5, 7))
  out = np.asarray(attention_qkv(q, k, v))
  interaction = out - out[:, :, :1] - out[:, :1, :] + out[:, :1, :1]
  np.testing.assert_allclose(interaction, 0, atol=1e-12)
  assert np.abs(out - out[:, :1]).max() > 1e-3 and np.abs(out - out[:, :, :1]).max() > 1e-3


def test_mean_normalization(rng):
  q, k, v = _qkv(rng, (5, 7))
  flat = q.reshape(2, 35, 3, 4)
  expected = ref.attention(flat, ref.head_summary(k), ref.head_summary(v), 0.5,
                           normalization="mean")
  np.testing.assert_allclose(
      attention_kv(q, k, v, normalization="mean"),
      expected.reshape(2, 5, 7, 3, 5), rtol=1e-10)
