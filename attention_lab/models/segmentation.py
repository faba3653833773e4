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
- `hamnet` (Ham paper Sec. 3.4 and App. E.1/E.3; checked against the official
  Enjoy-Hamburger seg/HamNet code): dilated ResNet-`depth` (101; 50 for the
  ablations) at output stride 8 (16 for the ablations) with the deep 3-conv
  stem and multi-grid (1, 2, 4) in stage 4 (`stem`, `multi_grid`), 3×3
  conv-BN-ReLU to 512, Hamburger (NMF, d = 512, r = 64, K = 6; `ham`,
  `rank`, `ham_options`), then 3×3 conv-BN-ReLU to 256, channel dropout 0.1
  and a 1×1 classifier with bias. No auxiliary head (VOC); the mmseg ADE20K
  recipe adds one (`aux_head=True`, loss weight 0.4 in the task).
- `segmenter` (the CPU experiment, configs/segmentation/default.py): one name
  for every head: "hamburger" builds `hamnet`, the others `deeplab_v2`, each
  given only its own options.
Both take `aux_head`: an FCN auxiliary head on stage 3 (3×3 conv-BN-ReLU to
256, dropout 0.1, 1×1 classifier; mmseg FCNHead), returned, upsampled to the
input, by `model(x, with_aux=True)` → (logits, aux_logits).
`width` scales the backbone and every head width (tests use tiny widths).
`stem_widths` and `padding` are the backbone's (models/resnet.py): "torch"
padding computes what weights read from a torch checkpoint were trained for.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import ConvBN, GlobalAttention, Hamburger
from attention_lab.models.registry import register
from attention_lab.models.resnet import STAGES, ResNetBackbone

HEADS = {"aspp": None, "attention": "softmax", "kronecker_kv": "kronecker_kv",
         "kronecker_qkv": "kronecker_qkv"}


def _scaled(channels: int, width: float) -> int:
  return max(8, int(channels * width))


def _upsample(logits, x):
  """float32 logits resized bilinearly to the spatial size of the input x."""
  logits = logits.astype(jnp.float32)
  return jax.image.resize(logits, (*x.shape[:3], logits.shape[-1]), "bilinear")


class FCNHead(nnx.Module):
  """The auxiliary head of the mmseg recipes: 3×3 conv-BN-ReLU, dropout 0.1, 1×1 classifier."""

  def __init__(self, cin, channels, num_classes, *, dtype, rngs):
    self.conv = ConvBN(cin, channels, 3, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(0.1, broadcast_dims=(1, 2), rngs=rngs)
    self.classifier = nnx.Conv(channels, num_classes, (1, 1), dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.classifier(self.dropout(self.conv(x)))


class _Segmenter(nnx.Module):
  """The shared pieces: dilated backbone, optional auxiliary head on stage 3."""

  def _init_backbone(self, *, depth, width, output_stride, in_channels, stem, stem_widths,
                     padding, multi_grid, aux_head, num_classes, dtype, rngs):
    self.backbone = ResNetBackbone(depth=depth, width=width, output_stride=output_stride,
                                   in_channels=in_channels, stem=stem,
                                   stem_widths=tuple(stem_widths), padding=padding,
                                   multi_grid=tuple(multi_grid), dtype=dtype, rngs=rngs)
    self.aux_index = sum(STAGES[depth][:3]) - 1  # the last block of stage 3
    stage3 = _scaled(256, width) * type(self.backbone.blocks[self.aux_index]).expansion
    self.aux = (FCNHead(stage3, _scaled(256, width),
                        num_classes, dtype=dtype, rngs=rngs) if aux_head else None)

  def _features(self, x, with_aux):
    if with_aux and self.aux is None:
      raise ValueError("with_aux=True needs a model built with aux_head=True")
    if not with_aux:
      return self.backbone(x), None
    b = self.backbone
    f = b.stem_features(x)
    aux = None
    for i, block in enumerate(b.blocks):
      f = block(f)
      if i == self.aux_index:
        aux = _upsample(self.aux(f), x)
    return f, aux


class DeepLabV2(_Segmenter):
  """Args: num_classes; depth (101); output_stride (8); head (a key of HEADS); rates of
  ASPP (6, 12, 18, 24); heads and attention_features (4, 512) of the attention
  heads; classifier_kernel (1: the attention heads' classifier is 1×1; 3: 3×3);
  stem ("standard"), stem_widths, padding ("same") and multi_grid ((1,)) of the
  backbone; aux_head (False); width; in_channels; dtype."""

  def __init__(self, *, num_classes: int, depth: int = 101, output_stride: int = 8,
               head: str = "aspp", rates: tuple[int, ...] = (6, 12, 18, 24), heads: int = 4,
               attention_features: int = 512, classifier_kernel: int = 1,
               stem: str = "standard", stem_widths: tuple[int, ...] = (64, 64, 128),
               padding: str = "same",
               multi_grid: tuple[int, ...] = (1,), aux_head: bool = False, width: float = 1.0,
               in_channels: int = 3, dtype=None, rngs: nnx.Rngs):
    if head not in HEADS:
      raise ValueError(f"head must be one of {sorted(HEADS)}, got {head!r}")
    if classifier_kernel not in (1, 3):
      raise ValueError(f"classifier_kernel must be 1 or 3, got {classifier_kernel!r}")
    self._init_backbone(depth=depth, width=width, output_stride=output_stride,
                        in_channels=in_channels, stem=stem, stem_widths=stem_widths,
                        padding=padding, multi_grid=multi_grid,
                        aux_head=aux_head, num_classes=num_classes, dtype=dtype, rngs=rngs)
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
          nnx.Conv(c + features, num_classes, (classifier_kernel,) * 2, dtype=dtype,
                   rngs=rngs)])

  def __call__(self, x, *, with_aux: bool = False):
    f, aux = self._features(x, with_aux)
    if self.attention:
      f = jnp.concatenate([f, self.attention(f).astype(f.dtype)], axis=-1)
    logits = _upsample(sum(classifier(f) for classifier in self.classifiers), x)
    return (logits, aux) if with_aux else logits


class HamNet(_Segmenter):
  """Args: num_classes; depth (101; 50 in the ablations); output_stride (8); channels (512,
  the Hamburger's C); ham ("nmf"), rank r (64), ham_options (other Hamburger
  arguments, e.g. init, gradient, train_steps, temperature; "dim": its latent
  dimension d, scaled by width like channels, default d = C); align_channels (256);
  dropout (0.1); stem ("deep"), stem_widths ((64, 64, 128)), padding ("same")
  and multi_grid ((1, 2, 4)) of the backbone; aux_head (False); width;
  in_channels; dtype."""

  def __init__(self, *, num_classes: int, depth: int = 101, output_stride: int = 8,
               channels: int = 512, ham: str = "nmf", rank: int = 64,
               ham_options: dict | None = None, align_channels: int = 256,
               dropout: float = 0.1, stem: str = "deep",
               stem_widths: tuple[int, ...] = (64, 64, 128), padding: str = "same",
               multi_grid: tuple[int, ...] = (1, 2, 4),
               aux_head: bool = False, width: float = 1.0, in_channels: int = 3, dtype=None,
               rngs: nnx.Rngs):
    self._init_backbone(depth=depth, width=width, output_stride=output_stride,
                        in_channels=in_channels, stem=stem, stem_widths=stem_widths,
                        padding=padding, multi_grid=multi_grid,
                        aux_head=aux_head, num_classes=num_classes, dtype=dtype, rngs=rngs)
    c, a = _scaled(channels, width), _scaled(align_channels, width)
    self.squeeze = ConvBN(self.backbone.out_features, c, 3, dtype=dtype, rngs=rngs)
    options = dict(ham_options or {})
    without = tuple(options.pop("without", ()))
    dim = _scaled(options.pop("dim", channels), width)  # Ham Fig. 3 varies d apart from C
    # Ham Table 2 "baseline": no Hamburger at all (without=("hamburger",)).
    self.hamburger = None if "hamburger" in without else Hamburger(
        c, ham=ham, dim=dim, rank=rank, without=without, dtype=dtype, rngs=rngs, **options)
    self.align = ConvBN(c, a, 3, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout, broadcast_dims=(1, 2), rngs=rngs)
    self.classifier = nnx.Conv(a, num_classes, (1, 1), dtype=dtype, rngs=rngs)

  def __call__(self, x, *, with_aux: bool = False):
    f, aux = self._features(x, with_aux)
    f = self.squeeze(f)
    if self.hamburger is not None:
      f = self.hamburger(f)
    logits = _upsample(self.classifier(self.dropout(self.align(f))), x)
    return (logits, aux) if with_aux else logits


_DEEPLAB_ONLY = ("rates", "heads", "attention_features", "classifier_kernel")
_HAMNET_ONLY = ("channels", "ham", "rank", "ham_options", "align_channels", "dropout")
SEGMENTER_HEADS = tuple(HEADS) + ("hamburger",)


def segmenter(*, num_classes: int, head: str = "aspp", rngs: nnx.Rngs, **options):
  """`hamnet` for head="hamburger", else `deeplab_v2` with that head; each model gets only
  its own options (the others are dropped), so one config serves every head."""
  if head not in SEGMENTER_HEADS:
    raise ValueError(f"head must be one of {SEGMENTER_HEADS}, got {head!r}")
  if head == "hamburger":
    options = {k: v for k, v in options.items() if k not in _DEEPLAB_ONLY}
    return HamNet(num_classes=num_classes, rngs=rngs, **options)
  options = {k: v for k, v in options.items() if k not in _HAMNET_ONLY}
  return DeepLabV2(num_classes=num_classes, head=head, rngs=rngs, **options)


register("deeplab_v2")(lambda *, num_classes, rngs, **kw: DeepLabV2(
    num_classes=num_classes, rngs=rngs, **kw))
register("hamnet")(lambda *, num_classes, rngs, **kw: HamNet(
    num_classes=num_classes, rngs=rngs, **kw))
register("segmenter")(segmenter)
