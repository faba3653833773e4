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
- Output: a linear 1×1 conv with bias to `num_classes` channels (default: the
  input's), plus the
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

SAO Table 7's projection model (Flywing, 3D stack → 2D image) is
`unet_projection`: the SAO appendix says only "a decoder-encoder
architecture that reduces 3D images into 2D tensors and a 2D U-Net", so
the 3D→2D part follows CARE's projection network (csbdeep
`ProjectionCARE._build`, its defaults): `proj_depth` = 4 levels of one 3×3×3
conv (8 maps, ReLU) + 1×2×2 max pooling (XY only), one conv in the middle,
4 levels of 1×2×2 nearest upsampling + one conv, no skips, a linear 3×3×3
conv to one map, a softmax over Z of it, and the input stack summed over Z
with those weights (a learned surface projection). The 2D U-Net is `UNet`
above (residual, attention in the bottom and decoder blocks, depth 3 as the
paper's denoising U-Net; CARE's own projection example uses a 2D CARE U-Net
too). Y and X must be divisible by 2^proj_depth and by 2^(depth−1).
"""

import jax
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
    num_classes: output channels; None: `in_channels`.
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

  def __init__(self, *, num_classes: int | None = None, spatial_rank: int, attention: str = "none",
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
    if num_classes is None:
      num_classes = in_channels
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


class ProjectionUNet(nnx.Module):
  """(B, Z, Y, X, C) stack → (B, Y, X, num_classes): CARE surface projection, then a 2D U-Net.

  Args:
    num_classes: output channels; None: `in_channels`.
    in_channels: input channels (C).
    proj_depth, proj_features, proj_kernel: the projection network's poolings,
      conv width and kernel side (CARE defaults 4, 8, 3).
    **unet_kwargs: the 2D U-Net's arguments (attention, features, depth, ...).
  Cost: the projection network is O(Z·Y·X·proj_features·27) per layer; the
  softmax over Z is O(Z·Y·X); the 2D U-Net sees one Y×X image.
  """

  def __init__(self, *, num_classes: int | None = None, in_channels: int = 1, proj_depth: int = 4,
               proj_features: int = 8, proj_kernel: int = 3, dtype=None, rngs: nnx.Rngs,
               **unet_kwargs):
    if proj_depth < 0:
      raise ValueError(f"proj_depth must be >= 0, got {proj_depth}")
    kernel = (proj_kernel,) * 3
    conv = lambda cin, cout: nnx.Conv(cin, cout, kernel, dtype=dtype, rngs=rngs)
    self.proj_depth, self.in_channels = proj_depth, in_channels
    self.down = nnx.List([conv(in_channels if i == 0 else proj_features, proj_features)
                          for i in range(proj_depth)])
    self.middle = conv(in_channels if proj_depth == 0 else proj_features, proj_features)
    self.up = nnx.List([conv(proj_features, proj_features) for _ in range(proj_depth)])
    self.weights = conv(proj_features, 1)
    self.unet = UNet(num_classes=num_classes, spatial_rank=2, in_channels=in_channels,
                     dtype=dtype, rngs=rngs, **unet_kwargs)

  def project(self, x):
    """(B, Z, Y, X, C) → (B, Y, X, C): Σ_z softmax_z(f(x))·x (CARE's learned projection)."""
    if x.ndim != 5 or x.shape[-1] != self.in_channels:
      raise ValueError(f"x must have shape (batch, Z, Y, X, {self.in_channels}), got {x.shape}")
    multiple = 2**self.proj_depth
    if x.shape[2] % multiple or x.shape[3] % multiple:
      raise ValueError(f"Y and X of x must be divisible by 2^proj_depth = {multiple}, got "
                       f"{x.shape[2:4]}; pad or crop the input")
    y = x
    for conv in self.down:
      y = nnx.max_pool(nnx.relu(conv(y)), (1, 2, 2), (1, 2, 2))
    y = nnx.relu(self.middle(y))
    for conv in self.up:
      y = nnx.relu(conv(jnp.repeat(jnp.repeat(y, 2, axis=2), 2, axis=3)))
    weights = jax.nn.softmax(self.weights(y).astype(jnp.float32), axis=1)  # over Z
    return jnp.sum(weights * x.astype(jnp.float32), axis=1)

  def __call__(self, x):
    return self.unet(self.project(x))


@register("unet_projection")
def unet_projection(*, rngs, **overrides):
  return ProjectionUNet(rngs=rngs, **overrides)


@register("unet2d")
def unet2d(*, rngs, **overrides):
  return UNet(spatial_rank=2, rngs=rngs, **overrides)


@register("unet3d")
def unet3d(*, rngs, **overrides):
  return UNet(spatial_rank=3, rngs=rngs, **overrides)
