"""A small CNN with one global-context block: the default experiment's model (digits)."""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers import GlobalAttention, Hamburger
from attention_lab.layers import batch_norm
from attention_lab.layers.conv import ConvBN
from attention_lab.layers.global_attention import OPERATORS
from attention_lab.models.registry import register

ATTENTIONS = ("none", *OPERATORS, "hamburger")  # an operator GlobalAttention runs is one here


class AttentionCNN(nnx.Module):
  """Three conv stages (stride 1, 2, 2) → global-context block → pool → dropout → linear.

  The block sees the (H/4, W/4, width·2) feature map. Attention variants use
  GlobalAttention with q, k, v projected, `heads` heads and an output
  projection, added residually through a zero-initialised batch-norm scale (so
  training starts from the plain CNN); "hamburger" is the residual Hamburger
  block itself; "none" is the plain CNN.
  """

  def __init__(self, *, num_classes: int, attention: str = "softmax", width: int = 32,
               heads: int = 4, image_size: int = 32, in_channels: int = 1,
               dropout: float = 0.1, dtype=None, rngs: nnx.Rngs):
    if attention not in ATTENTIONS:
      raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    c = 2 * width
    self.stages = nnx.List([
        ConvBN(in_channels, width, 3, 1, dtype=dtype, rngs=rngs),
        ConvBN(width, c, 3, 2, dtype=dtype, rngs=rngs),
        ConvBN(c, c, 3, 2, dtype=dtype, rngs=rngs),
    ])
    grid = (-(-image_size // 4),) * 2
    self.attention = attention
    if attention == "hamburger":
      self.block = Hamburger(c, dim=c, rank=8, train_steps=6, eval_steps=7, dtype=dtype,
                             rngs=rngs)
    elif attention != "none":
      self.block = GlobalAttention(c, attention, num_heads=heads, project="qkv",
                                   out_features=c, spatial_shape=grid, dtype=dtype, rngs=rngs)
      self.block_norm = batch_norm.BatchNorm(c, scale_init=nnx.initializers.zeros, dtype=dtype,
                                      rngs=rngs)
    self.dropout = nnx.Dropout(dropout, rngs=rngs)
    self.head = nnx.Linear(c, num_classes, dtype=dtype, rngs=rngs)

  def features(self, x):
    """The pooled (B, 2·width) features the head classifies (e.g. the digits-GAN's FID space)."""
    for stage in self.stages:
      x = stage(x)
    if self.attention == "hamburger":
      x = self.block(x)
    elif self.attention != "none":
      x = x + self.block_norm(self.block(x))
    return jnp.mean(x, axis=(1, 2))

  def __call__(self, x):
    return self.head(self.dropout(self.features(x))).astype(jnp.float32)


@register("attention_cnn")
def attention_cnn(*, num_classes, rngs, **kwargs):
  return AttentionCNN(num_classes=num_classes, rngs=rngs, **kwargs)
