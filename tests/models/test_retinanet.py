"""RetinaNet: output shapes match the anchors for every backbone kind, the prior bias,
and the options' errors (abstract shapes: no compilation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import models
from attention_lab.models import retinanet
from attention_lab.ops import boxes


def _outputs(size, **kw):
  model = nnx.eval_shape(lambda: models.create("retinanet", num_classes=5, rngs=nnx.Rngs(0),
                                               image_size=size, **kw))
  model.eval()
  graphdef, state = nnx.split(model)
  x = jax.ShapeDtypeStruct((2, *((size, size) if isinstance(size, int) else size), 3),
                           jnp.float32)
  return jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state, x)


@pytest.mark.parametrize("backbone,kw", [
    ("resnet", dict(depth=10)), ("se_resnet", dict(depth=14)),
    ("aa_resnet", dict(depth=14, heads=2, min_key_dims=4)),
    ("resnet", dict(depth=10, min_level=2, max_level=6, p6_input="p5", head_norm="batch")),
    ("resnet18", dict(head_norm="group", max_level=5))])
def test_outputs_match_anchors(backbone, kw):
  size = (72, 40)
  logits, deltas = _outputs(size, backbone=backbone, width=0.125, features=16, head_convs=1,
                            **kw)
  n = len(boxes.anchors(size, min_level=kw.get("min_level", 3),
                        max_level=kw.get("max_level", 7)))
  assert logits.shape == (2, n, 5) and deltas.shape == (2, n, 4)
  assert logits.dtype == deltas.dtype == jnp.float32


def test_prior_bias_and_head_init():
  net = retinanet.Subnet(16, 27, convs=1, bias=-np.log(99.0), norm="none", levels=1,
                         dtype=None, rngs=nnx.Rngs(0))  # as RetinaNet builds its class_net
  np.testing.assert_allclose(jax.nn.sigmoid(net.out.bias[...]), 0.01, rtol=1e-5)
  assert float(jnp.std(net.convs[0].kernel[...])) == pytest.approx(0.01, rel=0.2)
  model = nnx.eval_shape(lambda: models.create("retinanet", num_classes=3, depth=10,
                                               prior=0.05, rngs=nnx.Rngs(0)))
  assert model.class_net.out.bias.shape == (27,)


@pytest.mark.parametrize("kw,match", [
    (dict(backbone="vgg16"), "backbone"), (dict(backbone="resnet", depth=7), "depth"),
    (dict(min_level=1), "min_level"), (dict(prior=1.5), "prior"),
    (dict(head_norm="layer"), "head_norm"), (dict(p6_input="c4"), "p6_input")])
def test_bad_options(kw, match):
  with pytest.raises(ValueError, match=match):
    nnx.eval_shape(lambda: models.create("retinanet", num_classes=2, rngs=nnx.Rngs(0),
                                         **{"depth": 10, **kw}))
