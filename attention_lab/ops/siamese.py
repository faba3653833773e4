"""Siamese attention operator (SAO), Siamese Attention Networks Eq. 4-6."""

import jax.numpy as jnp

from attention_lab.ops import _checks
from attention_lab.ops.attention import check_qkv


def siamese_attention(q, k, v, w, *, global_term=True):
  """Attention with the Siamese similarity (q_i + k_j)ᵀw in place of q_iᵀk_j.

  out_i = (1/N) Σ_j v_j (q_i + k_j)ᵀw = v̄ (wᵀq_i) + (1/N) V Kᵀw   (Eq. 5-6),
  where v̄ is the mean value. The first (local) term depends on the query,
  the second (global) term is one vector shared by all queries. Evaluated in
  this factored form: time O(B·H·N·(D+Dv)), extra memory O(B·H·N) for the
  scores wᵀq_i and wᵀk_j; no N×N matrix. The similarity is symmetric in its
  two arguments. The paper leaves heads open: here each head has its own w
  row; the SANet modules replace the 1/N by batch norm in the layer, not here.

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
  expected = (q.shape[2], q.shape[3])
  if w.shape != expected:
    raise ValueError(f"w must have shape (heads, dim) = {expected}, got {w.shape}")
  acc = _checks.compute_dtype(q, k, v, w)
  score_q = jnp.einsum("bqhd,hd->bqh", q, w, preferred_element_type=acc)
  v_mean = jnp.mean(v, axis=1, dtype=acc)
  out = score_q[..., None] * v_mean[:, None]
  if global_term:
    score_k = jnp.einsum("bkhd,hd->bkh", k, w, preferred_element_type=acc)
    shared = jnp.einsum("bkh,bkhe->bhe", score_k, v.astype(acc)) / k.shape[1]
    out = out + shared[:, None]
  return out.astype(v.dtype)
