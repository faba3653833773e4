"""Semantic segmentation on dilated ResNets: DeepLabV2 with the KAO Table 5 heads, and HamNet.

Both return float32 logits (B, H, W, num_classes) at the input size: the
head's stride-8 logits are bilinearly upsampled (`jax.image.resize`,
half-pixel centres; the Ham reference uses align_corners=True), so a
per-pixel cross-entropy trainer compares them with the labels directly, as
the DeepLab and Ham reference codes evaluate. Any input size works (odd,
non-square); features are ⌈H/8⌉×⌈W/8⌉.

- `deeplab_v2` (Chen et al. 2018; KAO paper Sec. 4.5, Table 5): ResNet-101 at
  output stride 8 (stages 3 and 4 dilated 2 and 4) and `head`:
  "aspp": ASPP-L, four parallel 3×3 convs with bias from 2048 channels to the
    classes, dilations 6, 12, 18, 24, summed;
  "attention" / "kronecker_kv" / "kronecker_qkv": the attention operator
    replaces ASPP as the output layer with linear maps on Q, K and V
    (GlobalAttention, project="qkv", operators "softmax", "kronecker_kv",
    "kronecker_qkv"). The paper leaves the widths open; ours: q, k, v of
    `attention_features` (512) channels in `heads` (4, as KANet) heads, and a
    1×1 classifier with bias on the backbone features concatenated with the
    attention output (without the skip, KAO_QKV's output o_rows[x] + o_cols[y]
    would make every logit map a sum of a row and a column profile).
- `hamnet` (Ham paper Sec. 3.4 and App. E.1/E.3): dilated ResNet-`depth`
  (101; 50 for the ablations) at output stride 8 (16 for the ablations), 3×3
  conv-BN-ReLU to 512, Hamburger (NMF, d = 512, r = 64, K = 6; `ham`,
  `rank`, `ham_options`), then as the reference code: 3×3 conv-BN-ReLU to
  256, channel dropout 0.1 and a 1×1 classifier with bias. Unlike the
  reference we keep the He et al. 7×7 stem and no multi-grid in stage 4.
`width` scales the backbone and every head width (tests use tiny widths).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import ConvBN, GlobalAttention, Hamburger
from attention_lab.models.registry import register
from attention_lab.models.resnet import ResNetBackbone

HEADS = {"aspp": None, "attention": "softmax", "kronecker_kv": "kronecker_kv",
         "kronecker_qkv": "kronecker_qkv"}


def _scaled(channels: int, width: float) -> int:
  return max(8, int(channels * width))


def _upsample(logits, x):
  """float32 logits resized bilinearly to the spatial size of the input x."""
  logits = logits.astype(jnp.float32)
  return jax.image.resize(logits, (*x.shape[:3], logits.shape[-1]), "bilinear")


class DeepLabV2(nnx.Module):
  """Args: num_classes; depth (101); output_stride (8); head (a key of HEADS); rates of
  ASPP (6, 12, 18, 24); heads and attention_features (4, 512) of the attention
  heads; width; in_channels; dtype."""

  def __init__(self, *, num_classes: int, depth: int = 101, output_stride: int = 8,
               head: str = "aspp", rates: tuple[int, ...] = (6, 12, 18, 24), heads: int = 4,
               attention_features: int = 512, width: float = 1.0, in_channels: int = 3,
               dtype=None, rngs: nnx.Rngs):
    if head not in HEADS:
      raise ValueError(f"head must be one of {sorted(HEADS)}, got {head!r}")
    self.backbone = ResNetBackbone(depth=depth, width=width, output_stride=output_stride,
                                   in_channels=in_channels, dtype=dtype, rngs=rngs)
    c = self.backbone.out_features
    if head == "aspp":
      self.attention = None
      self.classifiers = nnx.List([
          nnx.Conv(c, num_classes, (3, 3), kernel_dilation=r, dtype=dtype, rngs=rngs)
          for r in rates])
    else:
      features = _scaled(attention_features, width)
      self.attention = GlobalAttention(c, HEADS[head], num_heads=heads, project="qkv",
                                       key_features=features, value_features=features,
                                       dtype=dtype, rngs=rngs)
      self.classifiers = nnx.List([
          nnx.Conv(c + features, num_classes, (1, 1), dtype=dtype, rngs=rngs)])

  def __call__(self, x):
    f = self.backbone(x)
    if self.attention:
      f = jnp.concatenate([f, self.attention(f).astype(f.dtype)], axis=-1)
    return _upsample(sum(classifier(f) for classifier in self.classifiers), x)


class HamNet(nnx.Module):
  """Args: num_classes; depth (101; 50 in the ablations); output_stride (8); channels (512,
  the Hamburger's C and d); ham ("nmf"), rank r (64), ham_options (other
  Hamburger arguments, e.g. init, gradient, train_steps); align_channels (256);
  dropout (0.1); width; in_channels; dtype."""

  def __init__(self, *, num_classes: int, depth: int = 101, output_stride: int = 8,
               channels: int = 512, ham: str = "nmf", rank: int = 64,
               ham_options: dict | None = None, align_channels: int = 256,
               dropout: float = 0.1, width: float = 1.0, in_channels: int = 3, dtype=None,
               rngs: nnx.Rngs):
    self.backbone = ResNetBackbone(depth=depth, width=width, output_stride=output_stride,
                                   in_channels=in_channels, dtype=dtype, rngs=rngs)
    c, a = _scaled(channels, width), _scaled(align_channels, width)
    self.squeeze = ConvBN(self.backbone.out_features, c, 3, dtype=dtype, rngs=rngs)
    self.hamburger = Hamburger(c, ham=ham, dim=c, rank=rank, dtype=dtype, rngs=rngs,
                               **(ham_options or {}))
    self.align = ConvBN(c, a, 3, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout, broadcast_dims=(1, 2), rngs=rngs)
    self.classifier = nnx.Conv(a, num_classes, (1, 1), dtype=dtype, rngs=rngs)

  def __call__(self, x):
    f = self.hamburger(self.squeeze(self.backbone(x)))
    return _upsample(self.classifier(self.dropout(self.align(f))), x)


register("deeplab_v2")(lambda *, num_classes, rngs, **kw: DeepLabV2(
    num_classes=num_classes, rngs=rngs, **kw))
register("hamnet")(lambda *, num_classes, rngs, **kw: HamNet(
    num_classes=num_classes, rngs=rngs, **kw))
