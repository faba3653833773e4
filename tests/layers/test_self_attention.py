import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.test_util import check_grads

from attention_lab import ops
from attention_lab.layers import recording
from attention_lab.layers.self_attention import SelfAttention, SpectralNorm


def _float64(module):
  nnx.update(module, jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), nnx.state(module)))
  return module


def _kernel(layer):
  return np.asarray(layer.kernel[...])


def _max_pool_loops(t, p):
  """(B, H, W, D) → (B, H/p, W/p, D): the maximum of each p×p window, by loops."""
  b, h, w, d = t.shape
  out = np.empty((b, h // p, w // p, d))
  for i in range(h // p):
    for j in range(w // p):
      out[:, i, j] = t[:, i * p:(i + 1) * p, j * p:(j + 1) * p].reshape(b, -1, d).max(1)
  return out


def _naive(x, layer, variant, pool=1):
  """Explicit N×N matrices in numpy float64: SAGAN Eq. 1-2 or Refined-SA Eq. 3; with
  pool > 1, keys f and values h max-pooled pool×pool first (the official SAGAN code)."""
  b, c = x.shape[0], x.shape[-1]
  x64 = np.asarray(x)
  flat = x64.reshape(b, -1, c)
  g = flat @ _kernel(layer.g)
  f, h = (x64 @ _kernel(m) for m in (layer.f, layer.h))
  if pool > 1:
    f, h = _max_pool_loops(f, pool), _max_pool_loops(h, pool)
  f, h = f.reshape(b, -1, f.shape[-1]), h.reshape(b, -1, h.shape[-1])
  logits = g @ f.transpose(0, 2, 1)                   # s[j, i] = g(x_j)·f(x_i), (B, N, N/p²)
  if variant == "sa":
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)         # softmax over i, no 1/sqrt(d)
  else:
    weights = logits / f.shape[1]                     # (z yᵀ)/N over the keys
  return np.asarray(x) + float(layer.gamma[...]) * (weights @ h).reshape(x.shape)


@pytest.mark.parametrize("variant,spatial", [("sa", (5, 7)), ("refined", (5, 7)),
                                             ("sa", (11,)), ("refined", (2, 3, 4))])
def test_matches_the_naive_float64_reference(variant, spatial):
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(0), (2, *spatial, 16), jnp.float64)
    layer = _float64(SelfAttention(16, variant=variant, rngs=nnx.Rngs(0)))
    assert layer.f.kernel.shape == layer.g.kernel.shape == (16, 2)  # C/8
    assert layer.h.kernel.shape == (16, 16)
    np.testing.assert_array_equal(layer(x), x)  # γ = 0 at init: the identity
    layer.gamma[...] = 0.7
    y = layer(x)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, _naive(x, layer, variant), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant,spatial,pool", [("sa", (4, 6), 2), ("refined", (6, 9), 3),
                                                  ("sa", (2, 2), 2)])
def test_pooled_keys_match_the_naive_float64_reference(variant, spatial, pool):
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(3), (2, *spatial, 16), jnp.float64)
    layer = _float64(SelfAttention(16, variant=variant, key_pool=pool, rngs=nnx.Rngs(0)))
    layer.gamma[...] = 0.7
    expected = _naive(x, layer, variant, pool)
    np.testing.assert_allclose(layer(x), expected, rtol=1e-12, atol=1e-12)
    assert np.abs(expected - _naive(x, layer, variant)).max() > 1e-3  # pooling matters here
    _, recorded = recording.attention_weights(layer, x)
    (weights,), = recorded["model"].values()
    assert weights.shape == (2, 1, *spatial, spatial[0] // pool, spatial[1] // pool)


def _shapes(jaxpr):
  """Shapes of every intermediate of a jaxpr, nested jaxprs (pjit, custom_jvp) included."""
  for eqn in jaxpr.eqns:
    yield from (v.aval.shape for v in eqn.outvars)
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          yield from _shapes(sub.jaxpr)
        elif isinstance(sub, jax.extend.core.Jaxpr):
          yield from _shapes(sub)


def test_refined_never_forms_the_n_by_n_matrix():
  x = jnp.ones((1, 5, 7, 16))
  n = 35
  for variant, expect_nn in (("sa", True), ("refined", False)):
    layer = SelfAttention(16, variant=variant, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(layer)
    jaxpr = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, x).jaxpr
    assert any(s[-2:] == (n, n) for s in _shapes(jaxpr)) == expect_nn


def test_value_features_add_the_output_map():
  layer = SelfAttention(16, value_features=8, rngs=nnx.Rngs(0))
  assert layer.h.kernel.shape == (16, 8) and layer.v.kernel.shape == (8, 16)
  layer.gamma[...] = 1.0
  x = jax.random.normal(jax.random.key(1), (2, 3, 5, 16))
  flat = lambda t: t.reshape(2, 15, 1, -1)
  attn = ops.dot_product_attention(flat(layer.g(x)), flat(layer.f(x)), flat(layer.h(x)),
                                   scale=1.0).reshape(2, 3, 5, 8)
  np.testing.assert_allclose(layer(x), x + layer.v(attn), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant,spectral_norm,pool", [("sa", False, 1), ("refined", False, 1),
                                                         ("sa", True, 1), ("sa", False, 2)])
def test_check_grads_float64(variant, spectral_norm, pool):
  """Second order without spectral norm; first order with it, u at the top singular vector.

  Spectral norm treats u and v as constants (as the official code does), which
  is the exact first derivative only where u has converged.
  """
  with jax.enable_x64(True):
    layer = _float64(SelfAttention(8, variant=variant, spectral_norm=spectral_norm,
                                   key_pool=pool, rngs=nnx.Rngs(0)))
    layer.gamma[...] = 0.5
    if spectral_norm:
      for sn in (layer.f, layer.g, layer.h):
        sn.u[...] = np.linalg.svd(np.asarray(sn.layer.kernel[...]))[2][0]
    graphdef, state = nnx.split(layer)
    params, rest = nnx.split_state(state, nnx.Param, ...)

    def fn(params, x):  # pure: every call merges a copy of the same state
      return nnx.merge(graphdef, params, rest, copy=True)(x)

    x = jax.random.normal(jax.random.key(2), (1, 4 if pool > 1 else 3, 4, 8), jnp.float64)
    check_grads(jax.jit(fn), (params, x), order=1 if spectral_norm else 2, modes=("rev",),
                atol=1e-5, rtol=1e-5)


def test_spectral_norm_keeps_the_weight_and_estimates_sigma():
  conv = nnx.Conv(3, 5, (3, 3), rngs=nnx.Rngs(0))
  kernel = np.asarray(conv.kernel[...])
  layer = SpectralNorm(conv, n_steps=1, rngs=nnx.Rngs(1))
  x = jnp.ones((1, 4, 4, 3))
  step = nnx.jit(lambda m, x: m(x))
  for _ in range(30):  # power iteration converges across training calls
    step(layer, x)
  np.testing.assert_array_equal(conv.kernel[...], kernel)  # never overwritten
  sigma = np.linalg.norm(kernel.reshape(-1, 5), 2)
  np.testing.assert_allclose(layer.normalized_weight(), kernel / sigma, rtol=1e-3)
  normalized = nnx.Conv(3, 5, (3, 3), rngs=nnx.Rngs(0))
  normalized.kernel[...] = kernel / sigma
  np.testing.assert_allclose(layer(x), normalized(x), rtol=1e-3, atol=1e-5)


def test_spectral_norm_updates_u_in_training_only():
  layer = SelfAttention(16, spectral_norm=True, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(0), (2, 3, 5, 16))
  u = np.asarray(layer.f.u[...])
  layer(x)
  assert not np.allclose(layer.f.u[...], u)  # training stores the power-iteration vector
  layer.eval()
  u = np.asarray(layer.f.u[...])
  first = layer(x)
  np.testing.assert_array_equal(layer.f.u[...], u)
  np.testing.assert_array_equal(layer(x), first)  # evaluation is repeatable


def test_bad_arguments():
  with pytest.raises(ValueError, match="variant must be one of"):
    SelfAttention(8, variant="linear", rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="in_features must be >= 1"):
    SelfAttention(0, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="value_features must be >= 1"):
    SelfAttention(8, value_features=0, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r"x must have shape \(batch, \*spatial, channels\)"):
    SelfAttention(8, rngs=nnx.Rngs(0))(jnp.ones((2, 8)))
  with pytest.raises(ValueError, match="key_pool must be >= 1"):
    SelfAttention(8, key_pool=0, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="key_pool=2 needs x of shape .* divisible by 2"):
    SelfAttention(8, key_pool=2, rngs=nnx.Rngs(0))(jnp.ones((2, 4, 5, 8)))
  with pytest.raises(ValueError, match="key_pool=2 needs x of shape"):
    SelfAttention(8, key_pool=2, rngs=nnx.Rngs(0))(jnp.ones((2, 4, 8)))
  with pytest.raises(ValueError, match="param must name a parameter"):
    SpectralNorm(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), param="bias", rngs=nnx.Rngs(0))
