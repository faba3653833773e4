"""RetinaNet (Lin et al. 2017, "Focal Loss for Dense Object Detection") on any ResNet,
SE-ResNet or AA-ResNet backbone of models/resnet.py (AA paper Table 5).

- Backbone: `ResNetBackbone` (same module tree as the classifiers' `.backbone`,
  so a classification checkpoint's backbone weights load as they are); C3, C4,
  C5 are the outputs of stages 2, 3, 4 (strides 8, 16, 32).
- FPN (Sec. 4, "Feature Pyramid Network Backbone"): 1×1 lateral convs on C3-C5,
  top-down nearest ×2 upsampling and sum, 3×3 output convs → P3-P5; P6 a 3×3/2
  conv on C5 (`p6_input="c5"`, the paper; "p5": on P5, as Detectron2 and the
  TPU codebase, 4.1M fewer parameters at ResNet-50), P7 a 3×3/2 conv on
  ReLU(P6); `features` channels (256).
- Heads, shared over levels: classification and box subnets of `head_convs`
  (4) 3×3 conv + ReLU layers then a 3×3 conv to A·K class logits / A·4 box
  deltas, A = 9 anchors per location. Head weights N(0, 0.01²), biases 0, the
  class bias −log((1 − π)/π) with prior π = 0.01 (Sec. 4, "Initialization").
- Output: (class logits (B, N, K), box deltas (B, N, 4)), float32, N = Σ_l h_l·w_l·A,
  in the order of `ops.boxes.anchors` (level, row, column, anchor).

Backbone names: "resnet", "se_resnet", "aa_resnet" (with `depth`), or with the
depth in the name ("resnet50", "aa_resnet50"); AA options are the AA-ResNets'
(κ = 2υ = 0.2, Nh = 8; ResNet-34: κ = υ = 0.25).
"""

import math
import re

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import batch_norm
from attention_lab.models.registry import register
from attention_lab.models.resnet import STAGES, ResNetBackbone

HEAD_NORMS = ("none", "batch", "group")
P6_INPUTS = ("c5", "p5")
_BACKBONE = re.compile(r"^(resnet|se_resnet|aa_resnet)(\d*)$")


def backbone_options(backbone: str, depth: int | None = None, **attention) -> dict:
  """ResNetBackbone keyword arguments for a backbone name (see the module docstring);
  `attention` overrides AA options (kappa, upsilon, heads, min_key_dims_per_head)."""
  m = _BACKBONE.match(backbone)
  if not m:
    raise ValueError(f"backbone must be resnet|se_resnet|aa_resnet, optionally with a depth "
                     f"(e.g. 'aa_resnet50'), got {backbone!r}")
  kind, named_depth = m.group(1), m.group(2)
  depth = int(named_depth) if named_depth else depth
  if depth not in STAGES:
    raise ValueError(f"backbone depth must be one of {sorted(STAGES)}, got {depth!r}")
  options = {"depth": depth, "excite": kind == "se_resnet", "augment": None}
  if kind == "aa_resnet":
    kappa, upsilon = (0.25, 0.25) if depth == 34 else (0.2, 0.1)
    options["augment"] = dict(kappa=kappa, upsilon=upsilon, heads=8, min_key_dims_per_head=20,
                              positional="relative")
    options["augment"].update({k: v for k, v in attention.items() if v is not None})
  return options


def _conv(cin, cout, kernel, stride=1, *, dtype, rngs, head=False, bias=0.0):
  init = {}
  if head:
    init = dict(kernel_init=nnx.initializers.normal(0.01),
                bias_init=nnx.initializers.constant(bias))
  return nnx.Conv(cin, cout, (kernel, kernel), strides=stride, dtype=dtype, rngs=rngs, **init)


def _upsample_to(x, shape):
  """Nearest ×2 upsampling, cropped to `shape` (odd sizes under 'SAME' strides)."""
  x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
  return x[:, :shape[1], :shape[2]]


class Subnet(nnx.Module):
  """`convs` × (3×3 conv [+ norm] + ReLU), then a 3×3 conv to `outputs` channels (Fig. 3 c, d).

  norm: "none" (the paper), "batch" (one BatchNorm per level and layer, as the TPU
  RetinaNet codebase the AA paper used) or "group" (GroupNorm, 32 groups, shared).
  """

  def __init__(self, features, outputs, *, convs, bias, norm, levels, dtype, rngs):
    if norm not in HEAD_NORMS:
      raise ValueError(f"head_norm must be one of {HEAD_NORMS}, got {norm!r}")
    self.convs = nnx.List([_conv(features, features, 3, dtype=dtype, rngs=rngs, head=True)
                           for _ in range(convs)])
    self.out = _conv(features, outputs, 3, dtype=dtype, rngs=rngs, head=True, bias=bias)
    self.norm = norm
    if norm == "batch":
      self.norms = nnx.List([nnx.List([batch_norm.BatchNorm(features, momentum=0.9, dtype=dtype,
                                                     rngs=rngs) for _ in range(convs)])
                             for _ in range(levels)])
    elif norm == "group":
      groups = max(g for g in (32, 16, 8, 4, 2, 1) if features % g == 0)
      self.norms = nnx.List([nnx.GroupNorm(features, num_groups=groups, dtype=dtype, rngs=rngs)
                             for _ in range(convs)])

  def __call__(self, x, level: int):
    for i, conv in enumerate(self.convs):
      x = conv(x)
      if self.norm == "batch":
        x = self.norms[level][i](x)
      elif self.norm == "group":
        x = self.norms[i](x)
      x = nnx.relu(x)
    return self.out(x)


class RetinaNet(nnx.Module):
  """RetinaNet; see the module docstring.

  Args:
    num_classes: object classes K (no background class: sigmoid outputs).
    backbone: "resnet" | "se_resnet" | "aa_resnet" [+ depth].
    depth: ResNet depth when the name has none (10, 14, 18, 26, 34, 50, 101, 152).
    width: backbone channel multiplier.
    features: FPN and head channels (256 in the paper).
    head_convs: conv layers per subnet (4).
    num_anchors: anchors per location A (9: 3 scales × 3 aspect ratios).
    min_level, max_level: pyramid levels (3, 7; min_level 2 adds P2 from C2).
    prior: initial foreground probability π of the classifier (0.01).
    head_norm: "none" | "batch" | "group" in the subnets (see Subnet).
    p6_input: "c5" | "p5".
    kappa, upsilon, heads, min_key_dims: AA-backbone overrides (None: the AA-ResNets').
    image_size: the input (H, W) or side (only AA's relative tables depend on it).
    in_channels, dtype: input channels and compute dtype.
    padding: the backbone's, "same" or "torch" (models/resnet.py).
  """

  def __init__(self, *, num_classes: int, backbone: str = "resnet", depth: int = 50,
               width: float = 1.0, features: int = 256, head_convs: int = 4,
               num_anchors: int = 9, min_level: int = 3, max_level: int = 7,
               prior: float = 0.01, head_norm: str = "none", p6_input: str = "c5",
               image_size=640, in_channels: int = 3, padding: str = "same", dtype=None,
               kappa: float | None = None, upsilon: float | None = None,
               heads: int | None = None, min_key_dims: int | None = None, rngs: nnx.Rngs):
    if not 2 <= min_level <= 5 or max_level < 5:
      raise ValueError(f"levels must satisfy 2 <= min_level <= 5 <= max_level, got "
                       f"min_level={min_level}, max_level={max_level}")
    if not 0 < prior < 1:
      raise ValueError(f"prior must be in (0, 1), got {prior!r}")
    if p6_input not in P6_INPUTS:
      raise ValueError(f"p6_input must be one of {P6_INPUTS}, got {p6_input!r}")
    options = backbone_options(backbone, depth, kappa=kappa, upsilon=upsilon, heads=heads,
                               min_key_dims_per_head=min_key_dims)
    self.depth = options["depth"]
    self.backbone = ResNetBackbone(width=width, in_channels=in_channels, image_size=image_size,
                                   padding=padding, dtype=dtype, rngs=rngs, **options)
    self.num_classes, self.num_anchors = num_classes, num_anchors
    self.min_level, self.max_level = min_level, max_level
    # Channels of C2..C5: each stage's last block output.
    ends = list(_stage_ends(self.depth))
    channels = [_out_channels(self.backbone.blocks[i]) for i in ends]
    self.lateral = nnx.List([_conv(channels[l - 2], features, 1, dtype=dtype, rngs=rngs)
                             for l in range(min_level, 6)])
    self.output = nnx.List([_conv(features, features, 3, dtype=dtype, rngs=rngs)
                            for _ in range(min_level, 6)])
    self.p6_input = p6_input
    self.extra = nnx.List([_conv(channels[3] if l == 6 and p6_input == "c5" else features,
                                 features, 3, 2,
                                 dtype=dtype, rngs=rngs) for l in range(6, max_level + 1)])
    levels = max_level - min_level + 1
    self.class_net = Subnet(features, num_anchors * num_classes, convs=head_convs,
                            bias=-math.log((1 - prior) / prior), norm=head_norm, levels=levels,
                            dtype=dtype, rngs=rngs)
    self.box_net = Subnet(features, num_anchors * 4, convs=head_convs, bias=0.0, norm=head_norm,
                          levels=levels, dtype=dtype, rngs=rngs)

  def features(self, x):
    """Backbone C2..C5 then the FPN: [P_min_level, ..., P_max_level]."""
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    ends = set(_stage_ends(self.depth))
    x = self.backbone.stem_features(x)
    c = []
    for i, block in enumerate(self.backbone.blocks):
      x = block(x)
      if i in ends:
        c.append(x)
    c = c[self.min_level - 2:]  # C_min_level .. C5
    laterals = [conv(f) for conv, f in zip(self.lateral, c)]
    for i in range(len(laterals) - 2, -1, -1):
      laterals[i] = laterals[i] + _upsample_to(laterals[i + 1], laterals[i].shape)
    pyramid = [conv(f) for conv, f in zip(self.output, laterals)]
    y = c[-1] if self.p6_input == "c5" else pyramid[-1]
    for i, conv in enumerate(self.extra):
      y = conv(nnx.relu(y) if i else y)
      pyramid.append(y)
    return pyramid

  def __call__(self, x):
    batch = x.shape[0]
    logits, deltas = [], []
    for level, p in enumerate(self.features(x)):
      logits.append(self.class_net(p, level).reshape(batch, -1, self.num_classes))
      deltas.append(self.box_net(p, level).reshape(batch, -1, 4))
    return (jnp.concatenate(logits, 1).astype(jnp.float32),
            jnp.concatenate(deltas, 1).astype(jnp.float32))


def _stage_ends(depth):
  """Indices (in the flat block list) of the last block of each of the four stages."""
  total = 0
  for count in STAGES[depth]:
    total += count
    yield total - 1


def _out_channels(block) -> int:
  return block.expand.out_features if hasattr(block, "expand") else block.conv2.out_features


@register("retinanet")
def _retinanet(*, num_classes, rngs, **kw):
  return RetinaNet(num_classes=num_classes, rngs=rngs, **kw)
