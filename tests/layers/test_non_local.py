import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.layers.non_local import NonLocal
from tests.ops import references


def test_starts_as_the_identity():
  x = jax.random.normal(jax.random.key(0), (2, 5, 7, 8))
  layer = NonLocal(8, rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(layer(x), x)  # BN γ = 0 (Sec. 4.1)
  layer.eval()
  np.testing.assert_array_equal(layer(x), x)


def _max_pool_2x2(t):
  """Loop max-pool of (B, X, Y, C), window and stride 2, partial edge windows kept."""
  b, nx, ny, c = t.shape
  out = np.full((b, -(-nx // 2), -(-ny // 2), c), -np.inf)
  for i in range(nx):
    for j in range(ny):
      out[:, i // 2, j // 2] = np.maximum(out[:, i // 2, j // 2], t[:, i, j])
  return out


@pytest.mark.parametrize("subsample", [False, True])
def test_matches_an_explicit_softmax_over_all_positions(subsample):
  x = jax.random.normal(jax.random.key(1), (2, 5, 7, 8))
  layer = NonLocal(8, inner_features=6, subsample=subsample, rngs=nnx.Rngs(0))
  layer.norm.scale[...] = jax.random.normal(jax.random.key(2), (8,))
  layer.norm.bias[...] = jax.random.normal(jax.random.key(3), (8,))
  layer.eval()
  f64 = lambda t: np.asarray(t, np.float64)
  linear = lambda m, t: t @ f64(m.kernel[...]) + f64(m.bias[...])
  xs = f64(x)
  theta, phi, g = (linear(m, xs) for m in (layer.theta, layer.phi, layer.g))
  if subsample:
    phi, g = _max_pool_2x2(phi), _max_pool_2x2(g)
  theta, phi, g = (t.reshape(2, -1, 6) for t in (theta, phi, g))
  weights = references.softmax(np.einsum("bid,bjd->bij", theta, phi))  # N×N, no 1/√d
  z = linear(layer.out, np.einsum("bij,bjd->bid", weights, g)).reshape(2, 5, 7, 8)
  norm = layer.norm
  z = (z - f64(norm.mean[...])) / np.sqrt(f64(norm.var[...]) + norm.epsilon)
  expected = xs + z * f64(norm.scale[...]) + f64(norm.bias[...])
  np.testing.assert_allclose(layer(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,subsample", [((2, 3, 4, 5, 8), False), ((2, 3, 4, 5, 8), True),
                                             ((2, 9, 8), True)])
def test_volumes_and_sequences(shape, subsample):
  x = jax.random.normal(jax.random.key(4), shape)
  layer = NonLocal(8, subsample=subsample, rngs=nnx.Rngs(0))
  layer.norm.scale[...] = jnp.ones((8,))
  y = layer(x)
  assert y.shape == shape and np.all(np.isfinite(y)) and not np.allclose(y, x)


def test_bad_arguments():
  with pytest.raises(ValueError, match="inner_features must be a positive integer"):
    NonLocal(1, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="x must have shape"):
    NonLocal(8, rngs=nnx.Rngs(0))(jnp.ones((2, 8)))
