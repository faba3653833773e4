"""Siamese attention operator (SAO), Siamese Attention Networks Eq. 4-6."""

import jax.numpy as jnp

from attention_lab.ops import _checks
from attention_lab.ops.attention import check_qkv


def _block_diagonal(w):
  """(H, D) per-head vectors → the (H·D, H) matrix with w[h] in rows h·D..(h+1)·D of column h."""
  h, d = w.shape
  return (jnp.eye(h, dtype=w.dtype)[:, None, :] * w[:, :, None]).reshape(h * d, h)


def siamese_attention(q, k, v, w, *, global_term=True):
  """Attention with the Siamese similarity (q_i + k_j)ᵀw in place of q_iᵀk_j.

  out_i = (1/N) Σ_j v_j (q_i + k_j)ᵀw = v̄ (wᵀq_i) + (1/N) V Kᵀw   (Eq. 5-6),
  where v̄ is the mean value. The first (local) term depends on the query,
  the second (global) term is one vector shared by all queries. Evaluated in
  this factored form: time O(B·H·N·(D+Dv)) (one read of q, k, v and one
  write), extra memory O(B·H·N) for the scores wᵀq_i and wᵀk_j; no N×N
  matrix. The similarity is symmetric in its two arguments. The paper leaves
  heads open: here each head has its own w row; the SANet modules replace the
  1/N by batch norm in the layer, not here.

  Memory-bound, so it is written as plain 2D GEMMs that read each input once
  and transpose nothing: scores = q.reshape(B·Nq, H·D) @ W with W the (H·D, H)
  block-diagonal matrix of w, and v̄ with (1/N) Σ_j (wᵀk_j) v_j from one GEMM
  [1, wᵀk]ᵀ/N @ v.reshape(B, N, H·Dv) whose H diagonal blocks are kept. The
  discarded off-diagonal blocks make that GEMM (1+H)·N·H·Dv multiply-adds
  instead of 2·N·H·Dv, but not a second pass over v (for the H ≤ 8 heads of
  SANet the op stays bound by memory traffic).

  Args:
    q: (B, Nq, H, D) queries.
    k: (B, N, H, D) keys.
    v: (B, N, H, Dv) values.
    w: (H, D) similarity weights, one vector per head.
    global_term: False keeps only the local term v̄ wᵀq_i (SAO Table 6
      ablation "SANet w/o global term").

  Returns:
    (B, Nq, H, Dv) in v's dtype, accumulated in at least float32.
  """
  check_qkv(q, k, v)
  b, n, h, d = k.shape
  dv = v.shape[-1]
  if w.shape != (h, d):
    raise ValueError(f"w must have shape (heads, dim) = {(h, d)}, got {w.shape}")
  acc = _checks.compute_dtype(q, k, v, w)
  w_bd = _block_diagonal(w)
  score = lambda t: jnp.matmul(t.reshape(-1, h * d), w_bd, preferred_element_type=acc)
  coef = jnp.full((b, n, 1), 1.0 / n, acc)
  if global_term:
    coef = jnp.concatenate([coef, score(k).reshape(b, n, h) / n], axis=-1)  # (B, N, 1+H)
  stats = jnp.einsum("bkc,bkf->bcf", coef, v.reshape(b, n, h * dv).astype(acc))
  out = score(q).reshape(b, -1, h, 1) * stats[:, None, 0].reshape(b, 1, h, dv)
  if global_term:
    heads = jnp.arange(h)
    shared = stats[:, 1:].reshape(b, h, h, dv)[:, heads, heads]  # (B, H, Dv)
    out = out + shared[:, None]
  return out.astype(v.dtype)
