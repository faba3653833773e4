"""Dot-product attention (softmax and 1/N forms) and the Attn+Pool key/value pooling.

Layout: q (B, Nq, H, D), k (B, Nk, H, D), v (B, Nk, H, Dv), as in
`jax.nn.dot_product_attention`.
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from attention_lab.ops import _checks

NORMALIZATIONS = ("softmax", "mean")


def check_qkv(q, k, v) -> None:
  """Validates q (B, Nq, H, D), k (B, Nk, H, D), v (B, Nk, H, Dv)."""
  for name, x in (("q", q), ("k", k), ("v", v)):
    _checks.check_rank(name, x, 4, "(batch, tokens, heads, dim)")
  _checks.check_dims(("q", "k", "v"), (q, k, v), (0, 0, 0), "batch sizes (axis 0)")
  _checks.check_dims(("q", "k", "v"), (q, k, v), (2, 2, 2), "head counts (axis 2)")
  _checks.check_dims(("q", "k"), (q, k), (3, 3), "feature dims (axis 3)")
  _checks.check_dims(("k", "v"), (k, v), (1, 1), "token counts (axis 1)")


def default_scale(q, scale):
  return q.shape[-1] ** -0.5 if scale is None else scale


def chunk_queries(fn: Callable, q, *args, query_chunk_size: int | None, query_axis: int = 1):
  """Applies `fn(q_chunk, *args_chunk)` to query chunks, one chunk live at a time.

  `args` are split along `query_axis` like q, except where that axis has size 1
  (broadcast) or the arg is None. A chunk size that does not divide the query
  count is handled by zero-padding the last chunk. Each chunk is rematerialised
  in the backward pass (`jax.checkpoint`), so training memory is that of one
  chunk, not of the full (Nq, Nk) logits. Outputs have the query axis at 1.
  """
  n = q.shape[query_axis]
  if query_chunk_size is None or query_chunk_size >= n:
    return fn(q, *args)
  num = -(-n // query_chunk_size)
  pad = num * query_chunk_size - n

  def split(x):
    if x is None or x.shape[query_axis] == 1:
      return None
    widths = [(0, 0)] * x.ndim
    widths[query_axis] = (0, pad)
    x = jnp.pad(x, widths)
    x = x.reshape(
        x.shape[:query_axis] + (num, query_chunk_size) + x.shape[query_axis + 1:])
    return jnp.moveaxis(x, query_axis, 0)

  chunked = [split(a) for a in (q, *args)]
  whole = [a if c is None else None for a, c in zip((q, *args), chunked)]

  @jax.checkpoint
  def body(xs):
    full = [w if c is None else c for w, c in zip(whole, xs)]
    return fn(*full)

  out = lax.map(body, chunked)  # (num, B, chunk, ...)
  out = jnp.moveaxis(out, 0, 1)
  out = out.reshape(out.shape[:1] + (num * query_chunk_size,) + out.shape[3:])
  return out[:, :n]


def _softmax_attend(q, k, v, bias, scale):
  acc = _checks.compute_dtype(q, k, v)
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=acc) * scale
  if bias is not None:
    logits = logits + bias.astype(acc)
  weights = jax.nn.softmax(logits, axis=-1)
  out = jnp.einsum(
      "bhqk,bkhe->bqhe", weights.astype(v.dtype), v, preferred_element_type=acc)
  return out.astype(v.dtype)


def _mean_attend(q, k, v, scale):
  acc = _checks.compute_dtype(q, k, v)
  # Heads moved in front explicitly (a bitcast when H = 1): XLA:CPU then runs plain
  # batched GEMMs, where heads as a middle einsum axis cost copies. Not done in the
  # softmax form, where it slows GlobalAttention down (XLA:CPU fuses the projections in;
  # experiments/results/performance_goals.md, goals 1 and 2).
  q, k, v = (jnp.moveaxis(t, 2, 1) for t in (q, k, v))
  kv = jnp.einsum("bhkd,bhke->bhde", k, v, preferred_element_type=acc)
  kv = kv * (scale / k.shape[2])
  # q is upcast rather than kv rounded down: kv carries a sum over all keys (and
  # XLA:CPU has no bf16 x bf16 -> f32 kernel for this contraction).
  out = jnp.einsum("bhqd,bhde->bhqe", q.astype(acc), kv)
  return jnp.moveaxis(out, 1, 2).astype(v.dtype)


def dot_product_attention(q, k, v, *, scale=None, bias=None, normalization="softmax",
                          query_chunk_size=None):
  """Scaled dot-product attention with softmax or 1/N normalisation.

  `"softmax"`: out_i = Σ_j softmax_j(scale·q_i·k_j + bias_ij) v_j (SAO paper
  Eq. 1). Time O(Nq·Nk·(D+Dv)); memory O(Nq·Nk) per head, or O(c·Nk) with
  `query_chunk_size=c` (queries are processed c at a time and recomputed in the
  backward pass, so the (Nq, Nk) logits never exist at once).

  `"mean"`: out_i = (1/Nk) Σ_j (scale·q_i·k_j) v_j computed as q(kᵀv)·scale/Nk
  (SAO paper Eq. 2, "Attn1/N"; also the refined self-attention of the SAGAN
  paper, out = z(yᵀφ(x))/N). Time O((Nq+Nk)·D·Dv), extra memory O(D·Dv) per
  head; Nq×Nk is never formed, so no chunking is needed (the argument is
  ignored) and `bias` is not supported.

  Args:
    q: (B, Nq, H, D) queries.
    k: (B, Nk, H, D) keys.
    v: (B, Nk, H, Dv) values.
    scale: logit scale; default 1/sqrt(D) as in `jax.nn.dot_product_attention`.
    bias: optional additive logits, broadcastable to (B, H, Nq, Nk).
    normalization: "softmax" or "mean".
    query_chunk_size: optional number of queries processed at once (any
      positive int; it need not divide Nq).

  Returns:
    (B, Nq, H, Dv) in v's dtype; logits, softmax and sums accumulate in at
    least float32.
  """
  check_qkv(q, k, v)
  _checks.check_choice("normalization", normalization, NORMALIZATIONS)
  _checks.check_chunk(query_chunk_size)
  scale = default_scale(q, scale)
  if normalization == "mean":
    if bias is not None:
      raise ValueError("bias is only supported with normalization='softmax'")
    return _mean_attend(q, k, v, scale)
  if bias is not None:
    expected = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    try:
      if bias.ndim > 4 or jnp.broadcast_shapes(bias.shape, expected) != expected:
        raise ValueError
    except ValueError:
      raise ValueError(
          f"bias must broadcast to (batch, heads, Nq, Nk) = {expected}, got {bias.shape}"
      ) from None
    bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
  return chunk_queries(
      lambda qc, bc: _softmax_attend(
          qc, k, v, None if bc is None else jnp.moveaxis(bc, 1, 2), scale),
      q, None if bias is None else jnp.moveaxis(bias, 2, 1),
      query_chunk_size=query_chunk_size)


def _pool_grid(x, window: int):
  """Average-pools x (B, *S, H, D) over S with stride `window`; flattens S."""
  spatial = x.shape[1:-2]
  acc = _checks.compute_dtype(x)
  dims = (1,) + (window,) * len(spatial) + (1, 1)
  pads = ((0, 0),) + tuple((0, -s % window) for s in spatial) + ((0, 0), (0, 0))
  sums = lax.reduce_window(x.astype(acc), np.zeros((), acc), lax.add, dims, dims, pads)
  counts = np.ones((), np.float64)
  for s in spatial:
    per_dim = np.minimum(window, s - window * np.arange(-(-s // window)))
    counts = np.multiply.outer(counts, per_dim)
  out = sums / jnp.asarray(counts, acc)[None, ..., None, None]
  return out.reshape(x.shape[0], -1, *x.shape[-2:]).astype(x.dtype)


def pool_keys_values(k, v, *, window: int = 2):
  """Average-pools grid keys and values for the "Attn+Pool" baseline.

  SAO Table 2 / KAO Table 1 reduce attention cost by pooling K and V with a
  2×2 window and stride 2 before regular attention. Odd sizes keep their edge:
  a partial window averages only its valid entries (M = Π ceil(S_i/window)).
  Time and memory O(N·D).

  Args:
    k: (B, *S, H, D) keys on a grid of any spatial rank.
    v: (B, *S, H, Dv) values on the same grid.
    window: pooling window and stride along every spatial axis.

  Returns:
    Pooled, flattened (B, M, H, D) keys and (B, M, H, Dv) values, ready for
    `dot_product_attention` with flattened queries.
  """
  _checks.check_min_rank("k", k, 4, "(batch, *spatial, heads, dim)")
  _checks.check_min_rank("v", v, 4, "(batch, *spatial, heads, dim)")
  if k.shape[:-1] != v.shape[:-1]:
    raise ValueError(
        f"k and v must share (batch, *spatial, heads); got k {k.shape}, v {v.shape}")
  _checks.check_positive("window", window, integer=True)
  return _pool_grid(k, window), _pool_grid(v, window)


def flatten_grid(x):
  """(B, *S, H, D) -> (B, prod(S), H, D)."""
  return x.reshape(x.shape[0], math.prod(x.shape[1:-2]), *x.shape[-2:])
