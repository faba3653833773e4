"""jax.test_util.check_grads in float64 (fwd and rev) for every operator."""

import functools

import jax
import numpy as np
import pytest
from jax.test_util import check_grads

from attention_lab import ops

MODES = ("fwd", "rev")


def _normal(rng, *shape):
  return rng.normal(size=shape)


def _cases(rng):
  q, k, v = _normal(rng, 1, 4, 2, 3), _normal(rng, 1, 5, 2, 3), _normal(rng, 1, 5, 2, 2)
  gq, gk, gv = _normal(rng, 1, 3, 2, 1, 2), _normal(rng, 1, 3, 2, 1, 2), _normal(rng, 1, 3, 2, 1, 2)
  rel_h, rel_w = _normal(rng, 5, 2), _normal(rng, 3, 2)
  x_pos = np.abs(_normal(rng, 1, 6, 3)) + 0.1
  bases = np.abs(_normal(rng, 1, 3, 2)) + 0.1
  bias = _normal(rng, 1, 2, 4, 5)
  return {
      "softmax": (lambda q, k, v: ops.dot_product_attention(q, k, v), (q, k, v), 2),
      "softmax_bias_chunked": (
          lambda q, k, v, b: ops.dot_product_attention(q, k, v, bias=b, query_chunk_size=3),
          (q, k, v, bias), 1),
      "mean": (lambda q, k, v: ops.dot_product_attention(q, k, v, normalization="mean"),
               (q, k, v), 2),
      "pool": (lambda k, v: ops.pool_keys_values(k, v), (gk, gv), 1),
      "relative_logits": (ops.relative_logits_2d, (gq, rel_h, rel_w), 1),
      # Relative attention is a custom VJP (reverse mode, reverse-over-reverse), no jvp.
      "relative": (ops.relative_attention_2d, (gq, gk, gv, rel_h, rel_w), 2, ("rev",)),
      "relative_chunked": (
          lambda *a: ops.relative_attention_2d(*a, query_chunk_size=2),
          (gq, gk, gv, rel_h, rel_w), 2, ("rev",)),
      "siamese": (ops.siamese_attention, (q, k, v, _normal(rng, 2, 3)), 2),
      "kronecker_summary": (ops.kronecker_summary, (_normal(rng, 1, 3, 2, 2),), 1),
      "kronecker_kv": (ops.kronecker_attention_kv, (gq, gk, gv), 2),
      "kronecker_qkv": (ops.kronecker_attention_qkv, (gq, gk, gv), 2),
      "nmf_bptt": (functools.partial(ops.nmf, steps=2, gradient="bptt"), (x_pos, bases), 1),
      "soft_vq_bptt": (
          functools.partial(ops.soft_vq, steps=2, temperature=0.7, gradient="bptt"),
          (_normal(rng, 1, 6, 3), _normal(rng, 1, 3, 2)), 1),
      "soft_cd_bptt": (
          functools.partial(ops.soft_cd, steps=2, temperature=0.7, beta=0.1, gradient="bptt"),
          (_normal(rng, 1, 6, 3), _normal(rng, 1, 3, 2)), 1),
  }


@pytest.mark.parametrize("name", sorted(_cases(np.random.default_rng(0))))
def test_check_grads(name):
  fn, args, order, *modes = _cases(np.random.default_rng(0))[name]
  check_grads(jax.jit(fn), args, order=order, modes=modes[0] if modes else MODES, atol=1e-5,
              rtol=1e-5)
