"""MnasNet-A1 (Tan et al. 2019, Fig. 7a) and AA-MnasNet (AA paper Sec. 4.3, Table 4).

Layout (reference blocks_args of tensorflow/tpu mnasnet_models.py): stem
3×3/2 conv to 32; stages (repeats, kernel, stride, expansion, channels, SE) =
SepConv (1, 3, 1, 1, 16), MBConv6 (2, 3, 2, 6, 24), MBConv3+SE (3, 5, 2, 3, 40),
MBConv6 (4, 3, 2, 6, 80), MBConv6+SE (2, 3, 1, 6, 112), MBConv6+SE (3, 5, 2, 6, 160),
MBConv6 (1, 3, 1, 6, 320); 1×1 conv to 1280, average pool, dropout 0.2, FC.
MBConv: 1×1 expansion to e·c (+BN, ReLU; none when e = 1), k×k depthwise with
the stage stride (+BN, ReLU), SE on the expanded maps (hidden int(c/4), with
biases, sigmoid gate), linear 1×1 projection (+BN); identity skip when the
stride is 1 and c = d. `width` scales every channel count but the 1280 head,
rounded to multiples of 8 (never more than 10% down), as the reference's
round_filters does.

AA-MnasNet (AA paper Sec. 4.3): the expansion 1×1 convolution of the last 13
of the blocks (every block from the 40-channel stage on, the first one whose
output is 28×28 at 224²) is an AugmentedConv with κ = 2υ = 0.1, Nh = 4 and
relative positions; the head is unchanged. "We downsample only in the first
stage where Attention Augmentation is applied": the three blocks of the
40-channel stage attend on 3×3/2 average-pooled maps (AugmentedConv
`downsample`), so the first one attends at 28² (its expansion runs at 56²), the
other two at 14². Batch-norm and activation after the augmented expansion as
after the plain one.

Counts at 224², 1000 classes (width 1.0): all trainable parameters (biases,
BN γ/β and relative tables included; Table 4's convention) 3,887,038 and
4,063,662 against 3.89M and 4.06M; kernels alone are ~1% fewer. MAdd (convs
and dot products) 311.6m against 315m (0.63 GFlops); AA 392.1m against 350m:
the 13 augmented expansions add 22.1m of convolutions and 58.5m of attention
matmuls, while Table 4 adds 35m, less than the convolutions plus the
un-downsampled 14²/7² attention alone (22.1m + 19.8m), so its GFlops cannot
include all the attention matmuls. Choices not from the papers: batch-norm
momentum 0.9, ε 1e-5 (the repository's ConvBN; the reference: 0.99, 1e-3).
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import batch_norm
from attention_lab.layers.augmented_conv import AugmentedConv
from attention_lab.layers.conv import ConvBN
from attention_lab.layers.excite import SqueezeExcite
from attention_lab.models.registry import register

# (repeats, kernel, stride, expansion, output channels, squeeze-excite) per stage.
STAGES = ((1, 3, 1, 1, 16, False), (2, 3, 2, 6, 24, False), (3, 5, 2, 3, 40, True),
          (4, 3, 2, 6, 80, False), (2, 3, 1, 6, 112, True), (3, 5, 2, 6, 160, True),
          (1, 3, 1, 6, 320, False))
FIRST_AUGMENTED_STAGE = 2  # The 40-channel stage: 13 augmented blocks of 16, attention downsampled.
STEM, HEAD = 32, 1280


def round_filters(channels: int, width: float, divisor: int = 8) -> int:
  """channels·width to the nearest multiple of `divisor` (at least `divisor`), not >10% down."""
  scaled = channels * width
  rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
  return rounded + divisor if rounded < 0.9 * scaled else rounded


class MBConv(nnx.Module):
  """Mobile inverted bottleneck (see the module docstring); `augment` makes the expansion an
  AugmentedConv (κ = 2υ = 0.1, `heads`, relative logits on the `size`×`size` input)."""

  def __init__(self, cin: int, cout: int, kernel: int, stride: int, expansion: int, *,
               se: bool, augment: bool, downsample: bool, size: int, heads: int, dtype,
               rngs: nnx.Rngs):
    hidden = cin * expansion
    if expansion == 1:
      self.expand = self.expand_norm = None
    elif augment:
      self.expand = AugmentedConv(cin, hidden, 1, kappa=0.1, upsilon=0.05, heads=heads,
                                  downsample=downsample, spatial_shape=(size, size), dtype=dtype,
                                  rngs=rngs)
      self.expand_norm = batch_norm.BatchNorm(hidden, momentum=0.9, dtype=dtype, rngs=rngs)
    else:
      self.expand = nnx.Conv(cin, hidden, (1, 1), use_bias=False, dtype=dtype, rngs=rngs)
      self.expand_norm = batch_norm.BatchNorm(hidden, momentum=0.9, dtype=dtype, rngs=rngs)
    self.depthwise = ConvBN(hidden, hidden, kernel, stride, groups=hidden, dtype=dtype, rngs=rngs)
    # hidden // (4·e) = int(cin / 4), the reference's SE width (se_ratio 0.25 of the block input).
    self.excite = (SqueezeExcite(hidden, reduction=4 * expansion, dtype=dtype, rngs=rngs)
                   if se else None)
    self.project = ConvBN(hidden, cout, 1, activation=None, dtype=dtype, rngs=rngs)
    self.residual = stride == 1 and cin == cout

  def __call__(self, x):
    y = nnx.relu(self.expand_norm(self.expand(x))) if self.expand else x
    y = self.depthwise(y)
    if self.excite:
      y = self.excite(y)
    y = self.project(y)
    return x + y if self.residual else y


class MnasNet(nnx.Module):
  """MnasNet-A1; `augment` gives AA-MnasNet.

  Args:
    num_classes: k.
    augment: attention-augmented expansions from the 40-channel stage on.
    width: channel multiplier (AA Table 4: 0.75, 1.0, 1.25, 1.4; tests use less).
    heads: Nh of the augmented convolutions (4).
    image_size: input side (square inputs; the relative tables are sized from it).
    in_channels: 3 for RGB.
    dropout: rate after pooling (0.2, reference).
    dtype: compute dtype.
  """

  def __init__(self, *, num_classes: int, augment: bool = False, width: float = 1.0,
               heads: int = 4, image_size: int = 224, in_channels: int = 3,
               dropout: float = 0.2, dtype=None, rngs: nnx.Rngs):
    if width <= 0:
      raise ValueError(f"width must be positive, got {width}")
    if image_size < 1:
      raise ValueError(f"image_size must be a positive int, got {image_size}")
    c = round_filters(STEM, width)
    self.stem = ConvBN(in_channels, c, 3, 2, dtype=dtype, rngs=rngs)
    size = -(-image_size // 2)
    blocks = []
    for stage, (repeats, kernel, stride, expansion, d, se) in enumerate(STAGES):
      d = round_filters(d, width)
      for i in range(repeats):
        s = stride if i == 0 else 1
        blocks.append(MBConv(c, d, kernel, s, expansion, se=se,
                             augment=augment and stage >= FIRST_AUGMENTED_STAGE,
                             downsample=stage == FIRST_AUGMENTED_STAGE, size=size, heads=heads,
                             dtype=dtype, rngs=rngs))
        c, size = d, -(-size // s)
    self.blocks = nnx.List(blocks)
    self.last = ConvBN(c, HEAD, 1, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout, rngs=rngs)
    self.head = nnx.Linear(HEAD, num_classes, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    x = self.stem(x)
    for block in self.blocks:
      x = block(x)
    x = self.dropout(jnp.mean(self.last(x), axis=(1, 2)))
    return self.head(x).astype(jnp.float32)


@register("mnasnet_a1")
def mnasnet_a1(*, num_classes, rngs, **overrides):
  return MnasNet(num_classes=num_classes, rngs=rngs, **overrides)


@register("aa_mnasnet_a1")
def aa_mnasnet_a1(*, num_classes, rngs, **overrides):
  return MnasNet(num_classes=num_classes, augment=True, rngs=rngs, **overrides)
