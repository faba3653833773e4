import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab import ops
from attention_lab.ops import relative
from tests.ops import references as ref

GRIDS = [(5, 7), (4, 4), (3, 1), (1, 4)]


# Tests jit the operator and its gradients: run eagerly, each jnp primitive inside it is its
# own XLA compile per shape (seconds in all on a GPU). Each call traces afresh, so a
# monkeypatched AUTO_BLOCK_BYTES is read.
def attention(**options):
  return jax.jit(lambda *a: ops.relative_attention_2d(*a, **options))


def grads(loss):
  return jax.jit(jax.grad(loss, argnums=range(5)))


def _inputs(rng, x, y, b=2, h=3, d=4, dv=5):
  return (rng.normal(size=(b, x, y, h, d)), rng.normal(size=(b, x, y, h, d)),
          rng.normal(size=(b, x, y, h, dv)), rng.normal(size=(2 * x - 1, d)),
          rng.normal(size=(2 * y - 1, d)))


@pytest.mark.parametrize("grid", GRIDS)
def test_logits_match_index_loops(rng, grid):
  q, _, _, rel_h, rel_w = _inputs(rng, *grid)
  lh, lw = jax.jit(ops.relative_logits_2d)(q, rel_h, rel_w)
  expected_h, expected_w = ref.relative_logits(q, rel_h, rel_w)
  np.testing.assert_allclose(lh, expected_h, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(lw, expected_w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lq,lk", [(1, 1), (1, 4), (3, 3), (2, 5), (5, 2)])
def test_rel_to_abs(rng, lq, lk):
  rel = rng.normal(size=(2, lq, lq + lk - 1))
  out = np.asarray(jax.jit(lambda rel: ops.rel_to_abs(rel, lk))(rel))
  for a in range(lq):
    for j in range(lk):
      np.testing.assert_array_equal(out[:, a, j], rel[:, a, j - a + lq - 1])


@pytest.mark.parametrize("grid", GRIDS)
def test_attention_matches_reference(rng, grid):
  q, k, v, rel_h, rel_w = _inputs(rng, *grid)
  expected = ref.relative_attention(q, k, v, rel_h, rel_w, 0.5)
  np.testing.assert_allclose(
      attention()(q, k, v, rel_h, rel_w), expected, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(
      attention(scale=0.2)(q, k, v, rel_h, rel_w),
      ref.relative_attention(q, k, v, rel_h, rel_w, 0.2), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 7, 14, 15, 20, 35, 1000])
def test_chunked_equals_unchunked(rng, chunk):
  q, k, v, rel_h, rel_w = _inputs(rng, 5, 7)
  full = attention()(q, k, v, rel_h, rel_w)
  np.testing.assert_allclose(
      attention(query_chunk_size=chunk)(q, k, v, rel_h, rel_w), full,
      rtol=1e-12, atol=1e-12)


def test_chunked_gradient_equals_unchunked(rng):
  q, k, v, rel_h, rel_w = _inputs(rng, 5, 3, b=1, h=2, d=3, dv=2)

  def loss(chunk):
    return lambda *a: jnp.sum(jnp.sin(ops.relative_attention_2d(*a, query_chunk_size=chunk)))

  g_full = grads(loss(None))(q, k, v, rel_h, rel_w)
  g_chunk = grads(loss(6))(q, k, v, rel_h, rel_w)
  for a, b in zip(g_chunk, g_full):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_no_pairwise_embedding_tensor():
  """Neither op forms a (HW, HW, D) tensor (AA appendix A.3)."""
  x, y, d = 6, 5, 7
  q = jnp.zeros((1, x, y, 1, d))
  tables = jnp.zeros((2 * x - 1, d)), jnp.zeros((2 * y - 1, d))
  for fn in (lambda q, h, w: ops.relative_logits_2d(q, h, w),
             lambda q, h, w: ops.relative_attention_2d(q, q, q, h, w)):
    jaxpr = jax.make_jaxpr(fn)(q, *tables)
    sizes = [np.prod(var.aval.shape) for eqn in jaxpr.eqns for var in eqn.outvars]
    assert max(sizes) <= (x * y) ** 2, max(sizes)


@pytest.mark.parametrize("grid,budget_rows,rows", [((6, 7), 4, 3), ((7, 3), 3, 1), ((4, 4), 1, 1),
                                                   ((5, 7), 5, 5), ((6, 5), 5, 3)])
def test_auto_chunk_equals_unchunked(rng, monkeypatch, grid, budget_rows, rows):
  """"auto" (the default) with a block budget of `budget_rows` rows: blocks of the largest
  divisor of the height within it."""
  q, k, v, rel_h, rel_w = _inputs(rng, *grid, b=2, h=2, d=3, dv=2)
  x, y = grid
  per_row = 2 * 2 * y * x * y * 8  # float64 logits bytes of one grid row of queries
  monkeypatch.setattr(relative, "AUTO_BLOCK_BYTES", budget_rows * per_row)
  assert relative.query_block_rows(q.shape, "auto", 8) == rows

  def loss(chunk):
    return lambda *a: jnp.sum(jnp.sin(ops.relative_attention_2d(*a, query_chunk_size=chunk)))

  np.testing.assert_allclose(attention()(q, k, v, rel_h, rel_w),
                             attention(query_chunk_size=None)(q, k, v, rel_h, rel_w),
                             rtol=1e-12, atol=1e-12)
  g_auto = grads(loss("auto"))(q, k, v, rel_h, rel_w)
  g_full = grads(loss(None))(q, k, v, rel_h, rel_w)
  for a, b in zip(g_auto, g_full):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 8, 20])
def test_chunked_gradient_odd_grid(rng, chunk):
  """Explicit chunks of 2 and 6 rows do not divide 7 rows (the last block is padded)."""
  q, k, v, rel_h, rel_w = _inputs(rng, 7, 3, b=1, h=2, d=3, dv=2)
  loss = lambda c: lambda *a: jnp.sum(
      jnp.cos(ops.relative_attention_2d(*a, query_chunk_size=c)) * jnp.arange(2.0))
  g_chunk = grads(loss(chunk))(q, k, v, rel_h, rel_w)
  g_full = grads(loss(None))(q, k, v, rel_h, rel_w)
  for a, b in zip(g_chunk, g_full):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_query_block_rows():
  rows = relative.query_block_rows
  assert rows((2, 5, 7, 3, 4), None) == 5
  assert rows((2, 5, 7, 3, 4), 20) == 2 and rows((2, 5, 7, 3, 4), 3) == 1
  assert rows((2, 5, 7, 3, 4), 1000) == 5
  # The issue-17 case (batch 2, 8 heads): small grids unchunked, large ones in row blocks
  # whose float32 logits fit the budget (one row at 56² already exceeds it).
  assert rows((2, 14, 14, 8, 32), "auto") == 14
  assert rows((2, 28, 28, 8, 32), "auto") == 2
  assert rows((2, 56, 56, 8, 32), "auto") == 1
  per_row = 2 * 8 * 28 * 28 * 28 * 4
  assert rows((2, 28, 28, 8, 32), "auto") * per_row <= relative.AUTO_BLOCK_BYTES


def test_bad_chunk_names_the_argument():
  g = jnp.zeros((1, 3, 4, 1, 2))
  tables = jnp.zeros((5, 2)), jnp.zeros((7, 2))
  for bad in ("fast", 0, -3, 2.5):
    with pytest.raises(ValueError, match="query_chunk_size"):
      ops.relative_attention_2d(g, g, g, *tables, query_chunk_size=bad)
