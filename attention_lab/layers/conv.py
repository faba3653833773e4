"""Conv → BatchNorm → optional activation, the unit of every CNN here."""

from collections.abc import Callable

from flax import nnx

from attention_lab.layers import batch_norm


class ConvBN(nnx.Module):
  """k×k convolution without bias, batch norm, then `activation` (None: linear). `padding`
  as nnx.Conv's ('SAME', or explicit ((top, bottom), (left, right)))."""

  def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, *, groups: int = 1,
               activation: Callable | None = nnx.relu, padding="SAME", dtype=None,
               rngs: nnx.Rngs):
    self.conv = nnx.Conv(cin, cout, (kernel, kernel), strides=stride, feature_group_count=groups,
                         padding=padding, use_bias=False, dtype=dtype, rngs=rngs)
    self.norm = batch_norm.BatchNorm(cout, momentum=0.9, dtype=dtype, rngs=rngs)
    self.activation = activation

  def __call__(self, x):
    x = self.norm(self.conv(x))
    return self.activation(x) if self.activation else x
