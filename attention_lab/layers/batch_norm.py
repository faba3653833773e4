"""BatchNorm with statistics per group of examples, as the papers' per-GPU BatchNorm.

A jit over the mesh computes BatchNorm statistics over the whole global batch
(synchronised BN). The papers' multi-GPU PyTorch runs (DataParallel / DDP
without SyncBN) normalised each GPU's share with its own statistics: SAO 80
images per GPU (640 on 8), KAO 64 (512 on 8), AA 128-256 (1024-2048 on 8
V100). The batch a BatchNorm sees changes the result, so a paper recipe sets
`bn_group_size` to its per-GPU batch.

Training normalises each group of `bn_group_size` consecutive examples with
that group's own mean and (biased) variance. The running averages are updated
once per call with the mean over groups of the group statistics. PyTorch DDP
without SyncBN instead keeps one running average per worker, each from that
worker's batches (with the unbiased variance), broadcasts rank 0's buffers to
the others at every forward and saves rank 0's: its checkpoint holds one
worker's estimate. The mean over groups estimates the same per-group
statistics with the noise of all groups averaged out; the variance stays
biased, as in flax. Evaluation uses the running averages, as nnx.BatchNorm.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx.nn import dtypes


class BatchNorm(nnx.BatchNorm):
  """nnx.BatchNorm (same arguments, variables and results) with `bn_group_size`.

  bn_group_size: examples per statistics group, consecutive along axis 0; it
    must divide the batch. 0, or the batch size, is nnx.BatchNorm over the
    whole batch. A static attribute: `model.set_attributes(bn_group_size=G)`
    sets it on every such layer of a model.
  """

  def __init__(self, num_features: int, *, bn_group_size: int = 0, **kwargs):
    super().__init__(num_features, **kwargs)
    if isinstance(bn_group_size, bool) or not isinstance(bn_group_size, int) or bn_group_size < 0:
      raise ValueError(f"bn_group_size must be an int >= 0 (0: the whole batch), "
                       f"got {bn_group_size!r}")
    self.bn_group_size = bn_group_size

  def __call__(self, x, use_running_average: bool | None = None, *, mask=None):
    running = self.use_running_average if use_running_average is None else use_running_average
    size = self.bn_group_size
    if running is None or running or size in (0, x.shape[0]):
      return super().__call__(x, use_running_average, mask=mask)
    feature_axes = tuple(int(a) % x.ndim for a in np.atleast_1d(self.axis))
    if mask is not None:
      raise ValueError(f"mask is not supported with bn_group_size={size} (> 0)")
    if 0 in feature_axes:
      raise ValueError(f"bn_group_size ({size}) needs the batch on axis 0, got feature axes "
                       f"{feature_axes}")
    if x.shape[0] % size:
      raise ValueError(f"bn_group_size ({size}) must divide the batch, got x {x.shape}")
    scale = self.scale[...] if self.scale is not None else None
    bias = self.bias[...] if self.bias is not None else None
    x, _, _, scale, bias = self.promote_dtype(
        (x, self.mean[...], self.var[...], scale, bias), dtype=self.dtype)
    groups = x.reshape(x.shape[0] // size, size, *x.shape[1:])
    axes = tuple(a for a in range(1, groups.ndim) if a - 1 not in feature_axes)
    mean, var = self._group_stats(groups, axes)
    update = lambda old, new: jax.lax.stop_gradient(
        self.momentum * old + (1 - self.momentum) * jnp.mean(new, axis=0).reshape(old.shape)
    ).astype(old.dtype)  # running statistics are float32 in nnx.BatchNorm
    self.mean[...] = update(self.mean[...], mean)
    self.var[...] = update(self.var[...], var)
    features = [1] * groups.ndim
    for a in feature_axes:
      features[a + 1] = x.shape[a]
    mul = jax.lax.rsqrt(var + self.epsilon)
    if scale is not None:
      mul = mul * scale.reshape(features)
    y = (groups - mean) * mul
    if bias is not None:
      y = y + bias.reshape(features)
    dtype = dtypes.canonicalize_dtype(*(a for a in (x, scale, bias) if a is not None),
                                      dtype=self.dtype)
    return jnp.asarray(y.reshape(x.shape), dtype)

  def _group_stats(self, groups, axes):
    """Per-group (mean, var) over `axes`, kept as size-1 axes, in at least float32 (as flax)."""
    groups = groups.astype(jnp.promote_types(self.dtype or groups.dtype, jnp.float32))
    mean = jnp.mean(groups, axes, keepdims=True)
    if self.use_fast_variance:  # E[x²] − E[x]², clipped at 0 against round-off
      return mean, jnp.maximum(0.0, jnp.mean(jnp.square(groups), axes, keepdims=True)
                               - jnp.square(mean))
    return mean, jnp.mean(jnp.square(groups - mean), axes, keepdims=True)
