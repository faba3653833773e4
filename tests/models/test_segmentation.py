import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.models.segmentation import HEADS  # registers the names
from experiments import model_stats
from tests.models.tiny import create_tiny, train_step

# One bottleneck per stage and tiny widths keep compilation short; 33×45 is odd and non-square.
TINY = dict(depth=14, width=0.0625)
SHAPE = (2, 33, 45, 3)


@pytest.mark.parametrize("name,overrides", [
    ("deeplab_v2", dict(head="kronecker_qkv", heads=2)), ("hamnet", dict(rank=4))])
def test_trains_on_odd_non_square_inputs(name, overrides):
  """Compiled for the attention head with the most structure; every head is traced below."""
  model = create_tiny(name, num_classes=5, **TINY, **overrides)
  logits, grads = train_step(model, jax.random.normal(jax.random.key(0), SHAPE))
  assert logits.shape == (*SHAPE[:3], 5) and logits.dtype == jnp.float32
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  assert all(np.any(g != 0) for g in jax.tree.leaves(grads["backbone"]["stem"]))


@pytest.mark.parametrize("head", sorted(HEADS))
def test_every_deeplab_head_traces_forward_and_backward(head):
  model = model_stats.build_abstract("deeplab_v2", 5, head=head, heads=2, **TINY)
  graphdef, state = nnx.split(model)

  def loss(state, x):
    logits = nnx.merge(graphdef, state)(x)
    return jnp.mean(logits ** 2), logits

  _, logits = jax.eval_shape(jax.grad(loss, has_aux=True), state,
                             jax.ShapeDtypeStruct(SHAPE, jnp.float32))
  assert logits.shape == (*SHAPE[:3], 5) and logits.dtype == jnp.float32


def test_heads_follow_the_papers():
  aspp = model_stats.build_abstract("deeplab_v2", 21, **TINY)
  assert aspp.backbone.output_stride == 8
  assert [c.kernel_dilation for c in aspp.classifiers] == [6, 12, 18, 24]
  assert all(c.kernel_size == (3, 3) and c.use_bias for c in aspp.classifiers)
  attention = model_stats.build_abstract("deeplab_v2", 21, head="attention", width=1.0, depth=14)
  assert attention.attention.operator == "softmax"
  assert attention.attention.query is not None and attention.attention.key is not None
  assert attention.classifiers[0].in_features == 2048 + 512
  assert attention.classifiers[0].kernel_size == (1, 1)
  local = model_stats.build_abstract("deeplab_v2", 21, head="kronecker_kv", classifier_kernel=3,
                                     **TINY)
  assert [c.kernel_size for c in local.classifiers] == [(3, 3)]
  ham = model_stats.build_abstract("hamnet", 21, width=1.0, depth=14)
  assert ham.backbone.output_stride == 8 and ham.hamburger.ham == "nmf"
  assert ham.hamburger.lower.in_features == 512 and ham.hamburger.lower.out_features == 512
  assert ham.hamburger.rank == 64 and ham.squeeze.conv.kernel_size == (3, 3)


def test_bad_head_raises():
  with pytest.raises(ValueError, match="head"):
    model_stats.build_abstract("deeplab_v2", 5, head="psp", **TINY)
  with pytest.raises(ValueError, match="classifier_kernel"):
    model_stats.build_abstract("deeplab_v2", 5, head="attention", classifier_kernel=2, **TINY)


def test_official_recipe_options_deep_stem_multi_grid_aux_head():
  ham = model_stats.build_abstract("hamnet", 21, width=0.125, depth=14, aux_head=True)
  convs = [layer.conv for layer in ham.backbone.stem.layers]
  assert [c.kernel_size for c in convs] == [(3, 3)] * 3 and convs[0].strides in (2, (2, 2))
  assert convs[-1].out_features == 2 * convs[0].out_features
  assert ham.backbone.blocks[-1].conv.kernel_dilation == 4  # multi-grid 1 on 1 block
  ham50 = model_stats.build_abstract("hamnet", 21, width=0.125, depth=50)
  assert [b.conv.kernel_dilation for b in ham50.backbone.blocks[-3:]] == [4, 8, 16]
  graphdef, state = nnx.split(ham)
  logits, aux = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x, with_aux=True), state,
                               jax.ShapeDtypeStruct(SHAPE, jnp.float32))
  assert logits.shape == aux.shape == (*SHAPE[:3], 21)
  with pytest.raises(ValueError, match="aux_head"):
    model = model_stats.build_abstract("deeplab_v2", 5, **TINY)
    graphdef, state = nnx.split(model)
    jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x, with_aux=True), state,
                   jax.ShapeDtypeStruct(SHAPE, jnp.float32))


def test_segmenter_dispatches_heads_and_ham_table2_ablations():
  from attention_lab.models.segmentation import DeepLabV2, HamNet  # pylint: disable=g-import-not-at-top
  common = dict(rates=(1, 2), heads=2, rank=4, channels=64, **TINY)
  assert isinstance(model_stats.build_abstract("segmenter", 5, head="hamburger", **common),
                    HamNet)
  assert isinstance(model_stats.build_abstract("segmenter", 5, head="kronecker_kv", **common),
                    DeepLabV2)
  params = {}
  for without in [(), ("ham",), ("upper",), ("lower",), ("upper", "lower"), ("hamburger",)]:
    model = model_stats.build_abstract("hamnet", 5, rank=4, ham_options={"without": without},
                                       **TINY)
    params[without] = model_stats.count_params(model)[0]
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                         jax.ShapeDtypeStruct(SHAPE, jnp.float32))
    assert out.shape == (*SHAPE[:3], 5)
  c = 32  # channels 512 × width 0.0625
  assert params[()] - params[("lower",)] == c * c + c  # lower bread: 1×1 conv with bias
  assert params[()] - params[("upper",)] == c * c  # upper bread: 1×1 conv without bias
  assert params[("ham",)] == params[()]  # the ham itself has no parameters
  assert params[()] - params[("hamburger",)] == 2 * c * c + c + 2 * c  # + its BN


def test_hamburger_without_validates():
  from attention_lab.layers import Hamburger  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="without"):
    nnx.eval_shape(lambda: Hamburger(16, dim=16, rank=2, without=("bread",), rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="dim"):
    nnx.eval_shape(lambda: Hamburger(16, dim=8, rank=2, without=("upper",), rngs=nnx.Rngs(0)))
