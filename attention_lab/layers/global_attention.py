"""GlobalAttention: projections, heads and coefficient batch norm around the ops operators."""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import ops
from attention_lab.layers import recording


def dot_moments(q, k):
  """Per-head mean and variance of c_ij = q_i·k_j over (batch, i, j), without the (Nq, Nk) matrix.

  With per-example means q̄, k̄ and centred covariances C_q = (1/Nq) Σ_i
  (q_i − q̄)(q_i − q̄)ᵀ, C_k likewise, the mean over (i, j) is q̄·k̄ and the
  variance over (i, j) is ⟨C_q, C_k⟩_F + k̄ᵀC_q k̄ + q̄ᵀC_k q̄ (the cross terms
  vanish because centred tokens average to zero). The variance over the
  batch adds the variance of q̄·k̄ across examples. Every term is a
  non-negative sum, so there is no E[c²] − E[c]² cancellation. Time
  O(B·H·(Nq+Nk)·D²), float32.

  Args:
    q: (B, Nq, H, D); k: (B, Nk, H, D).

  Returns:
    (mean, var), each (H,).
  """
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  q_mean, k_mean = jnp.mean(q, axis=1), jnp.mean(k, axis=1)  # (B, H, D)
  qc, kc = q - q_mean[:, None], k - k_mean[:, None]
  cov_q = jnp.einsum("bnhd,bnhe->bhde", qc, qc) / q.shape[1]
  cov_k = jnp.einsum("bnhd,bnhe->bhde", kc, kc) / k.shape[1]
  within = (jnp.sum(cov_q * cov_k, axis=(-2, -1))
            + jnp.einsum("bhd,bhde,bhe->bh", k_mean, cov_q, k_mean)
            + jnp.einsum("bhd,bhde,bhe->bh", q_mean, cov_k, q_mean))
  example_mean = jnp.sum(q_mean * k_mean, axis=-1)  # (B, H)
  return jnp.mean(example_mean, axis=0), jnp.mean(within, axis=0) + jnp.var(example_mean, axis=0)


def sum_moments(a, b=None):
  """Per-head mean and variance of c_ij = a_i + b_j over (batch, i, j), in O(B·H·(Nq+Nk)).

  Per example the mean is ā + b̄ and the variance var_i(a) + var_j(b) (a_i and
  b_j vary independently over the (i, j) grid); the variance over the batch
  adds the variance of ā + b̄ across examples. This equals the SAO form
  E[c] = E_b[ā + b̄], E[c²] = E_b[mean a² + mean b² + 2·ā·b̄], arranged to
  avoid cancellation. b=None: c_ij = a_i.

  Args:
    a: (B, Nq, H); b: (B, Nk, H) or None.

  Returns:
    (mean, var), each (H,).
  """
  a = a.astype(jnp.float32)
  example_mean, within = jnp.mean(a, axis=1), jnp.var(a, axis=1)
  if b is not None:
    b = b.astype(jnp.float32)
    example_mean, within = example_mean + jnp.mean(b, axis=1), within + jnp.var(b, axis=1)
  return jnp.mean(example_mean, axis=0), jnp.mean(within, axis=0) + jnp.var(example_mean, axis=0)


def _summary(x):
  """Kronecker summary of multi-head (B, *S, H, D) → (B, ΣS, H, D) (KAO Eq. 1)."""
  merged = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
  return ops.kronecker_summary(merged).reshape(x.shape[0], -1, *x.shape[-2:])


def _flat(x):
  """(B, *S, H, D) → (B, N, H, D)."""
  return x.reshape(x.shape[0], -1, *x.shape[-2:])


def _logits(queries, keys):
  """E = queries·keysᵀ per head: (B, Nq, H, D), (B, Nk, H, D) → (B, H, Nq, Nk)."""
  return jnp.einsum("bqhd,bkhd->bhqk", queries, keys)


def _chunk(layer):
  """The softmax operators take all queries at once for "auto"."""
  return None if layer.query_chunk_size == "auto" else layer.query_chunk_size


def _on_grid(weights, grid):
  """(B, H, N, N) → (B, H, *S, *S)."""
  return weights.reshape(*weights.shape[:2], *grid, *grid)


def _no_variables(layer, **options):
  return {}


class Operator(NamedTuple):
  """How GlobalAttention runs one operator; q, k, v are (B, *S, H, D) heads.

  attend(layer, q, k, v, scale): the `ops` call → (B, *S or N, H, Dv). scale=None
    is the operator's own normalisation; under the coefficient batch norm it is
    1.0 (E unscaled) and, for softmax operators, q comes scaled by γ/σ per head.
  coefficients(layer, q, k): the coefficient matrix E (B, H, Nq, Nk) that the
    operator normalises (logits, or SAO's a_i + b_j), from float32 q, k.
  moments(layer, q, k): per-head (mean, var) of E over (batch, i, j) without
    forming it; None: the coefficient batch norm is not supported.
  arrange(weights, grid): normalised E → the recorded (B, H, *S, *keys).
  linear: out = (1/N) Σ_j E_ij v_j over the N grid positions at scale 1 (no
    softmax), so the batch norm keeps β and a running mean.
  scaled: the own normalisation includes D^−1/2 (softmax of D^−1/2·E, or
    D^−1/2·E/N); else E/N.
  variables(layer, head_dim, spatial_shape, siamese_w, rngs): the operator's
    own {attribute: nnx.Variable}.
  """
  attend: Callable
  coefficients: Callable
  moments: Callable | None
  arrange: Callable = _on_grid
  linear: bool = False
  scaled: bool = True
  variables: Callable = _no_variables


def _dot_product(operands, attend, **fields) -> Operator:
  """An Operator whose E = queries·keysᵀ, (queries, keys) = operands(layer, q, k), (B, N, H, D)."""
  return Operator(attend, lambda layer, q, k: _logits(*operands(layer, q, k)),
                  lambda layer, q, k: dot_moments(*operands(layer, q, k)), **fields)


def _grid(layer, q, k):
  return _flat(q), _flat(k)


def _pooled(layer, q, k):
  return _flat(q), ops.pool_keys_values(k, k)[0]


def _pooled_attend(layer, q, k, v, scale):
  k, v = ops.pool_keys_values(k, v)
  return layer.attention_fn(_flat(q), k, v, scale=scale, query_chunk_size=_chunk(layer))


def _siamese_w(layer, dtype):
  return layer.w[...].astype(dtype)


def _siamese_attend(layer, q, k, v, scale):  # 1/N is built in: scale is unused
  return ops.siamese_attention(_flat(q), _flat(k), _flat(v), _siamese_w(layer, q.dtype),
                               global_term=layer.global_term)


def _siamese_coefficients(layer, q, k):
  """E_ij = a_i + b_j with a = qᵀw, b = kᵀw (SAO Eq. 5); without the global term E_ij = a_i."""
  w = _siamese_w(layer, q.dtype)
  a = jnp.einsum("bnhd,hd->bhn", _flat(q), w)
  if not layer.global_term:
    return jnp.broadcast_to(a[..., :, None], (*a.shape, a.shape[-1]))
  return a[..., :, None] + jnp.einsum("bnhd,hd->bhn", _flat(k), w)[..., None, :]


def _siamese_moments(layer, q, k):
  w = _siamese_w(layer, q.dtype)
  return sum_moments(jnp.einsum("bnhd,hd->bnh", _flat(q), w),
                     jnp.einsum("bnhd,hd->bnh", _flat(k), w) if layer.global_term else None)


def _siamese_variables(layer, *, head_dim, siamese_w, **options):
  """w (H, D), ones: trained, or fixed (siamese_w="ones", SAO Table 8)."""
  ones = jnp.ones((layer.num_heads, head_dim))
  return {"w": nnx.Param(ones) if siamese_w == "learned" else nnx.Variable(ones)}


def _kronecker_qkv_arrange(summary, grid):
  """Query x gets Σ_mode o_mode[x_mode] (KAO Eq. 3): the sum of its summaries' rows."""
  weights, offset = 0.0, 0
  for mode, size in enumerate(grid):
    shape = [1] * len(grid)
    shape[mode] = size
    rows = summary[:, :, offset:offset + size]
    weights = weights + rows.reshape(*rows.shape[:2], *shape, rows.shape[-1])
    offset += size
  return jnp.broadcast_to(weights, (*summary.shape[:2], *grid, summary.shape[-1]))


def _relative_attend(layer, q, k, v, scale):
  if q.ndim != 5:
    raise ValueError(f"operator='relative' needs a 2D grid (B, X, Y, C), got the grid "
                     f"{q.shape[1:-2]}")
  return ops.relative_attention_2d(
      q, k, v, layer.rel_h[...].astype(q.dtype), layer.rel_w[...].astype(q.dtype),
      query_chunk_size=layer.query_chunk_size)


def _relative_coefficients(layer, q, k):
  """Content logits plus the height and width relative logits (AA Eq. 3)."""
  e = _logits(_flat(q), _flat(k))
  lh, lw = ops.relative_logits_2d(q, layer.rel_h[...], layer.rel_w[...])
  return e + (lh[..., :, None] + lw[..., None, :]).reshape(e.shape)


def _relative_variables(layer, *, head_dim, spatial_shape, rngs, **options):
  """(2L−1, D) tables per spatial axis, N(0, D^−1/2), shared by the heads (AA)."""
  if spatial_shape is None or len(spatial_shape) != 2:
    raise ValueError(
        f"spatial_shape must be the (height, width) grid for operator='relative', "
        f"got {spatial_shape}")
  init = nnx.initializers.normal(head_dim**-0.5)
  return {"rel_h": nnx.Param(init(rngs.params(), (2 * spatial_shape[0] - 1, head_dim))),
          "rel_w": nnx.Param(init(rngs.params(), (2 * spatial_shape[1] - 1, head_dim)))}


# The one operator table: adding an operator is ops/<op>.py, an entry here and its test.
OPERATORS = {
    "softmax": _dot_product(
        _grid,
        lambda layer, q, k, v, scale: layer.attention_fn(
            _flat(q), _flat(k), _flat(v), scale=scale, query_chunk_size=_chunk(layer))),
    "softmax_pool": _dot_product(  # keys and values average-pooled 2×2
        _pooled, _pooled_attend,
        arrange=lambda w, grid: w.reshape(*w.shape[:2], *grid, *(-(-s // 2) for s in grid))),
    "mean": _dot_product(
        _grid,
        lambda layer, q, k, v, scale: ops.dot_product_attention(
            _flat(q), _flat(k), _flat(v), scale=scale, normalization="mean"),
        linear=True),
    "siamese": Operator(
        _siamese_attend, _siamese_coefficients, _siamese_moments, linear=True, scaled=False,
        variables=_siamese_variables),
    "kronecker_kv": _dot_product(  # grid queries against the ΣS summary tokens of k
        lambda layer, q, k: (_flat(q), _summary(k)),
        lambda layer, q, k, v, scale: ops.kronecker_attention_kv(q, k, v, scale=scale),
        arrange=lambda w, grid: w.reshape(*w.shape[:2], *grid, w.shape[-1])),
    "kronecker_qkv": _dot_product(
        lambda layer, q, k: (_summary(q), _summary(k)),
        lambda layer, q, k, v, scale: ops.kronecker_attention_qkv(q, k, v, scale=scale),
        arrange=_kronecker_qkv_arrange),
    "relative": Operator(_relative_attend, _relative_coefficients, None,
                         variables=_relative_variables),
}
PROJECTIONS = ("v", "qkv")
COEFFICIENTS = ("scale", "batch_norm")


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

  Coefficients. `"scale"`: each operator's own normalisation (1/N for mean and
  siamese, softmax of D^−1/2-scaled logits otherwise). `"batch_norm"`: batch
  normalisation of the coefficient matrix E, as the SAO appendix ("batch
  normalization to replace the scaling by 1/N in SAOs") and the KAO appendix
  ("batch normalization on the coefficient matrices in KAOs") do, with one
  γ (init 1), β (init 0) and running mean/variance per head, statistics over
  (batch, i, j) in training and running averages in evaluation (`eval()`).
  E (Nq×Nk) is never formed:
  - "siamese" (SAO Eq. 5-6): E_ij = a_i + b_j with a = qᵀw, b = kᵀw, so
    Σ_j v_j·BN(E_ij) = (γ/σ)·N·siamese_attention + (β − γμ/σ)·Σ_j v_j, with μ
    and σ² from the moments of a and b in O(N) (`sum_moments`); with
    global_term=False, E_ij = a_i.
  - "mean": E = q·kᵀ; the same identity with the 1/N operator at scale 1, μ
    and σ² from the covariances of q and k in O(N·D²) (`dot_moments`).
  - softmax operators: BN is applied to the logits E = q·kᵀ (no D^−1/2) before
    the softmax; with per-head scalars μ and β cancel, so this is the softmax
    of (γ/σ)·E, computed by scaling q per head and calling the operator with
    scale 1. σ² is that of the logit matrix the operator forms: q against the
    2×2-pooled keys ("softmax_pool"), the grid against the Kronecker summaries
    of k ("kronecker_kv") or the summaries of q against those of k
    ("kronecker_qkv"). We use `dot_moments` for all of them, the KAO summary
    matrices included: one exact code path, O((Nq+Nk)·D²), which is below the
    O(Nq·Nk·D) of forming the matrix whenever D ≤ Nq·Nk/(Nq+Nk) (e.g. KANet's
    28² KAO_QKV: (56+56)·8² against 56²·8 per head). Softmax operators hold no β
    and no running mean (they cancel).
  Choices the papers leave open: per-head (not per-layer) statistics; BN
  replaces the softmax's D^−1/2 as well as SAO's 1/N; statistics are not
  stop-gradient'ed in training (as flax BatchNorm); "relative" is not
  supported (its logits include the relative terms).

  Each operator's `ops` call, coefficient matrix, moments, variables and
  recorded layout come from its `OPERATORS` entry (an `Operator`); the layer
  around them is the same for all.

  With `record_attention` on (`recording.attention_weights`), sows the weights
  (B, H, *S, *key grid) by which v enters the output before the output map:
  the softmax rows (pooled key grid for "softmax_pool"), the coefficients
  c_ij of "mean" and "siamese" (1/N-scaled or batch-normalised, shift
  included), and for KAO each grid query's weights over the ΣS summary tokens
  (B, H, *S, ΣS) (for "kronecker_qkv" the sum of its summaries' rows, Eq. 3).

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
    coefficients: "scale" or "batch_norm" (see above).
    bn_momentum, bn_epsilon: running-average momentum and variance floor of
      the coefficient batch norm (flax BatchNorm conventions).
    query_chunk_size: queries per chunk for the quadratic operators ("softmax",
      "softmax_pool", "relative"), so their (N, N) logits never exist at once
      (e.g. U-Net + Attn at full resolution); None: all queries at once.
      "auto" (default): "relative" picks its query blocks from the sizes
      (`ops.relative_attention_2d`); the softmax operators take all queries at once.
    dtype: compute dtype (parameters stay float32; statistics float32).
    attention_fn: the softmax operators' attention, called as `ops.dot_product_attention`
      (a fused kernel's, e.g. experiments/efficiency_fused.py).
  """

  def __init__(self, in_features: int, operator: str, *, num_heads: int = 1,
               project: str = "v", key_features: int | None = None,
               value_features: int | None = None, out_features: int | None = None,
               spatial_shape: tuple[int, ...] | None = None, use_bias: bool = True,
               siamese_w: str = "learned", global_term: bool = True,
               coefficients: str = "scale", bn_momentum: float = 0.99, bn_epsilon: float = 1e-5,
               query_chunk_size: int | str | None = "auto", dtype=None,
               attention_fn=ops.dot_product_attention, rngs: nnx.Rngs):
    if operator not in OPERATORS:
      raise ValueError(f"operator must be one of {tuple(OPERATORS)}, got {operator!r}")
    if project not in PROJECTIONS:
      raise ValueError(f"project must be one of {PROJECTIONS}, got {project!r}")
    if coefficients not in COEFFICIENTS:
      raise ValueError(f"coefficients must be one of {COEFFICIENTS}, got {coefficients!r}")
    spec = OPERATORS[operator]
    if coefficients == "batch_norm" and spec.moments is None:
      raise ValueError(
          f"coefficients must be 'scale' for operator={operator!r}, got 'batch_norm'")
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
    if isinstance(query_chunk_size, str) and query_chunk_size != "auto":
      raise ValueError(
          f"query_chunk_size must be 'auto', None or a positive int, got {query_chunk_size!r}")
    self.operator, self.num_heads, self.dtype = operator, num_heads, dtype
    self.global_term, self.coefficients = global_term, coefficients
    self.query_chunk_size = query_chunk_size
    self.attention_fn = attention_fn  # softmax attention: ops' or a fused kernel's
    self.record_attention = False  # see `recording`
    dense = lambda i, o: nnx.Linear(i, o, use_bias=use_bias, dtype=dtype, rngs=rngs)
    self.query = dense(in_features, key_features) if project == "qkv" else None
    self.key = dense(in_features, key_features) if project == "qkv" else None
    self.value = dense(in_features, value_features)
    self.out = dense(value_features, out_features) if out_features else None
    variables = spec.variables(self, head_dim=key_features // num_heads,
                               spatial_shape=spatial_shape, siamese_w=siamese_w, rngs=rngs)
    for name, variable in variables.items():
      setattr(self, name, variable)
    if coefficients == "batch_norm":
      self.bn_momentum, self.bn_epsilon = bn_momentum, bn_epsilon
      self.use_running_average = False
      self.coef_scale = nnx.Param(jnp.ones((num_heads,)))
      self.coef_var = nnx.BatchStat(jnp.ones((num_heads,)))
      if spec.linear:
        self.coef_bias = nnx.Param(jnp.zeros((num_heads,)))
        self.coef_mean = nnx.BatchStat(jnp.zeros((num_heads,)))

  def _heads(self, x):
    return x.reshape(*x.shape[:-1], self.num_heads, x.shape[-1] // self.num_heads)

  def _normalizer(self, moments, linear):
    """(γ/σ, μ) per head: from `moments()` (batch, updating the running averages) or running."""
    if self.use_running_average:
      mean, var = (self.coef_mean[...] if linear else None), self.coef_var[...]
    else:
      mean, var = moments()
      m = self.bn_momentum
      self.coef_var[...] = m * self.coef_var[...] + (1 - m) * jax.lax.stop_gradient(var)
      if linear:
        self.coef_mean[...] = m * self.coef_mean[...] + (1 - m) * jax.lax.stop_gradient(mean)
    return self.coef_scale[...] * jax.lax.rsqrt(var + self.bn_epsilon), mean

  def _weights(self, spec, q, k, gain, shift):
    """Float32 weights with out = Σ_keys weights·v per head (see `recording`), from the
    un-normalised q, k (B, *S, H, D) and the coefficient batch norm's gain and shift."""
    q, k = q.astype(jnp.float32), k.astype(jnp.float32)
    per_head = lambda s: s[None, :, None, None]  # (H,) onto (B, H, Nq, Nk)
    e = spec.coefficients(self, q, k)
    if gain is not None:
      scale = per_head(gain)
    else:
      scale = q.shape[-1] ** -0.5 if spec.scaled else 1.0
    if not spec.linear:
      weights = jax.nn.softmax(scale * e, axis=-1)
    elif gain is None:
      weights = scale * e / e.shape[-1]
    else:
      weights = scale * e + per_head(shift)
    return spec.arrange(weights, q.shape[1:-2])

  def __call__(self, x):
    if x.ndim < 3:
      raise ValueError(f"x must have shape (batch, *spatial, channels), got {x.shape}")
    if self.dtype is not None:
      x = x.astype(self.dtype)
    q = self._heads(self.query(x) if self.query else x)
    k = self._heads(self.key(x) if self.key else x)
    v = self._heads(self.value(x))
    spec = OPERATORS[self.operator]
    gain = shift = None  # the coefficient batch norm's per-head γ/σ and β − γμ/σ
    if self.coefficients == "batch_norm":
      gain, mean = self._normalizer(lambda: spec.moments(self, q, k), spec.linear)
    if gain is None:
      out = spec.attend(self, q, k, v, None)
    elif not spec.linear:  # softmax of (γ/σ)·E: μ and β cancel
      out = spec.attend(self, q * gain[:, None].astype(q.dtype), k, v, 1.0)
    else:  # Σ_j v_j·BN(E_ij) = (γ/σ)·N·(1/N Σ_j E_ij v_j) + (β − γμ/σ)·Σ_j v_j
      shift = self.coef_bias[...] - gain * mean
      vf = _flat(v)
      v_sum = jnp.sum(vf, axis=1, dtype=jnp.float32)  # (B, H, Dv)
      out = (spec.attend(self, q, k, v, 1.0) * (vf.shape[1] * gain)[:, None]
             + shift[:, None] * v_sum[:, None]).astype(vf.dtype)
    recording.sow_if_recording(self, recording.WEIGHTS,
                               lambda: self._weights(spec, q, k, gain, shift))
    out = out.reshape(*x.shape[:-1], math.prod(out.shape[-2:]))
    return self.out(out) if self.out else out
