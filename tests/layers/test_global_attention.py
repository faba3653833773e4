import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers import GlobalAttention
from attention_lab.layers.global_attention import (
    OPERATORS,
    dot_moments,
    sum_moments,
)
from tests.ops import references

LINEAR_OPERATORS = [op for op, spec in OPERATORS.items() if spec.linear]


def _dense(linear, x):
  """A Linear's map in float64: x·W + b."""
  out = x @ np.asarray(linear.kernel[...], np.float64)
  return out if linear.bias is None else out + np.asarray(linear.bias[...], np.float64)


def _naive_attention(layer, x):
  """float64 reference of a "scale" layer: its own projections (q = k = x unless projected),
  heads, the operator's loop reference from tests/ops at the operator's own normalisation
  (D^-1/2, and 1/N for mean and siamese), then the output map."""
  x = np.asarray(x, np.float64)
  b, grid = x.shape[0], x.shape[1:-1]
  heads = lambda t: t.reshape(b, *grid, layer.num_heads, -1)
  flat = lambda t: t.reshape(b, -1, *t.shape[-2:])
  q = heads(_dense(layer.query, x) if layer.query else x)
  k = heads(_dense(layer.key, x) if layer.key else x)
  v = heads(_dense(layer.value, x))
  scale = q.shape[-1] ** -0.5
  f64 = lambda variable: np.asarray(variable[...], np.float64)
  out = {
      "softmax": lambda: references.attention(flat(q), flat(k), flat(v), scale),
      "softmax_pool": lambda: references.attention(
          flat(q), references.avg_pool_grid(k, 2), references.avg_pool_grid(v, 2), scale),
      "mean": lambda: references.attention(flat(q), flat(k), flat(v), scale,
                                           normalization="mean"),
      "siamese": lambda: references.siamese(flat(q), flat(k), flat(v), f64(layer.w),
                                            layer.global_term),
      "kronecker_kv": lambda: references.kronecker_kv(q, k, v, scale),
      "kronecker_qkv": lambda: references.kronecker_qkv(q, k, v, scale),
      "relative": lambda: references.relative_attention(q, k, v, f64(layer.rel_h),
                                                        f64(layer.rel_w), scale),
  }[layer.operator]().reshape(b, *grid, -1)
  return _dense(layer.out, out) if layer.out else out


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("project", ["v", "qkv"])
def test_every_operator_on_a_9x13_grid(operator, project):
  x = jax.random.normal(jax.random.key(0), (2, 9, 13, 8))
  layer = GlobalAttention(8, operator, num_heads=2, project=project, out_features=6,
                          spatial_shape=(9, 13), rngs=nnx.Rngs(0))
  if operator == "siamese":  # w away from its initial ones, so the heads differ
    layer.w[...] = jax.random.normal(jax.random.key(1), (2, 4))
  y = layer(x)
  assert y.dtype == jnp.float32
  np.testing.assert_allclose(y, _naive_attention(layer, x), rtol=1e-4, atol=1e-5)
  grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) ** 2)))(layer)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("operator", ["softmax", "softmax_pool", "relative"])
def test_query_chunks_give_the_unchunked_output(operator):
  """9×13 = 117 queries in chunks of 20 (not a divisor): same output as all at once."""
  x = jax.random.normal(jax.random.key(2), (2, 9, 13, 8))
  make = lambda chunk: GlobalAttention(8, operator, num_heads=2, project="qkv",
                                       spatial_shape=(9, 13), query_chunk_size=chunk,
                                       rngs=nnx.Rngs(0))
  chunked = make(20)
  full = make(None)(x)
  np.testing.assert_allclose(chunked(x), full, rtol=1e-5, atol=1e-6)
  assert "scan" in str(jax.make_jaxpr(lambda x: chunked(x))(x))  # queries loop in chunks
  np.testing.assert_allclose(make("auto")(x), full, rtol=1e-5, atol=1e-6)  # the default


def test_value_only_projection_matches_the_operator():
  """project='v': q = k = x, v = xW + b, then the operator, then no output map."""
  x = jax.random.normal(jax.random.key(1), (1, 5, 7, 4))
  layer = GlobalAttention(4, "siamese", num_heads=2, rngs=nnx.Rngs(0))
  v = layer.value(x)
  heads = lambda t: t.reshape(1, 35, 2, 2)
  expected = ops.siamese_attention(heads(x), heads(x), heads(v), layer.w[...])
  np.testing.assert_allclose(layer(x), expected.reshape(1, 5, 7, 4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("operator", ["softmax", "softmax_pool", "mean", "siamese",
                                      "kronecker_kv", "kronecker_qkv"])
def test_volumes_on_a_3x5x4_grid(operator):
  """3D grids (B, D, H, W, C), odd sizes (the 2×2×2 pooling keeps partial edges)."""
  x = jax.random.normal(jax.random.key(0), (2, 3, 5, 4, 6))
  layer = GlobalAttention(6, operator, num_heads=3, project="qkv", rngs=nnx.Rngs(0))
  np.testing.assert_allclose(layer(x), _naive_attention(layer, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("operator", ["siamese", "kronecker_kv"])
def test_batch_norm_gradients(operator):
  """γ (and for the linear operators β) are trained; every gradient is finite."""
  x = jax.random.normal(jax.random.key(0), (2, 5, 7, 8))
  layer = GlobalAttention(8, operator, num_heads=4, coefficients="batch_norm", rngs=nnx.Rngs(0))
  grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) ** 2)))(layer)
  assert np.all(np.abs(grads.coef_scale[...]) > 0)
  if operator in LINEAR_OPERATORS:
    assert np.all(np.abs(grads.coef_bias[...]) > 0)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_bfloat16_compute_keeps_float32_params():
  """bfloat16 activations, float32 parameters, and the float32 layer's output within
  bfloat16's rounding (8 significant bits)."""
  make = lambda dtype: GlobalAttention(8, "relative", num_heads=2, project="qkv",
                                       spatial_shape=(5, 7), dtype=dtype, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(7), (1, 5, 7, 8))
  layer = make(jnp.bfloat16)
  y = layer(x)
  assert y.dtype == jnp.bfloat16
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(layer, nnx.Param)))
  want = make(None)(x)
  np.testing.assert_allclose(np.asarray(y, np.float32), want, rtol=0,
                             atol=3e-2 * float(jnp.abs(want).max()))
  assert not np.array_equal(np.asarray(y, np.float32), want)  # it did round


@pytest.mark.parametrize("kwargs,match", [
    (dict(operator="linear"), "operator must be one of"),
    (dict(operator="softmax", project="qk"), "project must be one of"),
    (dict(operator="softmax", num_heads=3), "divisible by num_heads"),
    (dict(operator="softmax", key_features=4), "key_features must equal in_features"),
    (dict(operator="relative"), "spatial_shape"),
    (dict(operator="relative", spatial_shape=(5, 7), query_chunk_size="fast"),
     "query_chunk_size"),
    (dict(operator="softmax", coefficients="layer_norm"), "coefficients must be one of"),
    (dict(operator="relative", spatial_shape=(5, 7), coefficients="batch_norm"),
     "coefficients must be 'scale'"),
])
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    GlobalAttention(8, rngs=nnx.Rngs(0), **kwargs)


def _summary(t):
  """Kronecker summary of a multi-head grid (B, *S, H, D) → (B, ΣS, H, D): per mode, the mean
  over the other spatial axes."""
  spatial = range(1, t.ndim - 2)
  return np.concatenate(
      [t.mean(axis=tuple(a for a in spatial if a != mode)) for mode in spatial], axis=1)


def _naive_batch_norm_attention(layer, x, stats=None):
  """float64 reference: forms every coefficient matrix E and batch-normalises it explicitly.

  stats=None uses the (batch, i, j) mean/variance of E per head; else stats = (mean, var).
  Returns the output and the batch statistics.
  """
  op, b, grid = layer.operator, x.shape[0], x.shape[1:-1]
  f64 = lambda t: np.asarray(t, np.float64)
  heads = lambda t: f64(t).reshape(b, *grid, layer.num_heads, -1)
  q = heads(layer.query(x) if layer.query else x)
  k = heads(layer.key(x) if layer.key else x)
  v = heads(layer.value(x))
  flat = lambda t: t.reshape(b, -1, *t.shape[-2:])
  if op == "siamese":
    w = f64(layer.w[...])
    a = np.einsum("bnhd,hd->bhn", flat(q), w)
    c = np.einsum("bnhd,hd->bhn", flat(k), w) if layer.global_term else np.zeros_like(a)
    coef = a[..., :, None] + c[..., None, :]
    keys_v = flat(v)
  else:
    queries, keys, keys_v = {
        "softmax": (flat(q), flat(k), flat(v)),
        "mean": (flat(q), flat(k), flat(v)),
        "softmax_pool": (flat(q), references.avg_pool_grid(k, 2),
                         references.avg_pool_grid(v, 2)),
        "kronecker_kv": (flat(q), _summary(k), _summary(v)),
        "kronecker_qkv": (_summary(q), _summary(k), _summary(v)),
    }[op]
    coef = np.einsum("bihd,bjhd->bhij", queries, keys)
  batch = coef.mean(axis=(0, 2, 3)), coef.var(axis=(0, 2, 3))
  mean, var = batch if stats is None else stats
  bn = lambda t: t[None, :, None, None]
  gamma = f64(layer.coef_scale[...])
  beta = f64(layer.coef_bias[...]) if op in LINEAR_OPERATORS else np.full_like(gamma, 0.7)
  coef = bn(gamma) * (coef - bn(mean)) / np.sqrt(bn(var) + layer.bn_epsilon) + bn(beta)
  if op not in LINEAR_OPERATORS:  # β is a stand-in here: it must cancel in the softmax
    coef = references.softmax(coef)
  out = np.einsum("bhij,bjhe->bihe", coef, keys_v)
  if op == "kronecker_qkv":  # outer sum of the per-mode outputs (KAO Eq. 3)
    offsets = np.cumsum((0,) + grid)
    terms = [out[:, offsets[m]:offsets[m + 1]].reshape(
        b, *(size if i == m else 1 for i, size in enumerate(grid)), *out.shape[-2:])
             for m in range(len(grid))]
    out = sum(terms)
  return out.reshape(b, *grid, -1), batch


BN_OPERATORS = [op for op in OPERATORS if op != "relative"]


@pytest.mark.parametrize("grid", [(5, 7), (3, 5, 4)])
@pytest.mark.parametrize("operator", BN_OPERATORS)
def test_batch_norm_coefficients_match_explicit_coefficient_matrices(operator, grid):
  """SAO/KAO appendices: BN on E, per head; batch statistics in training, running in eval."""
  x = jax.random.normal(jax.random.key(2), (2, *grid, 8)) + 0.5
  layer = GlobalAttention(8, operator, num_heads=2, project="qkv", coefficients="batch_norm",
                          bn_momentum=0.9, rngs=nnx.Rngs(1))
  if operator == "siamese":
    layer.w[...] = jax.random.normal(jax.random.key(3), (2, 4))
  layer.coef_scale[...] = jnp.array([0.7, 1.6])
  if operator in LINEAR_OPERATORS:
    layer.coef_bias[...] = jnp.array([0.3, -0.5])
  expected, (mean, var) = _naive_batch_norm_attention(layer, x)
  np.testing.assert_allclose(layer(x), expected, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(layer.coef_var[...], 0.9 + 0.1 * var, rtol=1e-4)
  if operator in LINEAR_OPERATORS:
    np.testing.assert_allclose(layer.coef_mean[...], 0.1 * mean, rtol=1e-4, atol=1e-6)
  else:
    assert not hasattr(layer, "coef_bias") and not hasattr(layer, "coef_mean")
  layer.eval()
  stats = (np.asarray(layer.coef_mean[...]) if operator in LINEAR_OPERATORS else np.zeros(2),
           np.asarray(layer.coef_var[...]))
  before = [np.asarray(s) for s in jax.tree.leaves(nnx.state(layer, nnx.BatchStat))]
  expected, _ = _naive_batch_norm_attention(layer, x, stats)
  np.testing.assert_allclose(layer(x), expected, rtol=2e-4, atol=2e-4)
  after = jax.tree.leaves(nnx.state(layer, nnx.BatchStat))
  assert len(before) == len(after) and all(map(np.array_equal, before, after))


@pytest.mark.parametrize("global_term", [True, False])
def test_siamese_batch_norm_with_project_v(global_term):
  """The SANet setting: q = k = x, 4 heads, with and without the global term (SAO Table 6)."""
  x = jax.random.normal(jax.random.key(4), (2, 5, 7, 8))
  layer = GlobalAttention(8, "siamese", num_heads=4, coefficients="batch_norm",
                          global_term=global_term, rngs=nnx.Rngs(0))
  expected, _ = _naive_batch_norm_attention(layer, x)
  np.testing.assert_allclose(layer(x), expected, rtol=2e-4, atol=2e-4)


def test_moments_match_explicit_matrices():
  q = np.asarray(jax.random.normal(jax.random.key(5), (3, 6, 2, 4))) + 2.0
  k = np.asarray(jax.random.normal(jax.random.key(6), (3, 9, 2, 4))) - 1.0
  coef = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k)
  mean, var = dot_moments(q, k)
  np.testing.assert_allclose(mean, coef.mean(axis=(0, 2, 3)), rtol=1e-5)
  np.testing.assert_allclose(var, coef.var(axis=(0, 2, 3)), rtol=1e-4)
  a, c = q[..., 0] * 3.0, k[..., 1]
  total = a[:, :, None] + c[:, None, :]
  mean, var = sum_moments(a, c)
  np.testing.assert_allclose(mean, total.mean(axis=(0, 1, 2)), rtol=1e-5)
  np.testing.assert_allclose(var, total.var(axis=(0, 1, 2)), rtol=1e-4)


@pytest.mark.parametrize("operator, coefficients, expected", [
    ("softmax", "scale", {}),
    ("siamese", "scale", {"w": (2, 4)}),
    ("relative", "scale", {"rel_h": (9, 4), "rel_w": (13, 4)}),
    ("kronecker_qkv", "batch_norm", {"coef_scale": (2,), "coef_var": (2,)}),
    ("mean", "batch_norm", {"coef_scale": (2,), "coef_var": (2,), "coef_bias": (2,),
                            "coef_mean": (2,)}),
    ("siamese", "batch_norm", {"w": (2, 4), "coef_scale": (2,), "coef_var": (2,),
                               "coef_bias": (2,), "coef_mean": (2,)}),
])
def test_operator_variables_keep_their_names_and_shapes(operator, coefficients, expected):
  """Checkpoints and the model zoo's parameter counts read these paths."""
  layer = GlobalAttention(8, operator, num_heads=2, project="qkv", spatial_shape=(5, 7),
                          coefficients=coefficients, rngs=nnx.Rngs(0))
  shapes = {"/".join(map(str, path)): v.get_value().shape
            for path, v in nnx.to_flat_state(nnx.state(layer))}
  linears = {f"{m}/{p}" for m in ("query", "key", "value") for p in ("kernel", "bias")}
  assert set(shapes) == linears | set(expected)
  assert {name: shapes[name] for name in expected} == expected


def test_relative_needs_a_2d_grid():
  layer = GlobalAttention(4, "relative", num_heads=2, spatial_shape=(3, 5), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="needs a 2D grid"):
    layer(jnp.ones((1, 3, 5, 2, 4)))
