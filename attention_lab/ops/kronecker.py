"""Kronecker attention operators KAO_KV and KAO_QKV (Kronecker Attention Networks).

Any spatial rank n ≥ 1: x (B, S_1, ..., S_n, C). For each spatial mode m the
Kronecker summary averages over all other spatial modes, giving S_m tokens;
the summary concatenates the modes in order, ΣS = S_1 + ... + S_n tokens.
"""

import jax.numpy as jnp

from attention_lab.ops import _checks
from attention_lab.ops.attention import NORMALIZATIONS, dot_product_attention, flatten_grid


def kronecker_summary(x):
  """Per-mode average summaries of a grid (KAO paper Eq. 1).

  For 2D inputs (B, X, Y, C) the result is [L; H]: the X lateral averages
  (mean over Y, one token per row) followed by the Y horizontal averages
  (mean over X, one token per column). The paper juxtaposes them as [Hᵀ, Lᵀ];
  the order of key tokens does not change attention, and we keep mode order so
  that it generalises to 1D (the identity) and 3D (three summaries).
  Time O(n·B·ΠS·C), memory O(B·ΣS·C).

  Args:
    x: (B, *S, C), spatial rank ≥ 1.

  Returns:
    (B, ΣS, C) in x's dtype, averaged in at least float32.
  """
  _checks.check_min_rank("x", x, 3, "(batch, *spatial, channels)")
  spatial = tuple(range(1, x.ndim - 1))
  acc = _checks.compute_dtype(x)
  parts = [
      jnp.mean(x, axis=tuple(a for a in spatial if a != mode), dtype=acc)
      for mode in spatial
  ]
  return jnp.concatenate(parts, axis=1).astype(x.dtype)


def _head_summary(x):
  """kronecker_summary of (B, *S, H, D) multi-head tensors → (B, ΣS, H, D)."""
  merged = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
  return kronecker_summary(merged).reshape(x.shape[0], -1, *x.shape[-2:])


def _check_grids(q, k, v):
  for name, t in (("q", q), ("k", k), ("v", v)):
    _checks.check_min_rank(name, t, 4, "(batch, *spatial, heads, dim)")
  if k.shape[:-1] != v.shape[:-1]:
    raise ValueError(
        f"k and v must share (batch, *spatial, heads); got k {k.shape}, v {v.shape}")
  if q.ndim != k.ndim:
    raise ValueError(f"q and k must have the same spatial rank; got q {q.shape}, k {k.shape}")
  if (q.shape[0], q.shape[-2], q.shape[-1]) != (k.shape[0], k.shape[-2], k.shape[-1]):
    raise ValueError(
        f"q and k must share batch, heads and dim; got q {q.shape}, k {k.shape}")


def kronecker_attention_kv(q, k, v, *, scale=None, normalization="softmax"):
  """KAO_KV (KAO paper Eq. 2): every grid position attends to the summaries of k, v.

  O = attn(Q, C_k, C_v) with Q all ΠS query positions and C the Kronecker
  summaries (ΣS tokens). Time O(B·H·ΠS·ΣS·(D+Dv)); memory O(B·H·ΠS·ΣS) for the
  logits (for a 2D h×w grid: O(hw(h+w)) instead of O((hw)²)).

  Args:
    q: (B, *S, H, D); k: (B, *S', H, D); v: (B, *S', H, Dv).
    scale: logit scale, default D^−1/2.
    normalization: "softmax" (the paper's attn) or "mean" (1/N coefficients).

  Returns:
    (B, *S, H, Dv) in v's dtype.
  """
  _check_grids(q, k, v)
  _checks.check_choice("normalization", normalization, NORMALIZATIONS)
  out = dot_product_attention(
      flatten_grid(q), _head_summary(k), _head_summary(v),
      scale=scale, normalization=normalization)
  return out.reshape(*q.shape[:-1], v.shape[-1])


def kronecker_attention_qkv(q, k, v, *, scale=None, normalization="softmax"):
  """KAO_QKV (KAO paper Eq. 3): attention among summaries, then an outer sum.

  [Õ_1; ...; Õ_n] = attn(C_q, C_k, C_v) over ΣS summary tokens; the output is
  the outer sum out[b, s_1, ..., s_n] = Σ_m Õ_m[b, s_m] (for 2D: a row term
  plus a column term, the paper's H̃ ⋄ L̃). Time O(B·H·(ΣS)²·(D+Dv) + ΠS·Dv),
  memory O(B·H·(ΣS)²) plus the output; for an h×w grid O((h+w)²) instead of
  O((hw)²).

  Args:
    q: (B, *S, H, D); k: (B, *S', H, D); v: (B, *S', H, Dv).
    scale: logit scale, default D^−1/2.
    normalization: "softmax" or "mean".

  Returns:
    (B, *S, H, Dv) in v's dtype.
  """
  _check_grids(q, k, v)
  _checks.check_choice("normalization", normalization, NORMALIZATIONS)
  summary = dot_product_attention(
      _head_summary(q), _head_summary(k), _head_summary(v),
      scale=scale, normalization=normalization)
  spatial = q.shape[1:-2]
  acc = _checks.compute_dtype(summary)
  out = None
  offset = 0
  for mode, size in enumerate(spatial):
    term = summary[:, offset:offset + size].astype(acc)
    shape = [1] * len(spatial)
    shape[mode] = size
    term = term.reshape(q.shape[0], *shape, *summary.shape[-2:])
    out = term if out is None else out + term
    offset += size
  out = jnp.broadcast_to(out, (q.shape[0], *spatial, *summary.shape[-2:]))
  return out.astype(v.dtype)
