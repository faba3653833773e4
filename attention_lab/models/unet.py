"""CARE-style 2D/3D U-Net for image restoration, with attention (SAO paper Sec. 4.5, Table 7).

The baseline is the U-Net of CARE (Weigert et al. 2018; csbdeep unet_block +
custom_unet), which the SAO paper's "general U-Net" with "depth 3 ... two
encoder blocks and two decoder blocks" matches: `depth` counts resolution
levels, so there are depth − 1 poolings (CARE's n_depth = 2 for depth 3).
- Encoder level n (n < depth − 1): two k×k(×k) convs with bias + ReLU to
  f·2ⁿ maps, kept for the skip, then 2×(2×)2 max pooling.
- Bottom block: convs to f·2^(depth−1) and f·2^(depth−2) maps (CARE's halving
  before the first upsampling; f at depth 1).
- Decoder level n: nearest-neighbour 2× upsampling, concatenation with the
  skip, convs to f·2ⁿ and f·2^max(0, n−1) maps.
- Output: a linear 1×1 conv with bias to `num_classes` channels, plus the
  input when `residual` (CARE's default: residual learning whenever the input
  and output channel counts agree).
No batch norm, no dropout (CARE defaults); kernel 3 in 2D and 3D (Ronneberger
et al., Çiçek et al.; CARE defaults to 5 in 2D).

Attention (SAO paper Sec. 4.5: "We add attention operators and our SAOs in
bottom and decoder blocks. We apply linear transformations on Q, K and V"):
the bottom block and every decoder block end with y + GlobalAttention(y)
over all positions of the grid (any spatial rank), with q, k, v linear maps
without bias (`project="qkv"`) and no output map, `heads` heads, each
operator's own normalisation (softmax; 1/N for SAO). Choices the paper leaves
open: the skip around the attention (as in SANet's attention modules), its
place after the block's convolutions, the heads (4, as in SANet) and the
coefficients (`attention_kwargs` passes e.g. coefficients="batch_norm").
Regular attention at the top decoder level costs O(N²) time for N voxels
(65,536 for the paper's 16×64×64 patches; pass
`attention_kwargs={"query_chunk_size": 1024}` to keep its memory O(N·1024));
SAO costs O(N).

Spatial sizes must be divisible by 2^(depth−1) (ValueError otherwise): pad
or crop the input, as CARE does, rather than letting the skips misalign.
SAO Table 7's projection model (a 3D→2D encoder in front of a 2D U-Net) is
not built here; `unet2d` is its 2D U-Net.
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.models.registry import register

ATTENTIONS = ("none", "softmax", "siamese")


class ConvStack(nnx.Module):
  """k^d convolutions with bias, each followed by ReLU, to the widths in `features`."""

  def __init__(self, cin: int, features: tuple[int, ...], *, kernel: tuple[int, ...], dtype,
               rngs: nnx.Rngs):
    convs = []
    for cout in features:
      convs.append(nnx.Conv(cin, cout, kernel, dtype=dtype, rngs=rngs))
      cin = cout
    self.convs = nnx.List(convs)

  def __call__(self, x):
    for conv in self.convs:
      x = nnx.relu(conv(x))
    return x


class UNetBlock(nnx.Module):
  """A ConvStack, then y + Attention(y) when `attention` is not "none"."""

  def __init__(self, cin: int, features: tuple[int, ...], *, kernel, attention: str, heads: int,
               attention_kwargs: dict | None, dtype, rngs: nnx.Rngs):
    self.convs = ConvStack(cin, features, kernel=kernel, dtype=dtype, rngs=rngs)
    self.attend = (None if attention == "none" else GlobalAttention(
        features[-1], attention, num_heads=heads, project="qkv", use_bias=False, dtype=dtype,
        rngs=rngs, **(attention_kwargs or {})))

  def __call__(self, x):
    y = self.convs(x)
    return y + self.attend(y).astype(y.dtype) if self.attend else y


class UNet(nnx.Module):
  """U-Net over (B, *S, C) with len(S) = `spatial_rank` (see the module docstring).

  Args:
    num_classes: output channels.
    spatial_rank: 2 or 3.
    attention: "none", "softmax" (U-Net+Attn) or "siamese" (U-Net+SAO).
    features: f, the width of the first level (CARE: 32).
    depth: resolution levels (3: two encoder blocks, the bottom, two decoder blocks).
    in_channels: input channels.
    heads: attention heads; must divide f (the widths of the attended blocks are f·2^k).
    kernel_size: convolution side.
    residual: add the input to the output; None: when num_classes == in_channels.
    attention_kwargs: extra GlobalAttention arguments (coefficients, siamese_w, ...).
    dtype: compute dtype (the output is float32).
  """

  def __init__(self, *, num_classes: int, spatial_rank: int, attention: str = "none",
               features: int = 32, depth: int = 3, in_channels: int = 1, heads: int = 4,
               kernel_size: int = 3, residual: bool | None = None,
               attention_kwargs: dict | None = None, dtype=None, rngs: nnx.Rngs):
    if spatial_rank not in (2, 3):
      raise ValueError(f"spatial_rank must be 2 or 3, got {spatial_rank}")
    if attention not in ATTENTIONS:
      raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    if depth < 1:
      raise ValueError(f"depth must be at least 1, got {depth}")
    if features < 1:
      raise ValueError(f"features must be a positive int, got {features}")
    if kernel_size < 1 or kernel_size % 2 == 0:
      raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size}")
    if residual is None:
      residual = num_classes == in_channels
    elif residual and num_classes != in_channels:
      raise ValueError(f"residual=True needs num_classes == in_channels ({in_channels}), "
                       f"got {num_classes}")
    self.spatial_rank, self.depth, self.in_channels = spatial_rank, depth, in_channels
    self.residual = residual
    kernel = (kernel_size,) * spatial_rank
    block = lambda cin, widths, attend: UNetBlock(
        cin, widths, kernel=kernel, attention=attend, heads=heads,
        attention_kwargs=attention_kwargs, dtype=dtype, rngs=rngs)
    width = lambda n: features * 2 ** max(0, n)
    encoders, cin = [], in_channels
    for n in range(depth - 1):
      encoders.append(ConvStack(cin, (width(n),) * 2, kernel=kernel, dtype=dtype, rngs=rngs))
      cin = width(n)
    self.encoders = nnx.List(encoders)
    self.bottom = block(cin, (width(depth - 1), width(depth - 2)), attention)
    cin = width(depth - 2)
    decoders = []
    for n in reversed(range(depth - 1)):
      decoders.append(block(cin + width(n), (width(n), width(n - 1)), attention))
      cin = width(n - 1)
    self.decoders = nnx.List(decoders)
    self.out = nnx.Conv(cin, num_classes, (1,) * spatial_rank, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    rank, multiple = self.spatial_rank, 2 ** (self.depth - 1)
    if x.ndim != rank + 2 or x.shape[-1] != self.in_channels:
      raise ValueError(f"x must have shape (batch, {rank} spatial dims, {self.in_channels}), "
                       f"got {x.shape}")
    if any(s % multiple for s in x.shape[1:-1]):
      raise ValueError(f"spatial sizes of x must be divisible by 2^(depth-1) = {multiple}, got "
                       f"{x.shape[1:-1]}; pad or crop the input")
    window = (2,) * rank
    y, skips = x, []
    for encoder in self.encoders:
      y = encoder(y)
      skips.append(y)
      y = nnx.max_pool(y, window, window)
    y = self.bottom(y)
    for decoder, skip in zip(self.decoders, reversed(skips)):
      for axis in range(1, rank + 1):
        y = jnp.repeat(y, 2, axis=axis)
      y = decoder(jnp.concatenate([y, skip.astype(y.dtype)], axis=-1))
    y = self.out(y).astype(jnp.float32)
    return y + x.astype(jnp.float32) if self.residual else y


@register("unet2d")
def unet2d(*, num_classes, rngs, **overrides):
  return UNet(num_classes=num_classes, spatial_rank=2, rngs=rngs, **overrides)


@register("unet3d")
def unet3d(*, num_classes, rngs, **overrides):
  return UNet(num_classes=num_classes, spatial_rank=3, rngs=rngs, **overrides)
