import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab import ops
from tests.ops import references as ref

SHAPES = [(1, 1, 5, 1, 3, 2), (2, 7, 5, 3, 4, 6), (1, 9, 9, 1, 8, 8)]

# The tests jit the operator: run eagerly, each jnp primitive inside it is its own XLA compile
# per shape (seconds in all on a GPU).
siamese_attention = jax.jit(ops.siamese_attention, static_argnames="global_term")


def _inputs(rng, b, nq, n, h, d, dv):
  return (rng.normal(size=(b, nq, h, d)), rng.normal(size=(b, n, h, d)),
          rng.normal(size=(b, n, h, dv)), rng.normal(size=(h, d)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("global_term", [True, False])
def test_matches_reference(rng, shape, global_term):
  q, k, v, w = _inputs(rng, *shape)
  out = siamese_attention(q, k, v, w, global_term=global_term)
  np.testing.assert_allclose(
      out, ref.siamese(q, k, v, w, global_term), rtol=1e-10, atol=1e-12)


def test_without_global_term_is_mean_value_times_query_score(rng):
  q, k, v, w = _inputs(rng, 2, 7, 5, 3, 4, 6)
  expected = jnp.einsum("bqhd,hd->bqh", q, w)[..., None] * v.mean(axis=1)[:, None]
  np.testing.assert_allclose(
      siamese_attention(q, k, v, w, global_term=False), expected, rtol=1e-10)


def test_similarity_is_symmetric(rng):
  """Sia-sim(a, b) = Sia-sim(b, a) (Eq. 4): with one-hot values the operator exposes the
  (N, N) score matrix S_ij = (x_i + x_j)ᵀw·(1/N), which must be symmetric."""
  n, d = 6, 4
  x = rng.normal(size=(1, n, 1, d))
  w = rng.normal(size=(1, d))
  one_hot = np.eye(n)[None, :, None, :]
  scores = np.asarray(siamese_attention(x, x, one_hot, w))[0, :, 0, :]
  np.testing.assert_allclose(scores, scores.T, rtol=1e-12)
  assert not np.allclose(scores, scores[0])  # non-trivial: rows differ


def test_linear_in_values_and_weights(rng):
  q, k, v, w = _inputs(rng, 2, 7, 5, 3, 4, 6)
  v2 = rng.normal(size=v.shape)
  np.testing.assert_allclose(
      siamese_attention(q, k, 2 * v - v2, w),
      2 * siamese_attention(q, k, v, w) - siamese_attention(q, k, v2, w), rtol=1e-10)
  np.testing.assert_allclose(
      siamese_attention(q, k, v, 3 * w), 3 * siamese_attention(q, k, v, w), rtol=1e-10)
