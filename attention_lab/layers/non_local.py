"""Non-local block, embedded Gaussian form (Wang et al., "Non-local Neural Networks", CVPR 2018)."""

import math

from flax import nnx

from attention_lab import ops
from attention_lab.layers import batch_norm
from attention_lab.layers import recording


class NonLocal(nnx.Module):
  """z = x + BN(W_z · y), y_i = Σ_j softmax_j(θ(x_i)ᵀφ(x_j)) g(x_j) (Eq. 1-3, 6; Fig. 2).

  θ, φ and g are 1×1 maps (linear maps over channels, with bias as in the
  paper's convolutions) to `inner_features` (C/2 by default, the paper's
  bottleneck); the embedded-Gaussian pairwise function with the 1/C(x)
  normalisation is a softmax over all positions, computed by
  `ops.dot_product_attention` with scale 1 (the paper does not scale by
  1/√d). W_z maps back to C and is followed by batch norm whose γ starts at 0,
  so the block starts as the identity (Sec. 4.1). `subsample=True` max-pools
  φ and g with window and stride 2 over the last two spatial axes (the
  paper's 2×2 spatial pooling; a (T, H, W) volume is not pooled in time, as
  the paper's video models; a sequence is pooled by 2), cutting the pairwise
  cost by 4 (Sec. 3.3). Odd sizes keep their edge ("SAME" padding), a choice
  the paper leaves open. Any spatial rank ≥ 1: x (B, *S, C).
  Time O(N·M·inner + N·C·inner) with N = ΠS positions and M the (pooled) key
  count; memory O(N·M) for the softmax (as `dot_product_attention`).
  With `record_attention` on (`recording.attention_weights`), sows the softmax
  rows (B, 1, *S, *key grid), the key grid pooled with `subsample`.

  Args:
    in_features: C.
    inner_features: width of θ, φ, g (default C // 2).
    subsample: max-pool φ and g (see above).
    use_bias: biases in θ, φ, g and W_z.
    dtype: compute dtype (parameters float32; the softmax accumulates in float32).
  """

  def __init__(self, in_features: int, *, inner_features: int | None = None,
               subsample: bool = False, use_bias: bool = True, dtype=None, rngs: nnx.Rngs):
    inner = inner_features or in_features // 2
    if inner < 1:
      raise ValueError(f"inner_features must be a positive integer, got {inner_features!r} "
                       f"(in_features {in_features})")
    self.subsample, self.dtype = subsample, dtype
    self.record_attention = False  # see `recording`
    dense = lambda i, o: nnx.Linear(i, o, use_bias=use_bias, dtype=dtype, rngs=rngs)
    self.theta, self.phi, self.g = (dense(in_features, inner) for _ in range(3))
    self.out = dense(inner, in_features)
    self.norm = batch_norm.BatchNorm(in_features, scale_init=nnx.initializers.zeros_init(),
                              dtype=dtype, rngs=rngs)

  def _pool(self, t):
    spatial = t.ndim - 2
    window = (1,) * max(0, spatial - 2) + (2,) * min(2, spatial)
    return nnx.max_pool(t, window, strides=window, padding="SAME")

  def __call__(self, x):
    if x.ndim < 3:
      raise ValueError(f"x must have shape (batch, *spatial, channels), got {x.shape}")
    if self.dtype is not None:
      x = x.astype(self.dtype)
    keys, values = self.phi(x), self.g(x)
    if self.subsample:
      keys, values = self._pool(keys), self._pool(values)
    tokens = lambda t: t.reshape(t.shape[0], math.prod(t.shape[1:-1]), 1, t.shape[-1])
    queries = self.theta(x)
    y = ops.dot_product_attention(tokens(queries), tokens(keys), tokens(values), scale=1.0)
    recording.sow_if_recording(
        self, recording.WEIGHTS, lambda: recording.single_head_weights(queries, keys, scale=1.0))
    y = y.reshape(*x.shape[:-1], y.shape[-1])
    return x + self.norm(self.out(y)).astype(x.dtype)
