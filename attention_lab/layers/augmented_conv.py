"""Attention-augmented convolution (AA paper Sec. 3.2, Eq. 5; appendix A.3).

AAConv(X) = Concat[Conv(X), Conv1×1(MHA(X))]: a k×k convolution with
Fout − dv filters beside multi-head self-attention with dv output channels,
dk = κ·Fout key depth and dv = υ·Fout, Nh heads (dk, dv rounded to multiples
of Nh, dk at least `min_key_dims_per_head`·Nh). One 1×1 convolution makes q,
k, v; q is scaled by dkh^−1/2 before the content and relative logits (the
operator's default scale). Positional information (AA Table 7): "relative"
(2D relative logits, tables (2L−1, dkh) ~ N(0, dkh^−1/2) shared by the heads),
"none", "sine" (2D sinusoids added to the attention input) or "coordconv"
(AA Sec. 4.5: the (x, y, r) coordinate channels of CoordConv concatenated to
it; x, y in [-1, 1], r = √(x² + y²) the distance from the centre). With `downsample`, attention
runs on a 3×3/2 average-pooled input and its output is bilinearly upsampled
back. Non-square, odd inputs work; relative tables need the attention grid
size at construction (`spatial_shape`, the input size of this layer).
Attention cost: O(Nh·(HW)²) memory, O((HW)²·(dk+dv)) time per image.
With `record_attention` on (`recording.attention_weights`), the layer sows the
softmax rows (B, Nh, h, w, h, w) on its attention grid (h, w).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab import ops
from attention_lab.layers import recording

POSITIONALS = ("relative", "none", "sine", "coordconv")
COORD_CHANNELS = 3  # CoordConv's (x, y, r), as AA Sec. 4.5 concatenates them


def coordinate_channels(batch: int, height: int, width: int, dtype) -> jax.Array:
  """(B, H, W, 3) CoordConv channels (Liu et al. 2018, with r): row coordinate y and column
  coordinate x, each linear in [-1, 1], and r = √(x² + y²), the distance from the centre."""
  ys, xs = jnp.meshgrid(jnp.linspace(-1, 1, height), jnp.linspace(-1, 1, width), indexing="ij")
  coords = jnp.stack([ys, xs, jnp.sqrt(ys ** 2 + xs ** 2)], -1)
  return jnp.broadcast_to(coords, (batch, height, width, COORD_CHANNELS)).astype(dtype)


def _round_to(value: float, multiple: int) -> int:
  return max(multiple, int(round(value / multiple)) * multiple)


def _sine_encoding(height: int, width: int, channels: int) -> np.ndarray:
  """2D sinusoids (Image Transformer): half the channels encode rows, half columns."""
  quarter = max(1, channels // 4)
  freqs = 1.0 / (10_000 ** (np.arange(quarter) / quarter))
  rows = np.arange(height)[:, None] * freqs
  cols = np.arange(width)[:, None] * freqs
  enc = np.zeros((height, width, channels), np.float32)
  row_part = np.concatenate([np.sin(rows), np.cos(rows)], -1)[:, None, :]
  col_part = np.concatenate([np.sin(cols), np.cos(cols)], -1)[None, :, :]
  half = min(channels // 2, 2 * quarter)
  enc[..., :half] = np.broadcast_to(row_part[..., :half], (height, width, half))
  enc[..., half:2 * half] = np.broadcast_to(col_part[..., :half], (height, width, half))
  return enc


class AugmentedConv(nnx.Module):
  """Args: cin, cout (Fout), kernel, stride; kappa κ, upsilon υ, heads Nh; positional;
  downsample; spatial_shape (H, W) of the input; min_key_dims_per_head;
  query_chunk_size of the relative attention ("auto": query blocks picked from the
  sizes, see `ops.relative_attention_2d`; None: all queries at once; an int); dtype."""

  def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, *,
               kappa: float = 0.2, upsilon: float = 0.1, heads: int = 8,
               min_key_dims_per_head: int = 0, positional: str = "relative",
               downsample: bool = False, spatial_shape: tuple[int, int] | None = None,
               query_chunk_size: int | str | None = "auto", dtype=None, rngs: nnx.Rngs):
    if positional not in POSITIONALS:
      raise ValueError(f"positional must be one of {POSITIONALS}, got {positional!r}")
    dk = max(_round_to(kappa * cout, heads), min_key_dims_per_head * heads)
    dv = _round_to(upsilon * cout, heads)
    if dv > cout:
      raise ValueError(f"upsilon·cout ({dv}) must not exceed cout ({cout})")
    self.dk, self.dv, self.heads, self.stride = dk, dv, heads, stride
    self.positional, self.downsample = positional, downsample
    self.record_attention = False  # see `recording`
    if isinstance(query_chunk_size, str) and query_chunk_size != "auto":
      raise ValueError(
          f"query_chunk_size must be 'auto', None or a positive int, got {query_chunk_size!r}")
    self.query_chunk_size = query_chunk_size
    self.conv = (nnx.Conv(cin, cout - dv, (kernel, kernel), strides=stride, use_bias=False,
                          dtype=dtype, rngs=rngs) if cout > dv else None)
    extra = COORD_CHANNELS if positional == "coordconv" else 0
    self.qkv = nnx.Conv(cin + extra, 2 * dk + dv, (1, 1), strides=stride, use_bias=False,
                        dtype=dtype, rngs=rngs)
    self.attn_out = nnx.Conv(dv, dv, (1, 1), use_bias=False, dtype=dtype, rngs=rngs)
    if positional == "relative":
      if spatial_shape is None:
        raise ValueError("spatial_shape (H, W) of the input is required for relative logits")
      h, w = (-(-s // stride) for s in spatial_shape)
      if downsample:
        h, w = -(-h // 2), -(-w // 2)
      init = nnx.initializers.normal((dk // heads) ** -0.5)
      self.rel_h = nnx.Param(init(rngs.params(), (2 * h - 1, dk // heads)))
      self.rel_w = nnx.Param(init(rngs.params(), (2 * w - 1, dk // heads)))

  def attention_input(self, x):
    """The input of the q/k/v projection: x with the absolute positional encoding, if any."""
    b, h, w, c = x.shape
    if self.positional == "sine":
      return x + jnp.asarray(_sine_encoding(h, w, c), x.dtype)
    if self.positional == "coordconv":
      return jnp.concatenate([x, coordinate_channels(b, h, w, x.dtype)], -1)
    return x

  def _weights(self, q, k):
    """Float32 softmax rows (B, Nh, h, w, h, w) of q, k (B, h, w, Nh, dkh) (AA Eq. 1-4)."""
    q, k = q.astype(jnp.float32), k.astype(jnp.float32)
    b, gh, gw, heads, _ = q.shape
    flat = lambda t: t.reshape(b, gh * gw, heads, -1)
    e = jnp.einsum("bqhd,bkhd->bhqk", flat(q), flat(k))
    if self.positional == "relative":
      lh, lw = ops.relative_logits_2d(q, self.rel_h[...], self.rel_w[...])
      e = e + (lh[..., :, None] + lw[..., None, :]).reshape(e.shape)
    return jax.nn.softmax(q.shape[-1] ** -0.5 * e, axis=-1).reshape(b, heads, gh, gw, gh, gw)

  def _attend(self, x):
    b = x.shape[0]
    qkv = self.qkv(self.attention_input(x))
    if self.downsample:
      qkv = nnx.avg_pool(qkv, (3, 3), (2, 2), "SAME")
    gh, gw = qkv.shape[1:3]
    split = lambda t: t.reshape(b, gh, gw, self.heads, t.shape[-1] // self.heads)
    q, k, v = (split(t) for t in jnp.split(qkv, [self.dk, 2 * self.dk], axis=-1))
    if self.positional == "relative":
      out = ops.relative_attention_2d(q, k, v, self.rel_h[...].astype(q.dtype),
                                      self.rel_w[...].astype(q.dtype),
                                      query_chunk_size=self.query_chunk_size)
    else:
      flat = lambda t: t.reshape(b, gh * gw, self.heads, -1)
      chunk = None if self.query_chunk_size == "auto" else self.query_chunk_size
      out = ops.dot_product_attention(flat(q), flat(k), flat(v), query_chunk_size=chunk)
    recording.sow_if_recording(self, recording.WEIGHTS, lambda: self._weights(q, k))
    return self.attn_out(out.reshape(b, gh, gw, self.dv))

  def __call__(self, x):
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    attn = self._attend(x)
    out_hw = (-(-x.shape[1] // self.stride), -(-x.shape[2] // self.stride))
    if attn.shape[1:3] != out_hw:
      attn = jax.image.resize(attn, (attn.shape[0], *out_hw, attn.shape[-1]), "bilinear")
    if self.conv is None:
      return attn
    return jnp.concatenate([self.conv(x), attn], axis=-1)
