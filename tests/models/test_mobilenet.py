import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.models.mobilenet import _VARIANTS
from experiments import measure, model_stats
from tests.models.tiny import create_tiny, train_step


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_builds_and_trains_at_tiny_width(name):
  model = create_tiny(name, num_classes=5, width=0.25, image_size=32)
  x = jax.random.normal(jax.random.key(0), (2, 32, 32, 3))
  logits, grads = train_step(model, x)
  assert logits.shape == (2, 5) and logits.dtype == jnp.float32
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  model.eval()
  forward = nnx.jit(lambda m, x: m(x))
  np.testing.assert_array_equal(forward(model, x), forward(model, x))


@pytest.mark.parametrize("name,expected", [("sanet", 3_449_408), ("sanet_ones_w", 3_448_448)])
def test_sao_table8_parameter_counts_are_exact(name, expected):
  _, kernels = model_stats.count_params(model_stats.build_abstract(name))
  assert kernels == expected


@pytest.mark.parametrize("name,paper", [
    ("mobilenet_v2", 3.47e6), ("attnnet", 3.44e6), ("kanet_qkv", 3.44e6),
    ("mobilenet_v2_sao", 3.47e6), ("kanet_no_kao", 3.46e6)])
def test_parameter_counts_within_one_percent(name, paper):
  _, kernels = model_stats.count_params(model_stats.build_abstract(name))
  assert abs(kernels - paper) / paper < 0.01


@pytest.mark.parametrize("name,paper", [("mobilenet_v2", 300e6), ("sanet", 288e6),
                                        ("attnnet", 365e6)])
def test_madd_within_three_percent(name, paper):
  madd = model_stats.forward_madd(model_stats.build_abstract(name), (224, 224, 3))
  assert abs(madd - paper) / paper < 0.03


def test_count_madd_of_a_conv_and_a_dense():
  def f(x, k, w):
    y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y.reshape(1, -1) @ w
  jaxpr = jax.make_jaxpr(f)(jnp.zeros((1, 5, 7, 3)), jnp.zeros((3, 3, 3, 4)),
                            jnp.zeros((5 * 7 * 4, 2)))
  assert measure.count_madd(jaxpr.jaxpr) == 5 * 7 * 4 * 27 + 140 * 2
