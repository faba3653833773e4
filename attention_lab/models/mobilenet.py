"""MobileNetV2, SANet (SAO paper Table 9), KANet (KAO paper Table 6), their baselines and ablations.

All share one layout, the MobileNetV2 one: stem 3×3/2 conv to 32, blocks
(r, d, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1)
(6,160,3,2) (6,320,1,1), 1×1 conv to 1280, average pool, dropout (keep 0.8),
FC. SANet/KANet make the stride-1 blocks on 28², 14² and 7² inputs attention
modules, exactly as their tables list them (ATTENTION_BLOCKS); the others are
BaseSkipModules (expansion (r−1)c + the input). Attention uses 4 heads and
projects only V.

Parameter convention of the papers (checked against SAO Table 8: SANet
3,449,408, w fixed to ones 3,448,448 — both exact): conv and FC kernels plus
the SAO w, without biases or batch-norm parameters; see
`experiments.model_stats`. The SAO and KAO modules (SANet, KANet and their
ablations) batch-normalise the coefficient matrices instead of scaling them,
as the SAO and KAO appendices do (GlobalAttention coefficients="batch_norm",
momentum 0.9 like the other batch norms here; the (N, N) matrix is never
formed); their γ/β are batch-norm parameters and do not count. The AttnNet
baselines keep their operators' own normalisation (softmax, 1/N).
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import batch_norm
from attention_lab.layers.mobile import MobileBlock
from attention_lab.models.registry import register

LAYOUT = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))
# (row, index in row) of the attention modules in SAO Table 9 / KAO Table 6.
ATTENTION_BLOCKS = frozenset({(2, 2), (3, 1), (3, 2), (3, 3), (4, 0), (4, 1), (4, 2),
                              (5, 1), (5, 2), (6, 0)})
BASES = ("concat", "standard", "mixed")


def _scaled(channels: int, width: float) -> int:
  return max(4, int(round(channels * width / 4)) * 4)


class MobileNet(nnx.Module):
  """MobileNetV2-layout network; `attention` picks the attention modules' path.

  Args:
    num_classes: k.
    attention: None (no attention modules), a GlobalAttention operator name or "se".
    base: "concat" (BaseSkipModule / the SAO paper's BaseModule) or "standard"
      (MobileNetV2's inverted residual) for the non-attention blocks; "mixed":
      "concat" outside ATTENTION_BLOCKS and "standard" at them (with attention=None,
      KAO Table 4's KANet w/o KAO: KANet_KV with every AttnSkipModule replaced by
      a BaseModule, its BaseSkipModules kept).
    attention_skip: skip around the attention path (SANet: yes; KANet AttnSkip: yes).
    attention_kwargs: passed to GlobalAttention (siamese_w, global_term, coefficients).
    width: channel multiplier (tests use small widths). image_size: input side.
    in_channels: 3 for RGB (1 for the digits CPU presets).
    dropout: rate after pooling (0.2 = keep 0.8, SAO/KAO appendices).
  """

  def __init__(self, *, num_classes: int, attention: str | None = None, base: str = "concat",
               attention_skip: bool = True, attention_kwargs: dict | None = None,
               width: float = 1.0, image_size: int = 224, in_channels: int = 3,
               dropout: float = 0.2, dtype=None, rngs: nnx.Rngs):
    if base not in BASES:
      raise ValueError(f"base must be one of {BASES}, got {base!r}")
    c = _scaled(32, width)
    self.stem = nnx.Conv(in_channels, c, (3, 3), strides=2, use_bias=False, dtype=dtype, rngs=rngs)
    self.stem_norm = batch_norm.BatchNorm(c, momentum=0.9, dtype=dtype, rngs=rngs)
    size = -(-image_size // 2)
    blocks = []
    for row, (r, d, n, s) in enumerate(LAYOUT):
      d = _scaled(d, width)
      for i in range(n):
        stride = s if i == 0 else 1
        at_attention = (row, i) in ATTENTION_BLOCKS
        attend = attention if at_attention else None
        concat = base == "concat" or (base == "mixed" and not at_attention)
        blocks.append(MobileBlock(
            c, d, r, stride, concat_input=concat, attention=attend,
            attention_skip=attention_skip, heads=4, spatial_shape=(size, size),
            attention_kwargs=attention_kwargs, dtype=dtype, rngs=rngs))
        c, size = d, -(-size // stride)
    self.blocks = nnx.List(blocks)
    last = max(1280, _scaled(1280, width)) if width > 1 else _scaled(1280, width)
    self.last = nnx.Conv(c, last, (1, 1), use_bias=False, dtype=dtype, rngs=rngs)
    self.last_norm = batch_norm.BatchNorm(last, momentum=0.9, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout, rngs=rngs)
    self.head = nnx.Linear(last, num_classes, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    x = nnx.relu6(self.stem_norm(self.stem(x)))
    for block in self.blocks:
      x = block(x)
    x = nnx.relu6(self.last_norm(self.last(x)))
    x = self.dropout(jnp.mean(x, axis=(1, 2)))
    return self.head(x).astype(jnp.float32)


# Coefficient batch norm of the SAO and KAO modules (SAO and KAO appendices).
_BN = {"coefficients": "batch_norm", "bn_momentum": 0.9}

_VARIANTS = {
    "mobilenet_v2": dict(attention=None, base="standard"),
    "sanet": dict(attention="siamese", attention_kwargs=_BN),
    "sanet_no_sao": dict(attention=None),
    "sanet_no_global": dict(attention="siamese", attention_kwargs={**_BN, "global_term": False}),
    "sanet_ones_w": dict(attention="siamese", attention_kwargs={**_BN, "siamese_w": "ones"}),
    "mobilenet_v2_sao": dict(attention="siamese", base="standard", attention_kwargs=_BN),
    "senet": dict(attention="se"),
    "attnnet": dict(attention="softmax"),
    "attnnet_pool": dict(attention="softmax_pool"),
    "attnnet_mean": dict(attention="mean"),
    "kanet_kv": dict(attention="kronecker_kv", attention_kwargs=_BN),
    "kanet_qkv": dict(attention="kronecker_qkv", attention_kwargs=_BN),
    "mobilenet_v2_kao": dict(attention="kronecker_kv", base="standard", attention_kwargs=_BN),
    # KAO Sec. 4.4: "based on KANet_KV, we replace all AttnSkipModules by BaseModules".
    "kanet_no_kao": dict(attention=None, base="mixed"),
}


def _make(defaults):
  def build(*, num_classes, rngs, **overrides):
    return MobileNet(num_classes=num_classes, rngs=rngs, **{**defaults, **overrides})
  return build


for _name, _defaults in _VARIANTS.items():
  register(_name)(_make(_defaults))
