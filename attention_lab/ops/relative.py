"""2D relative self-attention (Attention Augmented Convolutional Networks).

Grid layout: q, k (B, X, Y, H, D), v (B, X, Y, H, Dv), X = height (rows),
Y = width (columns). Relative tables rel_h (2X−1, D), rel_w (2Y−1, D) hold one
embedding per offset x'−x (resp. y'−y), index offset + X − 1.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from attention_lab.ops import _checks
from attention_lab.ops.attention import default_scale


def rel_to_abs(rel, num_keys: int):
  """Converts relative-indexed logits to absolute key positions (AA appendix A.3).

  rel (..., Lq, Lq+Lk−1) → (..., Lq, Lk) with
  out[..., a, j] = rel[..., a, j − a + Lq − 1]: the "skewing" trick of pad,
  flatten, pad, reshape and slice (no gather). With Lq = Lk = L this is the
  paper's (L, 2L−1) → (L, L) conversion; Lq < Lk serves a block of query rows.
  """
  *lead, lq, m = rel.shape
  if m != lq + num_keys - 1:
    raise ValueError(
        f"rel must have last dim Lq + num_keys - 1 = {lq + num_keys - 1}, got {m}")
  nolead = [(0, 0)] * len(lead)
  x = jnp.pad(rel, nolead + [(0, 0), (0, 1)])
  x = x.reshape(*lead, lq * (m + 1))
  x = jnp.pad(x, nolead + [(0, num_keys - 1)])
  x = x.reshape(*lead, lq + 1, m)
  return x[..., :lq, lq - 1:lq - 1 + num_keys]


def _row_block_logits(q_rows, rel_h, rel_w, num_rows: int, acc, start=None):
  """Relative logits of a block of cx query rows against every key position.

  q_rows (B, H, cx, Y, D) (heads in front). rel_h is the whole height table
  (start None, cx = X) or the (left-padded) table of which these rows reach the
  cx+X−1 entries from `start` on: the einsum runs against the whole table and
  its result is sliced, so a block costs the same multiply-adds per query as
  the unchunked form. Returns logits_h (B, H, cx, Y, X) and logits_w
  (B, H, cx, Y, Y). Time O(cx·Y·(X+Y)·D), memory O(cx·Y·(X+Y)).
  """
  num_cols = q_rows.shape[3]
  lw = jnp.einsum("bhxyd,md->bhxym", q_rows, rel_w, preferred_element_type=acc)
  lw = rel_to_abs(lw, num_cols)
  lh = jnp.einsum("bhxyd,md->bhyxm", q_rows, rel_h, preferred_element_type=acc)
  if start is not None:
    lh = lax.dynamic_slice_in_dim(lh, start, q_rows.shape[2] + num_rows - 1, axis=-1)
  lh = rel_to_abs(lh, num_rows)
  return jnp.swapaxes(lh, 2, 3), lw


def _check_relative(q, rel_h, rel_w):
  _checks.check_rank("q", q, 5, "(batch, height, width, heads, dim)")
  _, x, y, _, d = q.shape
  for name, table, length in (("rel_h", rel_h, 2 * x - 1), ("rel_w", rel_w, 2 * y - 1)):
    if table.shape != (length, d):
      raise ValueError(
          f"{name} must have shape (2*{'height' if name == 'rel_h' else 'width'}-1, dim)"
          f" = {(length, d)}, got {table.shape}")


def relative_logits_2d(q, rel_h, rel_w):
  """Relative position logits of AA paper Eq. 3-4 (appendix A.3).

  logits_h[b,h,x,y,x'] = q[b,x,y,h]·rel_h[x'−x+X−1] and
  logits_w[b,h,x,y,y'] = q[b,x,y,h]·rel_w[y'−y+Y−1], computed as an einsum
  against the (2L−1) tables followed by `rel_to_abs`; the naive (HW, HW, D)
  tensor of per-pair embeddings is never formed. Time O(B·H·XY·(X+Y)·D),
  memory O(B·H·XY·(X+Y)) (the outputs). Grids need not be square.

  Args:
    q: (B, X, Y, H, D) queries (unscaled).
    rel_h: (2X−1, D) height table.
    rel_w: (2Y−1, D) width table.

  Returns:
    (logits_h (B, H, X, Y, X), logits_w (B, H, X, Y, Y)) in at least float32.
  """
  _check_relative(q, rel_h, rel_w)
  acc = _checks.compute_dtype(q, rel_h, rel_w)
  return _row_block_logits(jnp.moveaxis(q, 3, 1), rel_h, rel_w, q.shape[1], acc)


# Query blocks of the default ("auto") chunking hold at most this many bytes of logits
# (B·H·rows·Y·XY elements), so that a block's logits, weights and their gradients stay in
# a CPU's last-level cache (block sizes compared: experiments/results/relative_timm.md).
AUTO_BLOCK_BYTES = 4 * 2**20


def query_block_rows(shape, query_chunk_size, itemsize: int = 4) -> int:
  """Grid rows per query block of `relative_attention_2d` for q of `shape` (B, X, Y, H, D).

  None: all X rows (one block). An int c: max(1, c // Y) rows (at most X), so a
  block holds ≤ c queries when Y ≤ c. "auto": the largest divisor of X (no padded
  rows) whose block logits take ≤ AUTO_BLOCK_BYTES at `itemsize` bytes each: all
  X rows on small grids, at least one row.
  """
  b, x, y, h, _ = shape
  if query_chunk_size is None:
    return x
  if isinstance(query_chunk_size, str):
    fit = max(1, AUTO_BLOCK_BYTES // (b * h * y * x * y * itemsize))
    return max(r for r in range(1, min(fit, x) + 1) if x % r == 0)
  return max(1, min(x, query_chunk_size // y))


def _block_logits(q, k, lh, lw, scale, acc):
  """scale·(q·k + r^H + r^W): q (B, H, M, D), k (B, H, N, D), lh (B, H, M, X), lw (B, H, M, Y)."""
  b, h, m, _ = q.shape
  x, y = lh.shape[-1], lw.shape[-1]
  s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=acc)
  s = s.reshape(b, h, m, x, y) + lh[..., :, None] + lw[..., None, :]
  return scale * s.reshape(b, h, m, x * y)


def _attend_fwd(q, k, v, lh, lw, scale, keep_weights):
  acc = _checks.compute_dtype(q, k, v, lh, lw)
  s = _block_logits(q, k, lh, lw, scale, acc)
  peak = jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s - peak)
  total = jnp.sum(e, axis=-1, keepdims=True)
  if keep_weights:  # one block: keep the softmax for the backward pass (no recompute)
    p = e / total
    out = jnp.einsum("bhqk,bhke->bhqe", p.astype(v.dtype), v, preferred_element_type=acc)
    aux = p
  else:  # normalise the (M, Dv) output, not the (M, N) weights; keep only log-sum-exp
    out = jnp.einsum("bhqk,bhke->bhqe", e.astype(v.dtype), v, preferred_element_type=acc)
    out = out / total
    aux = peak + jnp.log(total)
  return out.astype(v.dtype), (q, k, v, lh, lw, out, aux)


def _attend_bwd(scale, keep_weights, res, d_out):
  q, k, v, lh, lw, out, aux = res
  acc = out.dtype
  p = aux if keep_weights else jnp.exp(_block_logits(q, k, lh, lw, scale, acc) - aux)
  # Softmax backward with Σ_k p·dp = d_out·out (one (M, Dv) product, no (M, N) reduction).
  delta = jnp.sum(d_out.astype(acc) * out, axis=-1, keepdims=True)
  dp = jnp.einsum("bhqe,bhke->bhqk", d_out, v, preferred_element_type=acc)
  dv = jnp.einsum("bhqk,bhqe->bhke", p.astype(v.dtype), d_out.astype(v.dtype),
                  preferred_element_type=acc)
  ds = p * (dp - delta) * scale  # gradient of the unscaled logits
  dq = jnp.einsum("bhqk,bhkd->bhqd", ds.astype(k.dtype), k, preferred_element_type=acc)
  dk = jnp.einsum("bhqk,bhqd->bhkd", ds.astype(q.dtype), q, preferred_element_type=acc)
  ds = ds.reshape(*ds.shape[:3], lh.shape[-1], lw.shape[-1])
  return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype),
          jnp.sum(ds, axis=-1).astype(lh.dtype), jnp.sum(ds, axis=-2).astype(lw.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attend(q, k, v, lh, lw, scale, keep_weights):
  """Softmax attention of one query block with the relative logits added by broadcasting.

  q (B, H, M, D), k (B, H, N, D), v (B, H, N, Dv), lh (B, H, M, X), lw (B, H, M, Y),
  N = X·Y → (B, H, M, Dv). Written as a custom VJP (the FlashAttention backward:
  dS = P ⊙ (dP − rowsum(dO ⊙ O))) so that every (M, N) array is formed once per pass:
  the logits gradient is computed once, not once per consumer. `keep_weights` keeps
  P for the backward pass; otherwise only the (M,) log-sum-exp is kept and P is
  recomputed, so training memory is O(M·N) per block, not per call.
  """
  return _attend_fwd(q, k, v, lh, lw, scale, False)[0]


_attend.defvjp(_attend_fwd, _attend_bwd)


def _check_attention(q, k, v, rel_h, rel_w, query_chunk_size):
  """ValueError naming the argument when a shape or `query_chunk_size` is not allowed."""
  _check_relative(q, rel_h, rel_w)
  for name, t in (("k", k), ("v", v)):
    _checks.check_rank(name, t, 5, "(batch, height, width, heads, dim)")
    if t.shape[:4] != q.shape[:4]:
      raise ValueError(
          f"{name} must share (batch, height, width, heads) = {q.shape[:4]} with q,"
          f" got {t.shape}")
  if k.shape[-1] != q.shape[-1]:
    raise ValueError(f"k must have the dim of q ({q.shape[-1]}), got {k.shape}")
  if isinstance(query_chunk_size, str):
    if query_chunk_size != "auto":
      raise ValueError(
          f"query_chunk_size must be 'auto', None or a positive int, got {query_chunk_size!r}")
  else:
    _checks.check_chunk(query_chunk_size)


def _map_row_blocks(attend, q_heads, rel_h, rows: int):
  """`attend(q_rows, height table, keep_weights, start)` on blocks of `rows` query rows,
  one block at a time (lax.map), each keeping only its log-sum-exp for the backward pass.

  q_heads (B, H, X, Y, D) is zero-padded to whole blocks, and the height table left-padded
  by as many rows so that the last block's window stays in range: rows x0..x0+r−1 reach
  table indices X−x0−r .. 2X−2−x0 (r+X−1 entries). Returns (B, H, X, Y, Dv).
  """
  b, h, x, y, d = q_heads.shape
  num = -(-x // rows)
  pad = num * rows - x
  q_blocks = jnp.pad(q_heads, ((0, 0), (0, 0), (0, pad), (0, 0), (0, 0)))
  q_blocks = jnp.moveaxis(q_blocks.reshape(b, h, num, rows, y, d), 2, 0)
  rel_h_padded = jnp.pad(rel_h, ((pad, 0), (0, 0)))
  starts = x - rows + pad - rows * jnp.arange(num)

  def block(args):
    q_rows, start = args
    return attend(q_rows, rel_h_padded, False, start)

  out = lax.map(block, (q_blocks, starts))  # (num, B, H, r·Y, Dv)
  return jnp.moveaxis(out, 0, 2).reshape(b, h, num * rows, y, -1)[:, :, :x]


def relative_attention_2d(q, k, v, rel_h, rel_w, *, scale=None, query_chunk_size="auto"):
  """2D self-attention with relative position logits (AA paper Eq. 3-4).

  out[x,y] = Σ_{x',y'} softmax(scale·q_xy·(k_x'y' + r^H_{x'−x} + r^W_{y'−y}))
  v_x'y'. The AA paper scales q by dkh^−1/2 before both the content and the
  relative logits; `scale` defaults to that, 1/sqrt(D). The relative terms
  (`relative_logits_2d` per block of query rows: einsum + `rel_to_abs`) enter by
  broadcasting (…, X, 1) and (…, 1, Y) onto the content logits; they are never
  tiled to (XY, XY).

  Queries are processed in blocks of whole grid rows (`query_block_rows`), each
  block by a custom-VJP softmax attention with heads in front, (B, H, M, D):
  plain batched GEMMs, the logits gradient formed once. A single block keeps its
  softmax weights for the backward pass; with several blocks (lax.map) only the
  log-sum-exp per query is kept and the block's logits are recomputed in the
  backward pass.

  Complexity: time O(B·H·XY·(XY·(D+Dv) + (X+Y)·D)) (+1 logits GEMM in training
  when chunked). Memory O(B·H·(XY)²) unchunked; O(B·H·r·Y·XY) with r rows per
  block, i.e. linear in the grid size for a fixed block.

  Args:
    q, k: (B, X, Y, H, D) queries and keys.
    v: (B, X, Y, H, Dv) values.
    rel_h: (2X−1, D) height table, shared by heads.
    rel_w: (2Y−1, D) width table, shared by heads.
    scale: logit scale, default D^−1/2.
    query_chunk_size: "auto" (default: blocks of rows whose logits take at most
      AUTO_BLOCK_BYTES, all rows at once on small grids), an approximate number
      of queries per block (max(1, c // Y) rows; X need not be divisible), or
      None (all queries at once).

  Returns:
    (B, X, Y, H, Dv) in v's dtype; logits and softmax in at least float32.
  """
  _check_attention(q, k, v, rel_h, rel_w, query_chunk_size)
  scale = default_scale(q, scale)
  b, x, y, h, d = q.shape
  acc = _checks.compute_dtype(q, k, v, rel_h, rel_w)
  rows = query_block_rows(q.shape, query_chunk_size, jnp.dtype(acc).itemsize)
  # Heads in front once, O(XY·D) each: every einsum below is then a plain batched GEMM.
  q_heads = jnp.moveaxis(q, 3, 1)  # (B, H, X, Y, D)
  k_heads = jnp.moveaxis(k, 3, 1).reshape(b, h, x * y, d)
  v_heads = jnp.moveaxis(v, 3, 1).reshape(b, h, x * y, v.shape[-1])

  def attend(q_rows, table_h, keep_weights, start=None):  # (B, H, r, Y, D) → (B, H, r·Y, Dv)
    r = q_rows.shape[2]
    lh, lw = _row_block_logits(q_rows, table_h, rel_w, x, acc, start)
    return _attend(q_rows.reshape(b, h, r * y, d), k_heads, v_heads,
                   lh.reshape(b, h, r * y, x), lw.reshape(b, h, r * y, y), scale, keep_weights)

  if rows == x:
    out = attend(q_heads, rel_h, True)
  else:
    out = _map_row_blocks(attend, q_heads, rel_h, rows)
  return jnp.moveaxis(out.reshape(b, h, x, y, -1), 1, 3)
