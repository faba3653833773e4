import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.layers import Hamburger


@pytest.mark.parametrize("ham", ["nmf", "vq", "cd"])
def test_shapes_gradients_and_non_negative_output(ham):
  x = jax.random.normal(jax.random.key(0), (2, 9, 13, 8))
  layer = Hamburger(8, ham=ham, dim=16, rank=4, train_steps=3, eval_steps=4,
                    temperature=0.1, rngs=nnx.Rngs(0))
  y = layer(x)
  assert y.shape == x.shape and np.all(np.asarray(y) >= 0)  # ReLU(x + ·)
  grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
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


def test_bad_ham():
  with pytest.raises(ValueError, match="ham must be one of"):
    Hamburger(8, ham="svd", rngs=nnx.Rngs(0))
