"""Channel attention baselines of AA Table 1: Squeeze-and-Excitation and Gather-Excite."""

import jax
import jax.numpy as jnp
from flax import nnx


class SqueezeExcite(nnx.Module):
  """x ⊙ σ(W₂ ReLU(W₁ mean_HW(x) + b₁) + b₂), hidden width C/reduction (Hu et al.)."""

  def __init__(self, channels: int, *, reduction: int = 16, use_bias: bool = True, dtype=None,
               rngs: nnx.Rngs):
    hidden = max(1, channels // reduction)
    self.squeeze = nnx.Linear(channels, hidden, use_bias=use_bias, dtype=dtype, rngs=rngs)
    self.excite = nnx.Linear(hidden, channels, use_bias=use_bias, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    gate = jax.nn.sigmoid(self.excite(jax.nn.relu(self.squeeze(jnp.mean(x, axis=(1, 2))))))
    return x * gate[:, None, None, :].astype(x.dtype)


class GatherExcite(nnx.Module):
  """Parameter-free Gather-Excite with global extent (GE-θ⁻): x ⊙ σ(mean_HW(x))."""

  def __call__(self, x):
    return x * jax.nn.sigmoid(jnp.mean(x, axis=(1, 2), keepdims=True))
