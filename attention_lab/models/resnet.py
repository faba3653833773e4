"""ImageNet ResNets (He et al. 2016), dilated for segmentation, and the AA Tables 2, 3, 6 variants.

Stem 7×7/2 conv-BN-ReLU to 64 and 3×3/2 max pool, then four stages at widths
64, 128, 256, 512 with (3, 4, 6, 3) blocks (34, 50), (3, 4, 23, 3) (101) or
(3, 8, 36, 3) (152): basic blocks (two 3×3 convs) for 34, bottlenecks (1×1
to the width, 3×3, 1×1 to 4× the width) for 50 and deeper; global average
pool and a linear classifier. A `depth` override of 10 or 18 (basic) or 14
or 26 (bottleneck) has 1 or 2 blocks per stage, for tests. The stride of a
stage sits on the 3×3 conv of
its first block ("v1.5", the TF TPU ResNet the AA paper trained; its MAdd
gives the paper's 8.2 GFlops = 2 × 4.1G MAdd for ResNet-50); projection
shortcuts 1×1 conv-BN where the shape changes; the last BN of every residual
branch starts at γ = 0 (Goyal et al., as that code). An H×W input gives
⌈H/32⌉×⌈W/32⌉ features.

`padding` "same" (the default, as the TF TPU ResNet): every conv and the max
pool pad 'SAME'. "torch", as torchvision, mmcv and the PSPNet / Encoding
ResNets: a k×k conv of dilation d pads d·(k−1)/2 on each side and the 3×3/2
max pool 1 (with −∞). Shapes and parameters are the same; the values differ
only where a stride-2 conv or pool meets an even input size, where 'SAME' pads
one pixel less at the top / left, shifting every later layer by a pixel
relative to the torch network. Weights read from a torch checkpoint compute
the features they were trained for only under "torch" (the segmentation and
detection tasks choose it by themselves then: checkpoints/backbone_weights.py).

`stem` "standard" (7×7/2 conv-BN-ReLU to 64) or "deep" (the ResNet-C stem of
the PSPNet / EMANet / HamNet and mmseg backbones: 3×3/2, 3×3, 3×3 convs, each
conv-BN-ReLU, of `stem_widths`: (64, 64, 128) for the PSPNet / Encoding
ResNets, (32, 32, 64) for mmseg's ResNetV1c), then the 3×3/2 max pool.

`output_stride` 16 or 8 replaces the stride 2 of the last one or two stages
by dilation 2 (and 4) of their 3×3 convs (DeepLab, Chen et al. 2018). Every
block of a dilated stage uses the stage's dilation, as DeepLabV2's ResNet-101
(the Ham reference keeps the previous dilation in a stage's first block; the
choice changes neither shapes nor counts).

Variants:
- AA-ResNets (AA Sec. 4.2): the 3×3 conv of every bottleneck in the last three
  stages (28², 14², 7² at 224²) is an AugmentedConv with relative attention,
  Nh = 8, κ = 2υ = 0.2 and at least 20 key dimensions per head (the paper
  states this minimum for CIFAR only; its Table 9, 43k/90k/190k attention
  parameters per layer, is dk = 160 on ImageNet too). Attention in the first
  augmented stage runs on a 3×3/2 average-pooled input (AA Sec. 3.3, Table 9's
  14² for stage 2). ResNet-34: κ = υ = 0.25 on the first 3×3 conv of each
  basic block (the paper does not say which of the two; the first reproduces
  its 20.7M). `kappa` / `upsilon` give AA Table 6 and the υ = 0.25 row of
  Table 2; `positional` AA Table 7.
- SE-ResNets (Hu et al.): squeeze-excitation, reduction 16 with biases, on the
  residual branch before the sum.

Parameters: the ResNet papers count all trainable parameters (BN and biases
included: ResNet-50 25,557,032 = "25.6M"); the AA tables use that convention.
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import AugmentedConv, ConvBN, SqueezeExcite
from attention_lab.layers import batch_norm
from attention_lab.models.registry import register

# Blocks per stage by depth: basic blocks for BASIC_DEPTHS, bottlenecks for the others. The
# shallow 10, 14, 18, 26 (1 or 2 blocks per stage) keep tests cheap.
STAGES = {10: (1, 1, 1, 1), 14: (1, 1, 1, 1), 18: (2, 2, 2, 2), 26: (2, 2, 2, 2),
          34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
BASIC_DEPTHS = (10, 18, 34)
WIDTHS = (64, 128, 256, 512)
# (stride, dilation) of stages 2-4 per output stride; stage 1 has stride 1.
OUTPUT_STRIDES = {32: ((2, 1), (2, 1), (2, 1)), 16: ((2, 1), (2, 1), (1, 2)),
                  8: ((2, 1), (1, 2), (1, 4))}


PADDINGS = ("same", "torch")
STEMS = ("standard", "deep")


def _scaled(channels: int, width: float) -> int:
  return max(8, int(channels * width))


def conv_padding(padding: str, kernel: int, dilation: int = 1):
  """nnx.Conv's padding for `padding` "same" ('SAME') or "torch" (d·(k−1)/2 on each side)."""
  if padding == "same":
    return "SAME"
  p = dilation * (kernel - 1) // 2
  return ((p, p), (p, p))


def _pair(size) -> tuple[int, int]:
  return (size, size) if isinstance(size, int) else tuple(size)


class BasicBlock(nnx.Module):
  """conv3×3-BN-ReLU-conv3×3-BN (+SE) plus the shortcut, ReLU; `augment` on the first conv."""

  expansion = 1

  def __init__(self, cin, planes, stride, dilation, *, spatial, augment, excite,
               padding="same", dtype, rngs):
    self.conv1 = _conv3x3(cin, planes, stride, dilation, spatial, augment, padding, dtype, rngs)
    self.norm1 = batch_norm.BatchNorm(planes, momentum=0.9, dtype=dtype, rngs=rngs)
    self.conv2 = _conv3x3(planes, planes, 1, dilation, None, None, padding, dtype, rngs)
    self.norm2 = batch_norm.BatchNorm(planes, momentum=0.9, scale_init=nnx.initializers.zeros,
                               dtype=dtype, rngs=rngs)
    self.excite = SqueezeExcite(planes, dtype=dtype, rngs=rngs) if excite else None
    self.shortcut = _shortcut(cin, planes, stride, dtype, rngs)

  def __call__(self, x):
    y = nnx.relu(self.norm1(self.conv1(x)))
    y = self.norm2(self.conv2(y))
    if self.excite:
      y = self.excite(y)
    return nnx.relu(y + (self.shortcut(x) if self.shortcut else x))


class Bottleneck(nnx.Module):
  """1×1-BN-ReLU, 3×3 (stride, dilation; `augment`)-BN-ReLU, 1×1 to 4·planes-BN (+SE);
  plus the shortcut, ReLU."""

  expansion = 4

  def __init__(self, cin, planes, stride, dilation, *, spatial, augment, excite,
               padding="same", dtype, rngs):
    cout = 4 * planes
    self.reduce = ConvBN(cin, planes, 1, dtype=dtype, rngs=rngs)
    self.conv = _conv3x3(planes, planes, stride, dilation, spatial, augment, padding, dtype, rngs)
    self.norm = batch_norm.BatchNorm(planes, momentum=0.9, dtype=dtype, rngs=rngs)
    self.expand = nnx.Conv(planes, cout, (1, 1), use_bias=False, dtype=dtype, rngs=rngs)
    self.expand_norm = batch_norm.BatchNorm(cout, momentum=0.9, scale_init=nnx.initializers.zeros,
                                     dtype=dtype, rngs=rngs)
    self.excite = SqueezeExcite(cout, dtype=dtype, rngs=rngs) if excite else None
    self.shortcut = _shortcut(cin, cout, stride, dtype, rngs)

  def __call__(self, x):
    y = nnx.relu(self.norm(self.conv(self.reduce(x))))
    y = self.expand_norm(self.expand(y))
    if self.excite:
      y = self.excite(y)
    return nnx.relu(y + (self.shortcut(x) if self.shortcut else x))


def _conv3x3(cin, cout, stride, dilation, spatial, augment, padding, dtype, rngs):
  if augment:
    return AugmentedConv(cin, cout, 3, stride, spatial_shape=spatial, dtype=dtype, rngs=rngs,
                         **augment)
  return nnx.Conv(cin, cout, (3, 3), strides=stride, kernel_dilation=dilation,
                  padding=conv_padding(padding, 3, dilation), use_bias=False, dtype=dtype,
                  rngs=rngs)


def _shortcut(cin, cout, stride, dtype, rngs):
  """The 1×1 projection; a 1×1 conv pads nothing under either padding."""
  if stride == 1 and cin == cout:
    return None
  return ConvBN(cin, cout, 1, stride, activation=None, dtype=dtype, rngs=rngs)


class ResNetBackbone(nnx.Module):
  """Stem and the four stages; (B, H, W, C) → (B, ⌈H/os⌉, ⌈W/os⌉, `out_features`).

  Args:
    depth: a key of STAGES (34, 50, 101, 152; 10, 14, 18, 26 for tests).
    width: multiplies every channel count (at least 8; tests use tiny widths).
    output_stride: 32, 16 or 8 (dilated last stages).
    in_channels: input channels.
    augment: None, or the AugmentedConv options (kappa, upsilon, heads,
      min_key_dims_per_head, positional) for the 3×3 convs of stages 2-4.
    excite: squeeze-excitation on every residual branch.
    image_size: input (H, W) or side; only AA's relative tables depend on it.
    stem: "standard" (7×7/2 conv-BN-ReLU to 64) or "deep" (three 3×3 conv-BN-ReLU,
      the first of stride 2, to `stem_widths`), then the 3×3/2 max pool.
    stem_widths: the deep stem's widths at width 1 ((64, 64, 128): PSPNet /
      Encoding / HamNet; (32, 32, 64): mmseg ResNetV1c), scaled as the stem's 64
      is; unused by the standard stem.
    padding: "same" or "torch" (see the module docstring).
    multi_grid: dilation multipliers of the last stage's blocks, cycled
      (DeepLabV3 / HamNet (1, 2, 4): dilations 4, 8, 16 at output stride 8).
    dtype: compute dtype.
  """

  def __init__(self, *, depth: int, width: float = 1.0, output_stride: int = 32,
               in_channels: int = 3, augment: dict | None = None, excite: bool = False,
               image_size: int | tuple[int, int] = 224, stem: str = "standard",
               stem_widths: tuple[int, int, int] = (64, 64, 128), padding: str = "same",
               multi_grid: tuple[int, ...] = (1,), dtype=None, rngs: nnx.Rngs):
    if stem not in STEMS:
      raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
    stem_widths = tuple(stem_widths)
    if len(stem_widths) != 3 or not all(isinstance(w, int) and w > 0 for w in stem_widths):
      raise ValueError(f"stem_widths must be three positive ints, got {stem_widths!r}")
    if padding not in PADDINGS:
      raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    if augment and padding != "same":
      raise ValueError(f"padding must be 'same' for attention-augmented ResNets (AugmentedConv "
                       f"pads 'SAME'), got {padding!r}")
    if depth not in STAGES:
      raise ValueError(f"depth must be one of {sorted(STAGES)}, got {depth!r}")
    if output_stride not in OUTPUT_STRIDES:
      raise ValueError(f"output_stride must be one of {sorted(OUTPUT_STRIDES)}, got "
                       f"{output_stride!r}")
    if augment and output_stride != 32:
      raise ValueError(f"output_stride must be 32 for attention-augmented ResNets "
                       f"(AugmentedConv has no dilation), got {output_stride}")
    block = BasicBlock if depth in BASIC_DEPTHS else Bottleneck
    cin = _scaled(64, width)
    pad3 = conv_padding(padding, 3)
    if stem == "standard":
      self.stem = ConvBN(in_channels, cin, 7, 2, padding=conv_padding(padding, 7), dtype=dtype,
                         rngs=rngs)
    else:
      w1, w2, w3 = (max(1, cin * w // 64) for w in stem_widths)
      self.stem = nnx.Sequential(
          ConvBN(in_channels, w1, 3, 2, padding=pad3, dtype=dtype, rngs=rngs),
          ConvBN(w1, w2, 3, padding=pad3, dtype=dtype, rngs=rngs),
          ConvBN(w2, w3, 3, padding=pad3, dtype=dtype, rngs=rngs))
      cin = w3
    self.pool_padding = "SAME" if padding == "same" else ((1, 1), (1, 1))
    size = tuple(-(-s // 4) for s in _pair(image_size))  # after the stem and the max pool
    blocks = []
    for stage, (count, planes) in enumerate(zip(STAGES[depth], WIDTHS)):
      stride, dilation = (((1, 1),) + OUTPUT_STRIDES[output_stride])[stage]
      options = {**augment, "downsample": stage == 1} if augment and stage > 0 else None
      planes = _scaled(planes, width)
      for i in range(count):
        s = stride if i == 0 else 1
        d = dilation * multi_grid[i % len(multi_grid)] if stage == 3 else dilation
        blocks.append(block(cin, planes, s, d, spatial=size, augment=options,
                            excite=excite, padding=padding, dtype=dtype, rngs=rngs))
        cin, size = planes * block.expansion, tuple(-(-n // s) for n in size)
    self.blocks = nnx.List(blocks)
    self.out_features, self.output_stride = cin, output_stride

  def stem_features(self, x):
    """The stem and the 3×3/2 max pool (the input of the first block)."""
    return nnx.max_pool(self.stem(x), (3, 3), (2, 2), self.pool_padding)

  def __call__(self, x):
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    x = self.stem_features(x)
    for block in self.blocks:
      x = block(x)
    return x


class ResNet(nnx.Module):
  """ResNetBackbone, global average pool, linear classifier; float32 logits.

  AA options (used when `augment`): kappa κ, upsilon υ, heads Nh,
  min_key_dims per head, positional ("relative", "none", "sine", "coordconv"). stem,
  stem_widths and padding as ResNetBackbone's.
  """

  def __init__(self, *, num_classes: int, depth: int, width: float = 1.0,
               output_stride: int = 32, in_channels: int = 3, excite: bool = False,
               augment: bool = False, kappa: float = 0.2, upsilon: float = 0.1, heads: int = 8,
               min_key_dims: int = 20, positional: str = "relative",
               image_size: int | tuple[int, int] = 224, stem: str = "standard",
               stem_widths: tuple[int, int, int] = (64, 64, 128), padding: str = "same",
               dtype=None, rngs: nnx.Rngs):
    options = (dict(kappa=kappa, upsilon=upsilon, heads=heads,
                    min_key_dims_per_head=min_key_dims, positional=positional)
               if augment else None)
    self.backbone = ResNetBackbone(depth=depth, width=width, output_stride=output_stride,
                                   in_channels=in_channels, augment=options, excite=excite,
                                   image_size=image_size, stem=stem, stem_widths=stem_widths,
                                   padding=padding, dtype=dtype, rngs=rngs)
    self.head = nnx.Linear(self.backbone.out_features, num_classes, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.head(self.backbone(x).mean(axis=(1, 2))).astype(jnp.float32)


def _register(name: str, **fixed):
  register(name)(lambda *, num_classes, rngs, **kw: ResNet(
      num_classes=num_classes, rngs=rngs, **{**fixed, **kw}))


_register("resnet")  # depth from the config (configs/segmentation/digits_backbone.py)
for _depth in (34, 50, 101, 152):
  _register(f"resnet{_depth}", depth=_depth)
  _register(f"se_resnet{_depth}", depth=_depth, excite=True)
  _register(f"aa_resnet{_depth}", depth=_depth, augment=True,
            **({"kappa": 0.25, "upsilon": 0.25} if _depth == 34 else {}))
