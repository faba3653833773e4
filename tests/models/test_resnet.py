import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.layers import AugmentedConv
from attention_lab.models.resnet import ResNetBackbone  # registers the names
from experiments import measure, model_stats
from tests.models.tiny import create_tiny, train_step

TINY = dict(width=0.0625, image_size=(24, 40), heads=2, min_key_dims=4)


@pytest.mark.parametrize("name,overrides", [("aa_resnet34", dict(depth=10)),
                                            ("aa_resnet50", dict(depth=14, excite=True))])
def test_builds_and_trains_at_tiny_width(name, overrides):
  """Every block kind (basic, bottleneck; plain, augmented, SE) at one block per stage, to
  keep compilation short; the full depths are traced by the count tests."""
  model = create_tiny(name, num_classes=7, **overrides, **TINY)
  x = jax.random.normal(jax.random.key(0), (2, 24, 40, 3))
  logits, grads = train_step(model, x)
  assert logits.shape == (2, 7) and logits.dtype == jnp.float32
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  assert all(np.any(g != 0) for g in jax.tree.leaves(grads["backbone"]["stem"]))


@pytest.mark.parametrize("depth,output_stride,dilations", [
    (26, 32, (1, 1, 1)), (26, 16, (1, 1, 2)), (26, 8, (1, 2, 4)), (18, 8, (1, 2, 4))])
def test_output_stride_dilates_the_last_stages(depth, output_stride, dilations):
  backbone = nnx.eval_shape(lambda: ResNetBackbone(
      depth=depth, width=0.0625, output_stride=output_stride, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(backbone)
  out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                       jax.ShapeDtypeStruct((1, 33, 45, 3), jnp.float32))
  size = lambda n: -(-n // output_stride)
  assert out.shape == (1, size(33), size(45), backbone.out_features)
  convs = [(b.conv1, b.conv2) if depth == 18 else (b.conv,) for b in backbone.blocks]
  got = [{c.kernel_dilation for c in block} for block in convs]
  for stage in (1, 2, 3):  # two blocks per stage
    assert got[2 * stage:2 * stage + 2] == [{dilations[stage - 1]}] * 2


def test_bfloat16_compute_gives_float32_logits():
  model = model_stats.build_abstract("aa_resnet34", 7, depth=10, dtype=jnp.bfloat16, **TINY)
  graphdef, state = nnx.split(model)
  logits = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                          jax.ShapeDtypeStruct((2, 24, 40, 3), jnp.float32))
  assert logits.shape == (2, 7) and logits.dtype == jnp.float32
  assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(state))


def test_bad_arguments_raise():
  build = lambda name, **kw: model_stats.build_abstract(name, 10, **kw)
  with pytest.raises(ValueError, match="output_stride"):
    build("resnet50", output_stride=4)
  with pytest.raises(ValueError, match="output_stride"):
    build("aa_resnet50", output_stride=8)
  with pytest.raises(ValueError, match="depth"):
    ResNetBackbone(depth=20, rngs=nnx.Rngs(0))


def _conv_madd(jaxpr) -> int:
  """MAdd of the convolutions alone (measure.count_madd without the dot products)."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "conv_general_dilated":
      rhs, spec = eqn.invars[1].aval.shape, eqn.params["dimension_numbers"].rhs_spec
      total += (math.prod(eqn.outvars[0].aval.shape) * rhs[spec[1]]
                * math.prod(rhs[d] for d in spec[2:]))
    for sub in measure.sub_jaxprs(eqn):
      total += _conv_madd(sub)
  return total


def _attention_madd(layer: AugmentedConv) -> int:
  """N²·(dk + dv) content logits and weighted values, N·(2h−1 + 2w−1)·dk relative logits."""
  h, w = ((t.shape[0] + 1) // 2 for t in (layer.rel_h, layer.rel_w))
  n = h * w
  return n * n * (layer.dk + layer.dv) + n * (2 * h - 1 + 2 * w - 1) * layer.dk


# AA Tables 2-3 (paper GFlops = 2 × MAdd). Parameters: all trainable ones, the ResNet
# convention (resnet50: 25,557,032).
@pytest.mark.parametrize("name,params,gflops", [
    ("resnet50", 25.6e6, 8.2), ("se_resnet50", 28.1e6, 8.2), ("aa_resnet50", 25.8e6, 8.3)])
def test_aa_tables_counts(name, params, gflops):
  model = model_stats.build_abstract(name, 1000)
  total, _ = model_stats.count_params(model)
  assert abs(total - params) / params < 0.01
  madd, paper = model_stats.forward_madd(model, (224, 224, 3)), gflops / 2 * 1e9
  if name == "aa_resnet50":
    # The paper's GFlops are the convolutions and the classifier; the rest of our count is the
    # attention matmuls (88.5m) and the bilinear upsampling after the pooled stage-2 attention.
    forward, state = model_stats._eval_forward(model)
    jaxpr = jax.make_jaxpr(forward)(state, jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32))
    convs = _conv_madd(jaxpr.jaxpr) + 2048 * 1000
    attention = sum(_attention_madd(b.conv) for b in model.backbone.blocks
                    if isinstance(b.conv, AugmentedConv))
    assert abs(madd - convs - attention) / attention < 0.03
    madd = convs
  assert abs(madd - paper) / paper < 0.03



@pytest.mark.parametrize("name", [f"{p}resnet{d}" for p in ("", "se_", "aa_") for d in (34, 50)])
def test_every_resnet_kind_traces_forward_and_backward_at_full_depth(name):
  """Full depth at tiny width, abstractly (jax.eval_shape: traced, not compiled); 101 and 152
  differ from 50 only in block counts, which the parameter counts pin (tracing them is
  slow)."""
  model = model_stats.build_abstract(name, 7, **TINY)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  loss = lambda p, r, x: jnp.mean(nnx.merge(graphdef, p, r, copy=True)(x) ** 2)
  x = jax.ShapeDtypeStruct((2, 24, 40, 3), jnp.float32)
  grads = jax.eval_shape(jax.grad(loss), params, rest, x)
  assert jax.tree.map(lambda g: (g.shape, g.dtype), grads) == jax.tree.map(
      lambda p: (p.shape, p.dtype), params)


def _eval_backbone(padding):
  """The tiny backbone (the same values under either padding) in eval mode, jitted."""
  model = create_tiny("resnet", num_classes=3, depth=14, width=0.0625, padding=padding)
  model.eval()
  return jax.jit(lambda x: model.backbone(x)), model


def test_torch_padding_differs_from_same_only_at_even_sizes():
  """Same shapes and parameters; equal values on sizes that stay odd through every stride-2
  layer (33 → 17 → 9 → 5 → 3, 65 → 33 → ...), different values on even sizes (a one-pixel
  shift at every stride-2 conv and the max pool). tests/checkpoints checks both against an
  independent torch-semantics reference."""
  (same, same_model), (torch, torch_model) = _eval_backbone("same"), _eval_backbone("torch")
  assert model_stats.count_params(same_model) == model_stats.count_params(torch_model)
  for shape, equal in (((1, 33, 65, 3), True), ((1, 32, 64, 3), False)):
    x = jax.random.normal(jax.random.key(0), shape)
    a, b = np.asarray(same(x)), np.asarray(torch(x))
    assert a.shape == b.shape == (1, -(-shape[1] // 32), -(-shape[2] // 32), 64 * 4 // 2)
    assert np.allclose(a, b, atol=1e-5) == equal


def test_deep_stem_widths():
  """(64, 64, 128): the PSPNet / Encoding stem; (32, 32, 64): mmseg's ResNetV1c."""
  for widths in ((64, 64, 128), (32, 32, 64)):
    backbone = nnx.eval_shape(lambda: ResNetBackbone(depth=14, stem="deep", stem_widths=widths,
                                                     padding="torch", rngs=nnx.Rngs(0)))
    convs = [layer.conv for layer in backbone.stem.layers]
    assert tuple(c.out_features for c in convs) == widths
    assert [c.padding for c in convs] == [((1, 1), (1, 1))] * 3
    assert backbone.blocks[0].reduce.conv.in_features == widths[-1]
  # At width 1/8 the stem scales with the standard stem's 64 (8): 8, 8, 16.
  tiny = nnx.eval_shape(lambda: ResNetBackbone(depth=14, width=0.125, stem="deep",
                                               rngs=nnx.Rngs(0)))
  assert [layer.conv.out_features for layer in tiny.stem.layers] == [8, 8, 16]


def test_bad_stem_and_padding_raise():
  with pytest.raises(ValueError, match="padding must be one of"):
    ResNetBackbone(depth=14, padding="valid", rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="stem_widths"):
    ResNetBackbone(depth=14, stem="deep", stem_widths=(64, 128), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="stem must be one of"):
    ResNetBackbone(depth=14, stem="7x7", rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="padding must be 'same' for attention-augmented"):
    model_stats.build_abstract("aa_resnet50", 10, padding="torch")


@pytest.mark.parametrize("name", ["deeplab_v2", "hamnet", "retinanet"])
def test_models_on_a_resnet_pass_padding_and_stem_to_it(name):
  """The segmentation and detection models build their backbone with the padding (and the
  segmentation models with the deep stem widths) they are given."""
  kw = dict(depth=14, width=0.125, padding="torch")
  if name != "retinanet":
    kw.update(stem="deep", stem_widths=(32, 32, 64), aux_head=True)
  model = model_stats.build_abstract(name, 5, **kw)
  backbone = model.backbone
  assert backbone.pool_padding == ((1, 1), (1, 1))
  if name != "retinanet":
    assert [layer.conv.out_features for layer in backbone.stem.layers] == [4, 4, 8]
    graphdef, state = nnx.split(model)
    logits, aux = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x, with_aux=True), state,
                                 jax.ShapeDtypeStruct((1, 32, 48, 3), jnp.float32))
    assert logits.shape == aux.shape == (1, 32, 48, 5)
