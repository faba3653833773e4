"""bfloat16 inputs, and trace-time ValueErrors that name the offending argument."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab import ops


@pytest.fixture(autouse=True)
def x64():  # overrides the float64 fixture: these tests compare bfloat16 with float32
  with jax.enable_x64(False):
    yield


def _ops(rng):
  def n(*shape):
    return jnp.asarray(rng.normal(size=shape), jnp.float32)

  q, k, v = n(2, 9, 3, 8), n(2, 11, 3, 8), n(2, 11, 3, 8)
  g = n(1, 5, 7, 2, 8)
  x_pos = jnp.abs(n(2, 40, 16))
  bases = ops.random_bases(jax.random.key(0), 2, 16, 4)
  return {
      "softmax": (functools.partial(ops.dot_product_attention, query_chunk_size=4), (q, k, v)),
      "mean": (functools.partial(ops.dot_product_attention, normalization="mean"), (q, k, v)),
      "relative": (functools.partial(ops.relative_attention_2d, query_chunk_size=14),
                   (g, g, g, n(9, 8), n(13, 8))),
      "siamese": (ops.siamese_attention, (q, k, v, n(3, 8))),
      "kronecker_kv": (ops.kronecker_attention_kv, (g, g, g)),
      "kronecker_qkv": (ops.kronecker_attention_qkv, (g, g, g)),
      "nmf": (lambda x, b: ops.nmf(x, b, steps=3)[1], (x_pos, bases)),
      "soft_vq": (lambda x, b: ops.soft_vq(x, b, steps=3, temperature=1.0)[0], (x_pos, bases)),
      "soft_cd": (lambda x, b: ops.soft_cd(x, b, steps=3, temperature=1.0, beta=0.1)[0],
                  (x_pos, bases)),
  }


@pytest.mark.parametrize("name", sorted(_ops(np.random.default_rng(0))))
def test_bfloat16_close_to_float32(name):
  fn, args = _ops(np.random.default_rng(0))[name]
  fn = jax.jit(fn)  # run eagerly, each jnp primitive inside it is its own XLA compile
  full = fn(*args)
  half = fn(*[a.astype(jnp.bfloat16) for a in args])
  assert half.dtype == jnp.bfloat16 and full.dtype == jnp.float32
  half = np.asarray(half, np.float32)
  assert np.all(np.isfinite(half))
  assert np.linalg.norm(half - full) / np.linalg.norm(full) < 1e-2


def z(*shape):
  return jnp.zeros(shape)


Q, K, V = z(2, 4, 3, 8), z(2, 5, 3, 8), z(2, 5, 3, 6)
G = z(1, 5, 7, 2, 4)
X, B = z(2, 6, 4), z(2, 4, 3)
ERRORS = [
    (lambda: ops.dot_product_attention(z(4, 3, 8), K, V), "q must have shape"),
    (lambda: ops.dot_product_attention(Q, z(3, 5, 3, 8), z(3, 5, 3, 6)), "batch"),
    (lambda: ops.dot_product_attention(Q, z(2, 5, 2, 8), z(2, 5, 2, 6)), "head"),
    (lambda: ops.dot_product_attention(Q, z(2, 5, 3, 7), V), "feature dims"),
    (lambda: ops.dot_product_attention(Q, K, z(2, 4, 3, 6)), "token counts"),
    (lambda: ops.dot_product_attention(Q, K, V, normalization="l2"), "normalization"),
    (lambda: ops.dot_product_attention(Q, K, V, bias=z(2, 3, 4, 4)), "bias"),
    (lambda: ops.dot_product_attention(Q, K, V, normalization="mean", bias=z(4, 5)), "bias"),
    (lambda: ops.dot_product_attention(Q, K, V, query_chunk_size=0), "query_chunk_size"),
    (lambda: ops.relative_attention_2d(G, G, G, z(8, 4), z(13, 4)), "rel_h"),
    (lambda: ops.relative_attention_2d(G, G, G, z(9, 4), z(12, 4)), "rel_w"),
    (lambda: ops.relative_attention_2d(G, G, G, z(9, 3), z(13, 3)), "rel_h"),
    (lambda: ops.relative_attention_2d(G, z(1, 5, 6, 2, 4), G, z(9, 4), z(13, 4)), "k must share"),
    (lambda: ops.relative_logits_2d(z(5, 7, 2, 4), z(9, 4), z(13, 4)), "q must have shape"),
    (lambda: ops.siamese_attention(Q, K, V, z(3, 7)), "w must have shape"),
    (lambda: ops.siamese_attention(Q, K, z(1, 5, 3, 6), z(3, 8)), "batch"),
    (lambda: ops.kronecker_attention_kv(G, G, z(1, 5, 6, 2, 4)), "k and v"),
    (lambda: ops.kronecker_attention_qkv(G, z(1, 5, 7, 3, 4), z(1, 5, 7, 3, 4)), "heads"),
    (lambda: ops.kronecker_attention_qkv(G, z(1, 35, 2, 4), z(1, 35, 2, 4)), "spatial rank"),
    (lambda: ops.kronecker_attention_kv(G, G, G, normalization="x"), "normalization"),
    (lambda: ops.kronecker_summary(z(3, 4)), "x must have shape"),
    (lambda: ops.nmf(X, B, steps=0), "steps"),
    (lambda: ops.nmf(X, B, steps=2, gradient="truncated"), "gradient"),
    (lambda: ops.nmf(X, z(2, 5, 3), steps=2), "bases must have shape"),
    (lambda: ops.nmf(z(6, 4), B, steps=2), "x must have shape"),
    (lambda: ops.soft_vq(X, B, steps=2, temperature=0.0), "temperature"),
    (lambda: ops.soft_cd(X, B, steps=2, temperature=-1.0, beta=0.1), "temperature"),
    (lambda: ops.soft_cd(X, B, steps=2, temperature=1.0, beta=0.0), "beta"),
    (lambda: ops.fixed_point_iterate(lambda s: s, 0.0, steps=0), "steps"),
    (lambda: ops.random_bases(jax.random.key(0), 1, 4, 2, distribution="beta"), "distribution"),
    (lambda: ops.pool_keys_values(G, G, window=0), "window"),
]


@pytest.mark.parametrize("call,match", ERRORS, ids=[m for _, m in ERRORS])
def test_errors_name_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    jax.eval_shape(call)  # raised while tracing, before any computation
