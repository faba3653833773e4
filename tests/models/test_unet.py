import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import model_stats
from tests.models.tiny import create_tiny, train_and_eval


@pytest.mark.parametrize("name,shape,attention,kwargs", [
    ("unet2d", (2, 16, 24, 1), "softmax", None),
    # Batch-normalised SAO coefficients: batch statistics in training, running ones in eval.
    ("unet3d", (2, 8, 16, 16, 1), "siamese", {"coefficients": "batch_norm"}),
])
def test_builds_trains_and_evaluates_deterministically(name, shape, attention, kwargs):
  model = create_tiny(name, num_classes=1, attention=attention, features=4, heads=2,
                      attention_kwargs=kwargs)
  x = jax.random.normal(jax.random.key(0), shape)
  x_other = x.at[1].set(jax.random.normal(jax.random.key(1), shape[1:]))
  out, grads, (eval_x, eval_other) = train_and_eval(model, x, x_other)
  assert out.shape == shape and out.dtype == jnp.float32
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  np.testing.assert_allclose(eval_x[0], eval_other[0], rtol=1e-5, atol=1e-6)


def test_residual_output_is_the_input_plus_the_last_conv():
  """CARE's residual learning: with the output conv zeroed the 2D U-Net returns its input."""
  model = create_tiny("unet2d", num_classes=1, features=4, depth=1)
  model.out.kernel[...] = jnp.zeros_like(model.out.kernel[...])
  model.out.bias[...] = jnp.zeros_like(model.out.bias[...])
  x = jax.random.normal(jax.random.key(0), (2, 4, 6, 1))
  np.testing.assert_array_equal(model(x), x)
  assert not create_tiny("unet2d", num_classes=2, features=4, depth=1).residual
  with pytest.raises(ValueError, match="residual"):
    model_stats.build_abstract("unet3d", 2, residual=True)


def test_spatial_sizes_must_be_divisible_by_two_to_the_depth_minus_one():
  model = create_tiny("unet2d", num_classes=1, features=4)
  with pytest.raises(ValueError, match="divisible by 2\\^\\(depth-1\\) = 4"):
    model(jnp.zeros((2, 18, 24, 1)))
  with pytest.raises(ValueError, match="shape"):
    model(jnp.zeros((2, 8, 8, 8, 1)))


def _conv(k, cin, cout):
  return k * cin * cout + cout


@pytest.mark.parametrize("attention,per_block", [
    ("none", lambda c: 0), ("softmax", lambda c: 3 * c * c), ("siamese", lambda c: 3 * c * c + c)])
def test_unet3d_widths_follow_care(attention, per_block):
  """depth 3, f = 32, 3×3×3: encoder 32, 64; bottom 128 → 64; decoders (64+64) → 64 → 32 and
  (32+32) → 32 → 32; 1×1 output. Attention (q, k, v maps, SAO's w) on the bottom (64) and both
  decoder blocks (32)."""
  k = 27
  convs = (_conv(k, 1, 32) + _conv(k, 32, 32) + _conv(k, 32, 64) + _conv(k, 64, 64)
           + _conv(k, 64, 128) + _conv(k, 128, 64) + _conv(k, 128, 64) + _conv(k, 64, 32)
           + _conv(k, 64, 32) + _conv(k, 32, 32) + _conv(1, 32, 1))
  expected = convs + per_block(64) + 2 * per_block(32)
  total, _ = model_stats.count_params(model_stats.build_abstract("unet3d", 1, attention=attention))
  assert total == expected


def test_bad_arguments_raise():
  for overrides, match in (({"attention": "kronecker"}, "attention"), ({"depth": 0}, "depth"),
                           ({"kernel_size": 4}, "kernel_size")):
    with pytest.raises(ValueError, match=match):
      model_stats.build_abstract("unet2d", 1, **overrides)


def test_projection_unet_is_a_softmax_weighted_z_average_then_a_2d_unet():
  model = create_tiny("unet_projection", num_classes=1, features=4, depth=2, proj_depth=2,
                      proj_features=2)
  stack = jax.random.uniform(jax.random.key(0), (2, 5, 8, 12, 1))
  projected = model.project(stack)
  assert projected.shape == (2, 8, 12, 1)
  # a convex combination over Z: between the min and max of each column; constant stays put
  assert bool(jnp.all(projected <= stack.max(axis=1) + 1e-6))
  assert bool(jnp.all(projected >= stack.min(axis=1) - 1e-6))
  constant = jnp.full((1, 5, 8, 12, 1), 0.7)
  np.testing.assert_allclose(model.project(constant), 0.7, rtol=1e-6)
  np.testing.assert_allclose(model(stack), model.unet(projected), rtol=1e-6)
  # CARE's projection network by default: 4 down, 1 middle, 4 up 3×3×3 convs with 8 maps,
  # then a linear 3×3×3 conv to the one map of Z weights
  total, _ = model_stats.count_params(model_stats.build_abstract(
      "unet_projection", 1, features=4, depth=2))
  unet, _ = model_stats.count_params(model_stats.build_abstract("unet2d", 1, features=4,
                                                                 depth=2))
  assert total - unet == _conv(27, 1, 8) + 8 * _conv(27, 8, 8) + _conv(27, 8, 1)
  with pytest.raises(ValueError, match="divisible by 2\\^proj_depth"):
    model(jnp.zeros((1, 5, 6, 12, 1)))
