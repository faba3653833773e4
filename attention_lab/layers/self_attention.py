"""SAGAN self-attention, its refined linear form (ISA), and spectral normalisation."""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import ops
from attention_lab.layers import recording

VARIANTS = ("sa", "refined")

xavier = nnx.initializers.xavier_uniform()  # the official SAGAN code's initialiser


def _l2_normalize(x, eps):
  return x * jax.lax.rsqrt(jnp.sum(x * x) + eps)


class SpectralNorm(nnx.Module):
  """Runs `layer` with its weight W replaced by W/σ(W) (Miyato et al. 2018; SAGAN Sec. 4.1).

  W (the `param` attribute: "kernel" of Linear/Conv, "embedding" of Embed) is
  viewed as the matrix (prod(shape[:-1]), shape[-1]); σ is estimated by
  `n_steps` power iterations from a stored vector u (an nnx.BatchStat), as in
  SAGAN's official `spectral_normed_weight`; u and v are constants to the
  gradient. Training (`model.train()`, the default) stores the new u on every
  call; evaluation (`model.eval()`) runs the same iterations from the stored u
  without storing them, so evaluation is deterministic and repeatable. W itself
  is never overwritten: the layer runs on a functional copy holding W/σ (flax
  0.12's nnx.SpectralNorm writes W/σ back into the Param on every call, which
  makes the learned weight drift, so it is not used).
  """

  def __init__(self, layer: nnx.Module, *, param: str = "kernel", n_steps: int = 1,
               eps: float = 1e-12, rngs: nnx.Rngs):
    weight = getattr(layer, param, None)
    if not isinstance(weight, nnx.Param) or len(weight.shape) < 2:
      raise ValueError(f"param must name a parameter of rank >= 2 of the layer, got {param!r}")
    if n_steps < 1:
      raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    self.layer, self.param, self.n_steps, self.eps = layer, param, n_steps, eps
    self.u = nnx.BatchStat(jax.random.normal(rngs.params(), (weight.shape[-1],), jnp.float32))
    self.use_running_average = False  # set by model.train() / model.eval()

  def normalized_weight(self):
    """W/σ with σ from the power iteration (stores u unless in evaluation mode)."""
    w = getattr(self.layer, self.param)[...]
    mat = w.reshape(-1, w.shape[-1]).astype(jnp.float32)
    u = self.u[...]
    for _ in range(self.n_steps):
      v = _l2_normalize(mat @ u, self.eps)
      u = _l2_normalize(mat.T @ v, self.eps)
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    if not self.use_running_average:
      self.u[...] = u
    sigma = v @ mat @ u
    return (w / jnp.where(sigma != 0, sigma, 1).astype(w.dtype)).astype(w.dtype)

  def __call__(self, *args, **kwargs):
    graphdef, state = nnx.split(self.layer)
    state = nnx.State(dict(state))
    state[self.param] = nnx.Param(self.normalized_weight())
    return nnx.merge(graphdef, state)(*args, **kwargs)


def maybe_spectral_norm(layer: nnx.Module, spectral_norm: bool, rngs: nnx.Rngs, **kwargs):
  """`SpectralNorm(layer)` if `spectral_norm`, else `layer`."""
  return SpectralNorm(layer, rngs=rngs, **kwargs) if spectral_norm else layer


class SelfAttention(nnx.Module):
  """out = x + γ·o on any grid (B, *S, C), o = SAGAN self-attention or its refined form.

  Maps (1×1 convolutions, i.e. per-position linear maps, no bias): f, g to
  `key_features` (C/8, SAGAN Sec. 3's C̄ = C/k with k = 8), h to `value_features`.
  - "sa" (SAGAN Eq. 1-2): o_j = Σ_i β_ji h(x_i), β_ji = softmax_i(f(x_i)ᵀg(x_j)).
    SAGAN scales nothing: `ops.dot_product_attention(scale=1.0)`, queries g,
    keys f. Time O(N²·(C/8 + C_v)), memory O(N²) (or O(c·N) with
    `query_chunk_size=c`).
  - "refined" (Refined-SA Eq. 3-4): o = z(yᵀφ(x))/N with z = g(x), y = f(x)
    (C/8) and φ = h(x) (C), computed as z·(yᵀφ/N) by
    `ops.dot_product_attention(normalization="mean", scale=1.0)`: the softmax is
    replaced by the 1/N normalisation. Time O(N·C/8·C_v), extra memory
    O(C/8·C_v); no N×N matrix. The paper keeps SAGAN's structure around the
    module (ISAGAN "uses the structure of SAGAN"), so the residual x + γ·o with
    γ = 0 at init is kept; the paper shows no γ, this is our reading.
  γ is a scalar initialised to 0 (SAGAN Eq. 3), so a fresh layer is the
  identity. `value_features=None` makes h map to C with no output map, as in
  the Refined-SA paper ((C/8)×C matrix yᵀφ) and the heykeetae code it used;
  an integer C_v adds SAGAN's output map v: C_v → C (SAGAN Sec. 3; the
  official code uses C_v = C/2). `key_pool` = p > 1 max-pools the keys f(x) and
  values h(x) p×p over a 2D grid, so N/p² positions are attended (the official
  SAGAN and BigGAN code: p = 2; "sa" time O(N²/p²·(C/8 + C_v))).
  `spectral_norm` wraps every map in SpectralNorm (SAGAN applies it to all
  layers of G and D).
  With `record_attention` on (`recording.attention_weights`), sows the weights
  (B, 1, *S, *S/p) of the values in o: β for "sa", f·g/N for "refined".

  Args:
    in_features: C.
    variant: "sa" or "refined".
    key_features: width of f and g; default max(1, C // 8).
    value_features: width of h; None: C and no output map.
    spectral_norm: spectral-normalise f, g, h (and v).
    key_pool: p: keys and values max-pooled p×p (2D grids with sides divisible by p).
    query_chunk_size: "sa" only: queries per chunk (see ops.dot_product_attention).
    dtype: compute dtype of the maps and the attention (γ and parameters are float32).
  """

  def __init__(self, in_features: int, *, variant: str = "sa", key_features: int | None = None,
               value_features: int | None = None, spectral_norm: bool = False,
               key_pool: int = 1, query_chunk_size: int | None = None, dtype=None,
               rngs: nnx.Rngs):
    if variant not in VARIANTS:
      raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if in_features < 1:
      raise ValueError(f"in_features must be >= 1, got {in_features}")
    key_features = max(1, in_features // 8) if key_features is None else key_features
    for name, value in (("key_features", key_features), ("value_features", value_features),
                        ("key_pool", key_pool)):
      if value is not None and value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    self.variant, self.query_chunk_size, self.key_pool = variant, query_chunk_size, key_pool
    self.record_attention = False  # see `recording`

    def linear(cin, cout):
      layer = nnx.Linear(cin, cout, use_bias=False, kernel_init=xavier, dtype=dtype, rngs=rngs)
      return maybe_spectral_norm(layer, spectral_norm, rngs)

    self.f = linear(in_features, key_features)
    self.g = linear(in_features, key_features)
    self.h = linear(in_features, value_features or in_features)
    self.v = linear(value_features, in_features) if value_features else None
    self.gamma = nnx.Param(jnp.zeros((), jnp.float32))

  def __call__(self, x):
    if x.ndim < 3:
      raise ValueError(f"x must have shape (batch, *spatial, channels), got {x.shape}")
    p = self.key_pool
    if p > 1 and (x.ndim != 4 or x.shape[1] % p or x.shape[2] % p):
      raise ValueError(f"key_pool={p} needs x of shape (batch, height, width, channels) with "
                       f"height and width divisible by {p}, got {x.shape}")
    pool = (lambda t: nnx.max_pool(t, (p, p), strides=(p, p))) if p > 1 else (lambda t: t)
    q, k, v = self.g(x), pool(self.f(x)), pool(self.h(x))  # (B, *S, D), keys (B, *S/p, D)
    flat = lambda t: t.reshape(t.shape[0], -1, 1, t.shape[-1])  # (B, N, 1 head, D)
    if self.variant == "sa":
      o = ops.dot_product_attention(flat(q), flat(k), flat(v), scale=1.0,
                                    query_chunk_size=self.query_chunk_size)
    else:
      o = ops.dot_product_attention(flat(q), flat(k), flat(v), scale=1.0, normalization="mean")
    recording.sow_if_recording(self, recording.WEIGHTS, lambda: recording.single_head_weights(
        q, k, scale=1.0, normalization="softmax" if self.variant == "sa" else "mean"))
    o = o.reshape(*x.shape[:-1], o.shape[-1])
    if self.v is not None:
      o = self.v(o)
    return x + (self.gamma[...] * o).astype(x.dtype)
