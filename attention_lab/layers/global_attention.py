"""GlobalAttention: projections and heads around any global-context operator of attention_lab.ops."""

import math

import jax.numpy as jnp
from flax import nnx

from attention_lab import ops

OPERATORS = ("softmax", "softmax_pool", "mean", "siamese", "kronecker_kv", "kronecker_qkv",
             "relative")
PROJECTIONS = ("v", "qkv")


class GlobalAttention(nnx.Module):
  """Self-attention over every position of a (B, *S, C) grid with a chosen operator.

  q, k, v are the input itself or 1×1 linear maps of it (`project="v"`: only V
  is projected, as in SANet/KANet, SAO paper 3.3; `"qkv"`: all three, as in
  U-Net and DeepLab heads). Channels split into `num_heads` heads. Operators:
  "softmax" (regular attention), "softmax_pool" (keys/values pooled 2×2,
  the Attn+Pool baseline), "mean" (1/N coefficients, Attn1/N), "siamese"
  (SAO, a trainable w per head, initialised to ones), "kronecker_kv",
  "kronecker_qkv" (KAO, any spatial rank) and "relative" (2D relative logits,
  AA paper; needs `spatial_shape` for its (2L−1, D/heads) tables, initialised
  N(0, (D/heads)^−1/2) and shared by the heads).

  Args:
    in_features: C.
    operator: one of OPERATORS.
    num_heads: heads; must divide the key and value widths.
    project: "v" or "qkv".
    key_features: width of q and k (default C; must be C unless "qkv").
    value_features: width of v (default C).
    out_features: if set, a final linear map to this width.
    spatial_shape: (X, Y) grid size, required for "relative".
    use_bias: biases in the linear maps.
    siamese_w: "learned" or "ones" (w fixed to ones, SAO Table 8 ablation).
    global_term: SAO's global response term (False: SAO Table 6 ablation).
    dtype: compute dtype (parameters stay float32).
  """

  def __init__(self, in_features: int, operator: str, *, num_heads: int = 1,
               project: str = "v", key_features: int | None = None,
               value_features: int | None = None, out_features: int | None = None,
               spatial_shape: tuple[int, ...] | None = None, use_bias: bool = True,
               siamese_w: str = "learned", global_term: bool = True, dtype=None,
               rngs: nnx.Rngs):
    if operator not in OPERATORS:
      raise ValueError(f"operator must be one of {OPERATORS}, got {operator!r}")
    if project not in PROJECTIONS:
      raise ValueError(f"project must be one of {PROJECTIONS}, got {project!r}")
    key_features = key_features or in_features
    value_features = value_features or in_features
    if project == "v" and key_features != in_features:
      raise ValueError(
          f"key_features must equal in_features ({in_features}) when q and k are not "
          f"projected (project='v'), got {key_features}")
    for name, width in (("key_features", key_features), ("value_features", value_features)):
      if width % num_heads:
        raise ValueError(f"{name} ({width}) must be divisible by num_heads ({num_heads})")
    if siamese_w not in ("learned", "ones"):
      raise ValueError(f"siamese_w must be 'learned' or 'ones', got {siamese_w!r}")
    self.operator, self.num_heads, self.dtype = operator, num_heads, dtype
    self.global_term = global_term
    dense = lambda i, o: nnx.Linear(i, o, use_bias=use_bias, dtype=dtype, rngs=rngs)
    self.query = dense(in_features, key_features) if project == "qkv" else None
    self.key = dense(in_features, key_features) if project == "qkv" else None
    self.value = dense(in_features, value_features)
    self.out = dense(value_features, out_features) if out_features else None
    head_dim = key_features // num_heads
    if operator == "siamese":
      ones = jnp.ones((num_heads, head_dim))
      self.w = nnx.Param(ones) if siamese_w == "learned" else nnx.Variable(ones)
    if operator == "relative":
      if spatial_shape is None or len(spatial_shape) != 2:
        raise ValueError(
            f"spatial_shape must be the (height, width) grid for operator='relative', "
            f"got {spatial_shape}")
      init = nnx.initializers.normal(head_dim**-0.5)
      self.rel_h = nnx.Param(init(rngs.params(), (2 * spatial_shape[0] - 1, head_dim)))
      self.rel_w = nnx.Param(init(rngs.params(), (2 * spatial_shape[1] - 1, head_dim)))

  def _heads(self, x):
    return x.reshape(*x.shape[:-1], self.num_heads, x.shape[-1] // self.num_heads)

  def __call__(self, x):
    if x.ndim < 3:
      raise ValueError(f"x must have shape (batch, *spatial, channels), got {x.shape}")
    if self.dtype is not None:
      x = x.astype(self.dtype)
    q = self._heads(self.query(x) if self.query else x)
    k = self._heads(self.key(x) if self.key else x)
    v = self._heads(self.value(x))
    grid, flat = x.shape[:-1], lambda t: t.reshape(t.shape[0], -1, *t.shape[-2:])
    op = self.operator
    if op in ("softmax", "mean"):
      out = ops.dot_product_attention(flat(q), flat(k), flat(v), normalization=op)
    elif op == "softmax_pool":
      out = ops.dot_product_attention(flat(q), *ops.pool_keys_values(k, v))
    elif op == "siamese":
      out = ops.siamese_attention(flat(q), flat(k), flat(v), self.w[...].astype(q.dtype),
                                  global_term=self.global_term)
    elif op == "kronecker_kv":
      out = ops.kronecker_attention_kv(q, k, v)
    elif op == "kronecker_qkv":
      out = ops.kronecker_attention_qkv(q, k, v)
    else:
      if x.ndim != 4:
        raise ValueError(f"operator='relative' needs a 2D grid (B, X, Y, C), got {x.shape}")
      out = ops.relative_attention_2d(
          q, k, v, self.rel_h[...].astype(q.dtype), self.rel_w[...].astype(q.dtype))
    out = out.reshape(*grid, math.prod(out.shape[-2:]))
    return self.out(out) if self.out else out
