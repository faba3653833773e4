import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers import AugmentedConv
from attention_lab.layers.augmented_conv import POSITIONALS


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("stride,downsample", [(1, False), (2, False), (1, True)])
def test_shapes_on_odd_non_square_inputs(positional, stride, downsample):
  x = jax.random.normal(jax.random.key(0), (2, 9, 13, 6))
  layer = AugmentedConv(6, 16, 3, stride, kappa=0.5, upsilon=0.5, heads=2,
                        positional=positional, downsample=downsample, spatial_shape=(9, 13),
                        rngs=nnx.Rngs(0))
  y = layer(x)
  assert y.shape == (2, -(-9 // stride), -(-13 // stride), 16)
  grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_channel_split_and_attention_branch():
  """First Fout − dv channels are the convolution; the rest are 1×1(relative MHA(qkv(x)))."""
  x = jax.random.normal(jax.random.key(1), (1, 5, 7, 4))
  layer = AugmentedConv(4, 12, 3, kappa=0.5, upsilon=1 / 3, heads=2, spatial_shape=(5, 7),
                        rngs=nnx.Rngs(0))
  assert (layer.dk, layer.dv) == (6, 4)
  y = layer(x)
  np.testing.assert_allclose(y[..., :8], layer.conv(x), rtol=1e-5, atol=1e-6)
  q, k, v = jnp.split(layer.qkv(x), [6, 12], axis=-1)
  heads = lambda t: t.reshape(1, 5, 7, 2, -1)
  attn = ops.relative_attention_2d(heads(q), heads(k), heads(v), layer.rel_h[...],
                                   layer.rel_w[...])
  np.testing.assert_allclose(y[..., 8:], layer.attn_out(attn.reshape(1, 5, 7, 4)),
                             rtol=1e-5, atol=1e-6)


def test_fully_attentional_and_errors():
  layer = AugmentedConv(4, 8, 3, kappa=0.5, upsilon=1.0, heads=2, positional="none",
                        rngs=nnx.Rngs(0))
  assert layer.conv is None and layer(jnp.ones((1, 5, 7, 4))).shape == (1, 5, 7, 8)
  with pytest.raises(ValueError, match="spatial_shape"):
    AugmentedConv(4, 8, 3, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="positional"):
    AugmentedConv(4, 8, 3, positional="learned", rngs=nnx.Rngs(0))


def test_query_chunk_default_and_choices_give_the_same_output():
  x = jax.random.normal(jax.random.key(3), (2, 7, 5, 4))
  make = lambda chunk: AugmentedConv(4, 12, 3, kappa=0.5, upsilon=0.5, heads=2,
                                     spatial_shape=(7, 5), query_chunk_size=chunk,
                                     rngs=nnx.Rngs(0))
  assert make("auto").query_chunk_size == "auto" == AugmentedConv(
      4, 8, 3, spatial_shape=(7, 5), rngs=nnx.Rngs(0)).query_chunk_size
  full = make(None)(x)
  for chunk in ("auto", 6, 1):
    np.testing.assert_allclose(make(chunk)(x), full, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="query_chunk_size"):
    make("fast")
