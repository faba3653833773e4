"""Wide-ResNet-28-10 for CIFAR (Zagoruyko & Komodakis) and its attention variants of AA Table 1.

Pre-activation basic blocks (BN-ReLU-conv3×3-BN-ReLU-conv3×3, 1×1 projection
shortcut when the shape changes), 3 stages of 4 blocks at widths 16k, 32k,
64k (k = 10), strides 1, 2, 2 on 32×32 inputs. Variants:
- `aa_wide_resnet28_10`: the first convolution of every block is an
  AugmentedConv with relative attention, Nh = 8, κ = 2υ = 0.2, at least 20 key
  dimensions per head (AA Sec. 4.1);
- `se_wide_resnet28_10`: squeeze-excitation (reduction 16) on every residual branch;
- `ge_wide_resnet28_10`: parameter-free gather-excite on every residual branch.
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import AugmentedConv, GatherExcite, SqueezeExcite
from attention_lab.layers import batch_norm
from attention_lab.models.registry import register


class WideBlock(nnx.Module):
  def __init__(self, cin, cout, stride, *, size, excite, augment, heads, min_key_dims, dropout,
               dtype, rngs):
    self.norm1 = batch_norm.BatchNorm(cin, momentum=0.9, dtype=dtype, rngs=rngs)
    if augment:
      self.conv1 = AugmentedConv(cin, cout, 3, stride, kappa=0.2, upsilon=0.1, heads=heads,
                                 min_key_dims_per_head=min_key_dims, spatial_shape=(size, size),
                                 dtype=dtype, rngs=rngs)
    else:
      self.conv1 = nnx.Conv(cin, cout, (3, 3), strides=stride, use_bias=False, dtype=dtype,
                            rngs=rngs)
    self.norm2 = batch_norm.BatchNorm(cout, momentum=0.9, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout, rngs=rngs)
    self.conv2 = nnx.Conv(cout, cout, (3, 3), use_bias=False, dtype=dtype, rngs=rngs)
    self.excite = {"se": lambda: SqueezeExcite(cout, dtype=dtype, rngs=rngs),
                   "ge": GatherExcite, None: lambda: None}[excite]()
    self.shortcut = (nnx.Conv(cin, cout, (1, 1), strides=stride, use_bias=False, dtype=dtype,
                              rngs=rngs) if (stride != 1 or cin != cout) else None)

  def __call__(self, x):
    y = nnx.relu(self.norm1(x))
    skip = self.shortcut(y) if self.shortcut else x
    y = self.conv2(self.dropout(nnx.relu(self.norm2(self.conv1(y)))))
    if self.excite:
      y = self.excite(y)
    return skip + y


class WideResNet(nnx.Module):
  """WRN-depth-k; `width` scales every stage (tests use tiny widths); `excite` ∈ {None, se, ge};
  `augment` with `heads` (Nh = 8) and `min_key_dims` per head (20) as in AA Sec. 4.1."""

  def __init__(self, *, num_classes: int, depth: int = 28, k: int = 10, width: float = 1.0,
               excite: str | None = None, augment: bool = False, heads: int = 8,
               min_key_dims: int = 20, dropout: float = 0.0,
               image_size: int = 32, in_channels: int = 3, dtype=None, rngs: nnx.Rngs):
    if (depth - 4) % 6:
      raise ValueError(f"depth must be 6n+4, got {depth}")
    n = (depth - 4) // 6
    widths = [max(8, int(16 * width)), *(max(8, int(c * k * width)) for c in (16, 32, 64))]
    self.stem = nnx.Conv(in_channels, widths[0], (3, 3), use_bias=False, dtype=dtype, rngs=rngs)
    blocks, cin, size = [], widths[0], image_size
    for stage, cout in enumerate(widths[1:]):
      for i in range(n):
        stride = 2 if (stage > 0 and i == 0) else 1
        blocks.append(WideBlock(cin, cout, stride, size=size, excite=excite, augment=augment,
                                heads=heads, min_key_dims=min_key_dims, dropout=dropout,
                                dtype=dtype, rngs=rngs))
        cin, size = cout, -(-size // stride)
    self.blocks = nnx.List(blocks)
    self.norm = batch_norm.BatchNorm(cin, momentum=0.9, dtype=dtype, rngs=rngs)
    self.head = nnx.Linear(cin, num_classes, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    x = self.stem(x)
    for block in self.blocks:
      x = block(x)
    x = jnp.mean(nnx.relu(self.norm(x)), axis=(1, 2))
    return self.head(x).astype(jnp.float32)


for _name, _kw in {"wide_resnet28_10": {}, "aa_wide_resnet28_10": {"augment": True},
                   "se_wide_resnet28_10": {"excite": "se"},
                   "ge_wide_resnet28_10": {"excite": "ge"}}.items():
  register(_name)(lambda *, num_classes, rngs, _kw=_kw, **kw: WideResNet(
      num_classes=num_classes, rngs=rngs, **{**_kw, **kw}))
