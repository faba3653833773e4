"""2D relative self-attention (Attention Augmented Convolutional Networks).

Grid layout: q, k (B, X, Y, H, D), v (B, X, Y, H, Dv), X = height (rows),
Y = width (columns). Relative tables rel_h (2X−1, D), rel_w (2Y−1, D) hold one
embedding per offset x'−x (resp. y'−y), index offset + X − 1.
"""

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


def _row_block_logits(q_rows, rel_h_window, rel_w, num_rows: int, acc):
  """Relative logits of a block of cx query rows against every key position.

  q_rows (B, cx, Y, H, D); rel_h_window (cx+X−1, D) is the slice of the height
  table that these rows can reach. Returns logits_h (B, H, cx, Y, X) and
  logits_w (B, H, cx, Y, Y). Time O(cx·Y·(X+Y)·D), memory O(cx·Y·(X+Y)).
  """
  num_cols = q_rows.shape[2]
  lw = jnp.einsum("bxyhd,md->bhxym", q_rows, rel_w, preferred_element_type=acc)
  lw = rel_to_abs(lw, num_cols)
  lh = jnp.einsum("bxyhd,md->bhyxm", q_rows, rel_h_window, preferred_element_type=acc)
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
  return _row_block_logits(q, rel_h, rel_w, q.shape[1], acc)


def relative_attention_2d(q, k, v, rel_h, rel_w, *, scale=None, query_chunk_size=None):
  """2D self-attention with relative position logits (AA paper Eq. 3-4).

  out[x,y] = Σ_{x',y'} softmax(scale·q_xy·(k_x'y' + r^H_{x'−x} + r^W_{y'−y}))
  v_x'y'. The AA paper scales q by dkh^−1/2 before both the content and the
  relative logits; `scale` defaults to that, 1/sqrt(D). The relative terms
  enter by broadcasting (B, H, X, Y, X, 1) and (B, H, X, Y, 1, Y) onto the
  content logits; they are never tiled to (XY, XY).

  Complexity: time O(B·H·XY·(XY·(D+Dv) + (X+Y)·D)). Memory O(B·H·(XY)²)
  unchunked. With `query_chunk_size=c`, queries are processed in blocks of
  whole grid rows, r = max(1, c // Y) rows (r·Y ≤ c queries when Y ≤ c), each
  block's logits recomputed in the backward pass: memory O(B·H·r·Y·XY), linear
  in the grid size for fixed c. X need not be divisible by r.

  Args:
    q, k: (B, X, Y, H, D) queries and keys.
    v: (B, X, Y, H, Dv) values.
    rel_h: (2X−1, D) height table, shared by heads.
    rel_w: (2Y−1, D) width table, shared by heads.
    scale: logit scale, default D^−1/2.
    query_chunk_size: optional approximate number of queries per block.

  Returns:
    (B, X, Y, H, Dv) in v's dtype; logits and softmax in at least float32.
  """
  _check_relative(q, rel_h, rel_w)
  for name, t in (("k", k), ("v", v)):
    _checks.check_rank(name, t, 5, "(batch, height, width, heads, dim)")
    if t.shape[:4] != q.shape[:4]:
      raise ValueError(
          f"{name} must share (batch, height, width, heads) = {q.shape[:4]} with q,"
          f" got {t.shape}")
  if k.shape[-1] != q.shape[-1]:
    raise ValueError(f"k must have the dim of q ({q.shape[-1]}), got {k.shape}")
  _checks.check_chunk(query_chunk_size)
  scale = default_scale(q, scale)
  b, x, y, h, _ = q.shape
  acc = _checks.compute_dtype(q, k, v, rel_h, rel_w)
  k_flat = k.reshape(b, x * y, h, -1)
  v_flat = v.reshape(b, x * y, h, -1)

  def attend(q_rows, rel_h_window):
    rows = q_rows.shape[1]
    content = jnp.einsum("bxyhd,bkhd->bhxyk", q_rows, k_flat, preferred_element_type=acc)
    lh, lw = _row_block_logits(q_rows, rel_h_window, rel_w, x, acc)
    logits = content.reshape(b, h, rows, y, x, y) + lh[..., None] + lw[..., None, :]
    weights = jax.nn.softmax(scale * logits.reshape(b, h, rows, y, x * y), axis=-1)
    out = jnp.einsum("bhxyk,bkhe->bxyhe", weights.astype(v.dtype), v_flat,
                     preferred_element_type=acc)
    return out.astype(v.dtype)

  rows = x if query_chunk_size is None else max(1, min(x, query_chunk_size // y))
  if rows == x:
    return attend(q, rel_h)
  num = -(-x // rows)
  pad = num * rows - x
  q_blocks = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0)))
  q_blocks = jnp.moveaxis(q_blocks.reshape(b, num, rows, *q.shape[2:]), 1, 0)
  # Left-pad the height table so the last (padded) block's window stays in range:
  # rows x0..x0+r−1 reach table indices X−x0−r .. 2X−2−x0 (r+X−1 entries).
  rel_h_padded = jnp.pad(rel_h, ((pad, 0), (0, 0)))
  starts = x - rows + pad - rows * jnp.arange(num)

  @jax.checkpoint
  def block(args):
    q_rows, start = args
    window = lax.dynamic_slice_in_dim(rel_h_padded, start, rows + x - 1, axis=0)
    return attend(q_rows, window)

  out = lax.map(block, (q_blocks, starts))  # (num, B, r, Y, H, Dv)
  out = jnp.moveaxis(out, 0, 1).reshape(b, num * rows, *out.shape[3:])
  return out[:, :x]
