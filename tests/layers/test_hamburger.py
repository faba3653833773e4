import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers.hamburger import INITS, Hamburger


@pytest.mark.parametrize("ham", ["nmf", "vq", "cd"])
def test_shapes_gradients_and_non_negative_output(ham):
  x = jax.random.normal(jax.random.key(0), (2, 9, 13, 8))
  layer = Hamburger(8, ham=ham, dim=16, rank=4, train_steps=3, eval_steps=4,
                    temperature=0.1, rngs=nnx.Rngs(0))
  y = layer(x)
  assert y.shape == x.shape and np.all(np.asarray(y) >= 0)  # ReLU(x + ·)
  grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) ** 2)))(layer)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_training_draws_new_bases_and_evaluation_is_deterministic():
  x = jax.random.normal(jax.random.key(0), (2, 5, 7, 8))
  layer = Hamburger(8, dim=16, rank=4, rngs=nnx.Rngs(0))
  assert not np.allclose(layer(x), layer(x))  # fresh random bases per training call
  layer.eval()
  first = layer(x)
  np.testing.assert_array_equal(first, layer(x))
  jitted = nnx.jit(lambda m, x: m(x))
  np.testing.assert_array_equal(jitted(layer, x), jitted(layer, x))
  np.testing.assert_allclose(jitted(layer, x), first, rtol=1e-4, atol=1e-5)  # XLA fusion rounding


def _group_loop(layer, x, steps):
  """S independent NMF problems on the channel slices, from the layer's (S, d', R) bases.

  Returns the (B, H, W, d) reconstruction and the batch-mean solved bases (S, d', R).
  """
  y = jax.nn.relu(layer.lower(x))
  b, h, w, d = y.shape
  width = d // layer.groups
  recon, solved = [], []
  for g in range(layer.groups):
    tokens = y[..., g * width:(g + 1) * width].reshape(b, h * w, width)
    start = jnp.broadcast_to(layer.bases[...][g], (b, width, layer.rank))
    bases, codes = ops.nmf(tokens, start, steps=steps)
    recon.append((codes @ jnp.swapaxes(bases, 1, 2)).reshape(b, h, w, width))
    solved.append(jnp.mean(bases, axis=0))
  return jnp.concatenate(recon, axis=-1), jnp.stack(solved)


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("training", [False, True])
def test_layer_is_the_upper_bread_of_the_groups_reconstruction(groups, training):
  """Upper conv on the factors = conv of the per-group reconstruction, values and gradients."""
  x = jax.random.normal(jax.random.key(1), (2, 4, 5, 6))
  layer = Hamburger(6, dim=12, rank=3, groups=groups, init="fixed", train_steps=3,
                    eval_steps=3, rngs=nnx.Rngs(0))
  assert layer.bases.shape == (groups, 12 // groups, 3)
  if not training:
    layer.eval()

  def reference(layer, x):
    recon, _ = _group_loop(layer, x, steps=3)
    return jax.nn.relu(x + layer.norm(layer.upper(recon)))

  loss = lambda f: lambda m, x: jnp.sum(jnp.sin(f(m, x)))
  layer_fn = lambda m, x: m(x)
  with jax.enable_x64(True):
    x = x.astype(jnp.float64)
    cast = lambda m: jax.tree.map(lambda a: a.astype(jnp.float64), nnx.clone(m))
    np.testing.assert_allclose(layer_fn(cast(layer), x), reference(cast(layer), x),
                               rtol=1e-10, atol=1e-10)
    got = nnx.grad(loss(layer_fn), argnums=(0, 1))(cast(layer), x)
    want = nnx.grad(loss(reference), argnums=(0, 1))(cast(layer), x)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("init", INITS)
def test_every_initialisation_trains_and_evaluates_deterministically(init):
  x = jax.random.normal(jax.random.key(2), (2, 4, 5, 8))
  layer = Hamburger(8, dim=8, rank=2, groups=2, init=init, train_steps=2,
                    eval_steps=3, rngs=nnx.Rngs(0))
  y = layer(x)
  assert y.shape == x.shape and np.all(np.isfinite(y))
  layer.eval()
  first = layer(x)
  np.testing.assert_array_equal(first, layer(x))


def test_fixed_bases_are_drawn_once():
  x = jax.random.normal(jax.random.key(3), (2, 4, 5, 8))
  layer = Hamburger(8, dim=8, rank=2, init="fixed", train_steps=2, rngs=nnx.Rngs(0))
  bases = np.asarray(layer.bases[...])
  np.testing.assert_array_equal(layer(x), layer(x))  # same bases, so same output in training
  np.testing.assert_array_equal(layer.bases[...], bases)
  assert not nnx.state(layer, nnx.Param).get("bases")
  other = Hamburger(8, dim=8, rank=2, init="fixed", rngs=nnx.Rngs(1))
  assert not np.allclose(other.bases[...], bases)


def test_learned_bases_are_parameters_with_gradient():
  x = jax.random.normal(jax.random.key(4), (2, 4, 5, 8))
  layer = Hamburger(8, dim=8, rank=2, init="learned", train_steps=2, rngs=nnx.Rngs(0))
  assert layer.gradient == "bptt" and isinstance(layer.bases, nnx.Param)
  grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) ** 2)))(layer)
  assert np.all(np.isfinite(grads.bases[...])) and np.any(np.abs(grads.bases[...]) > 0)


def test_online_bases_follow_the_moving_average_in_training_only():
  x = jax.random.normal(jax.random.key(5), (2, 4, 5, 6))
  layer = Hamburger(6, dim=6, rank=2, groups=2, init="online", train_steps=2, eval_steps=3,
                    online_momentum=0.9, rngs=nnx.Rngs(0))
  old = layer.bases[...]
  _, solved = _group_loop(layer, x, steps=2)
  layer(x)
  new = old + 0.9 * (solved - old)
  new = new / jnp.linalg.norm(new, axis=1, keepdims=True)
  np.testing.assert_allclose(layer.bases[...], new, rtol=1e-5, atol=1e-6)
  layer.eval()
  trained = np.asarray(layer.bases[...])
  layer(x)
  np.testing.assert_array_equal(layer.bases[...], trained)


@pytest.mark.parametrize("kwargs,match", [
    (dict(ham="svd"), "ham must be one of"),
    (dict(init="zeros"), "init must be one of"),
    (dict(dim=8, groups=3), "groups must be a positive integer dividing dim"),
    (dict(init="learned", gradient="one_step"), "gradient must be 'bptt'"),
])
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    Hamburger(8, rngs=nnx.Rngs(0), **kwargs)
