"""MobileNetV2 blocks with attention paths (SAO paper Sec. 3.3; KAO paper Sec. 3.2, Fig. 3).

One class covers the four modules of the papers:
- BaseModule (MobileNetV2 inverted residual): 1×1 expansion to r·c, 3×3
  depthwise with stride s, linear 1×1 projection to d; residual when s = 1
  and c = d. (`concat_input=False`, no attention.)
- BaseSkipModule (called BaseModule in the SAO paper): the expansion makes
  only (r−1)·c maps and the input is concatenated to them (saves c·c weights
  and h·w·c MAdd). (`concat_input=True`.)
- AttnModule: (r−1)·c maps from expansion + depthwise, plus a parallel
  attention path over the block input giving c maps (average-pooled with
  stride s when s > 1), concatenated before the projection.
- AttnSkipModule (the SAO paper's AttnModule): the same with a skip
  connection around the attention path when s = 1 (`attention_skip=True`).
The attention path is any GlobalAttention operator with only V projected
(no bias: the papers' parameter counts include no biases), or a
squeeze-and-excitation gate ("se") for the SENet baseline.
"""

import jax.numpy as jnp
from flax import nnx

from attention_lab.layers.conv import ConvBN
from attention_lab.layers.excite import SqueezeExcite
from attention_lab.layers.global_attention import GlobalAttention


class MobileBlock(nnx.Module):
  """Base / BaseSkip / Attn / AttnSkip module (see the module docstring).

  Args:
    cin, cout: c and d. expansion: r. stride: s.
    concat_input: expand to (r−1)·c and concatenate the input (Base*Skip*).
    attention: None, "se", or a GlobalAttention operator name.
    attention_skip: skip connection around the attention path when s = 1.
    heads: attention heads (4 in SANet/KANet).
    attention_kwargs: extra GlobalAttention arguments (siamese_w, global_term, ...).
  """

  def __init__(self, cin: int, cout: int, expansion: int, stride: int, *,
               concat_input: bool = True, attention: str | None = None,
               attention_skip: bool = True, heads: int = 4, spatial_shape=None,
               attention_kwargs: dict | None = None, dtype=None, rngs: nnx.Rngs):
    self.stride, self.attention_skip = stride, attention_skip
    # The input joins the local path by concatenation (Base*Skip*), or is the whole
    # path when there is no expansion (r = 1).
    self.passthrough = attention is None and (concat_input or expansion == 1)
    if attention or concat_input:
      expanded = (expansion - 1) * cin
    else:
      expanded = expansion * cin if expansion > 1 else 0
    self.expand = (ConvBN(cin, expanded, 1, activation=nnx.relu6, dtype=dtype, rngs=rngs)
                   if expanded else None)
    local = expanded + (cin if self.passthrough else 0)
    self.depthwise = ConvBN(local, local, 3, stride, groups=local, activation=nnx.relu6,
                            dtype=dtype, rngs=rngs)
    if attention == "se":
      self.attend = SqueezeExcite(cin, reduction=2, use_bias=False, dtype=dtype, rngs=rngs)
    elif attention:
      self.attend = GlobalAttention(cin, attention, num_heads=heads, project="v",
                                    use_bias=False, spatial_shape=spatial_shape, dtype=dtype,
                                    rngs=rngs, **(attention_kwargs or {}))
    else:
      self.attend = None
    self.project = ConvBN(local + (cin if attention else 0), cout, 1, activation=None,
                          dtype=dtype, rngs=rngs)
    self.residual = stride == 1 and cin == cout

  def __call__(self, x):
    y = self.expand(x) if self.expand else x
    if self.passthrough and self.expand:
      y = jnp.concatenate([y, x], axis=-1)
    y = self.depthwise(y)
    if self.attend is not None:
      a = self.attend(x)
      if self.attention_skip and self.stride == 1:
        a = a + x
      if self.stride > 1:
        a = nnx.avg_pool(a, (self.stride, self.stride), (self.stride, self.stride), "SAME")
      y = jnp.concatenate([y, a.astype(y.dtype)], axis=-1)
    y = self.project(y)
    return x + y if self.residual else y
