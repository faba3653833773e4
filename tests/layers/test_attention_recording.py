"""Recorded attention weights reproduce each layer's output; recording off leaves no trace."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers import (AugmentedConv, GlobalAttention, Hamburger, NonLocal,
                                  SelfAttention, recording)
from attention_lab.layers.global_attention import OPERATORS

TOL = {"rtol": 2e-4, "atol": 2e-5}


def _record(layer, x):
  out, recorded = recording.attention_weights(layer, x)
  assert list(recorded) == ["model"]
  return out, {name: values[0] for name, values in recorded["model"].items()}


def _apply(weights, values, grid_rank):
  """Σ_keys weights·values per head: weights (B, H, *Sq, *keys), values (B, *keys, H, D)."""
  b, h = weights.shape[:2]
  w = weights.reshape(b, h, math.prod(weights.shape[2:2 + grid_rank]), -1)
  out = jnp.einsum("bhqk,bkhd->bqhd", w, values.reshape(b, w.shape[-1], h, -1))
  return out.reshape(b, *weights.shape[2:2 + grid_rank], -1)


def _heads(t, heads):
  return t.reshape(*t.shape[:-1], heads, t.shape[-1] // heads)


@pytest.mark.parametrize("operator, coefficients, train", [
    (op, c, train) for op in OPERATORS for c in ("scale", "batch_norm") for train in (False, True)
    if not (op == "relative" and c == "batch_norm") and not (train and c == "scale")])
def test_global_attention_weights_reproduce_the_output(operator, coefficients, train):
  x = jax.random.normal(jax.random.key(0), (2, 5, 6, 8))  # odd, non-square grid
  layer = GlobalAttention(8, operator, num_heads=2, project="qkv", spatial_shape=(5, 6),
                          out_features=8, coefficients=coefficients, bn_momentum=0.5,
                          rngs=nnx.Rngs(1))
  if operator == "siamese":
    layer.w[...] = jax.random.normal(jax.random.key(2), layer.w.shape)
  if coefficients == "batch_norm":  # non-trivial running statistics
    for _ in range(3):
      layer(x)
  layer.train() if train else layer.eval()
  out, recorded = _record(layer, x)
  weights = recorded[recording.WEIGHTS]
  v = _heads(layer.value(x), 2)
  if operator == "softmax_pool":
    v = ops.pool_keys_values(v, v)[1]
    assert weights.shape == (2, 2, 5, 6, 3, 3)
  elif operator.startswith("kronecker"):
    v = _heads(ops.kronecker_summary(layer.value(x)), 2)
    assert weights.shape == (2, 2, 5, 6, 11)
  else:
    assert weights.shape == (2, 2, 5, 6, 5, 6)
  np.testing.assert_allclose(layer.out(_apply(weights, v, 2)), out, **TOL)
  rows = weights.reshape(2, 2, 30, -1).sum(-1)
  if operator in ("softmax", "softmax_pool", "relative", "kronecker_kv"):
    np.testing.assert_allclose(rows, 1.0, rtol=1e-5)
  if operator == "kronecker_qkv":  # one softmax row per mode
    np.testing.assert_allclose(rows, 2.0, rtol=1e-5)


@pytest.mark.parametrize("operator", ["softmax", "kronecker_kv", "kronecker_qkv"])
@pytest.mark.parametrize("shape", [(2, 7, 4), (1, 3, 4, 5, 4)])  # 1D and 3D grids
def test_global_attention_weights_on_other_grid_ranks(operator, shape):
  x = jax.random.normal(jax.random.key(0), shape)
  layer = GlobalAttention(4, operator, num_heads=2, rngs=nnx.Rngs(0))
  out, recorded = _record(layer, x)
  weights, grid = recorded[recording.WEIGHTS], shape[1:-1]
  v = _heads(layer.value(x), 2)
  if operator != "softmax":
    v = _heads(ops.kronecker_summary(layer.value(x)), 2)
  assert weights.shape[:2 + len(grid)] == (shape[0], 2, *grid)
  np.testing.assert_allclose(_apply(weights, v, len(grid)), out, **TOL)


@pytest.mark.parametrize("positional", ["relative", "none", "sine", "coordconv"])
@pytest.mark.parametrize("downsample", [False, True])
def test_augmented_conv_weights_reproduce_the_output(positional, downsample):
  x = jax.random.normal(jax.random.key(0), (2, 5, 7, 8))
  layer = AugmentedConv(8, 16, 3, kappa=0.5, upsilon=0.5, heads=2, positional=positional,
                        downsample=downsample, spatial_shape=(5, 7), rngs=nnx.Rngs(0))
  out, recorded = _record(layer, x)
  weights = recorded[recording.WEIGHTS]
  grid = (3, 4) if downsample else (5, 7)
  assert weights.shape == (2, 2, *grid, *grid)
  qkv = layer.qkv(layer.attention_input(x))
  if downsample:
    qkv = nnx.avg_pool(qkv, (3, 3), (2, 2), "SAME")
  v = _heads(qkv[..., 2 * layer.dk:], 2)
  attention = layer.attn_out(_apply(weights, v, 2))
  attention = jax.image.resize(attention, (2, 5, 7, layer.dv), "bilinear")
  np.testing.assert_allclose(out[..., -layer.dv:], attention, **TOL)
  np.testing.assert_allclose(weights.sum((-2, -1)), 1.0, rtol=1e-5)


@pytest.mark.parametrize("ham", ["nmf", "vq", "cd"])
@pytest.mark.parametrize("without", [(), ("upper",)])
def test_hamburger_codes_times_bases_reconstruct_the_output(ham, without):
  x = jax.random.normal(jax.random.key(0), (2, 5, 3, 8))
  layer = Hamburger(8, ham=ham, dim=8, rank=3, groups=2, without=without, rngs=nnx.Rngs(0))
  layer.eval()
  out, recorded = _record(layer, x)
  codes, bases = recorded[recording.WEIGHTS], recorded[recording.BASES]
  assert codes.shape == (2, 2, 5, 3, 3) and bases.shape == (2, 2, 4, 3)
  if ham == "nmf":
    assert bool(jnp.all(codes >= 0))
  # Group g holds channels [4g, 4g + 4) of the reconstruction.
  recon = jnp.einsum("bghwr,bgdr->bhwgd", codes, bases).reshape(2, 5, 3, 8)
  y = recon if layer.upper is None else layer.upper(recon)
  np.testing.assert_allclose(jax.nn.relu(x + layer.norm(y)), out, **TOL)


@pytest.mark.parametrize("subsample", [False, True])
def test_non_local_weights_reproduce_the_output(subsample):
  x = jax.random.normal(jax.random.key(0), (2, 5, 3, 8))
  layer = NonLocal(8, subsample=subsample, rngs=nnx.Rngs(0))
  layer.norm.scale[...] = jnp.ones(8)  # γ starts at 0: make the attention visible
  layer.eval()
  out, recorded = _record(layer, x)
  weights = recorded[recording.WEIGHTS]
  values = layer.g(x)
  if subsample:
    values = nnx.max_pool(values, (2, 2), strides=(2, 2), padding="SAME")
  assert weights.shape == (2, 1, 5, 3, *values.shape[1:3])
  y = _apply(weights, values[..., None, :], 2)
  np.testing.assert_allclose(x + layer.norm(layer.out(y)), out, **TOL)


@pytest.mark.parametrize("variant", ["sa", "refined"])
def test_self_attention_weights_reproduce_the_output(variant):
  x = jax.random.normal(jax.random.key(0), (2, 5, 3, 16))
  layer = SelfAttention(16, variant=variant, value_features=8, rngs=nnx.Rngs(0))
  layer.gamma[...] = jnp.asarray(0.7)
  out, recorded = _record(layer, x)
  weights = recorded[recording.WEIGHTS]
  assert weights.shape == (2, 1, 5, 3, 5, 3)
  o = layer.v(_apply(weights, layer.h(x)[..., None, :], 2))
  np.testing.assert_allclose(x + 0.7 * o, out, **TOL)


def _train_step_text(model, x):
  """The lowered text of a jitted gradient step; the forward runs under `nnx.capture`."""
  graphdef, state = nnx.split(model)

  def loss(model, x):
    out, sown = nnx.capture(model, nnx.Intermediate)(x)
    return jnp.sum(out ** 2), sown

  def step(state, x):
    return nnx.grad(loss, has_aux=True)(nnx.merge(graphdef, state), x)

  return jax.jit(step).lower(state, x).as_text()


def test_recording_is_off_by_default_and_leaves_no_trace():
  x = jax.random.normal(jax.random.key(0), (2, 4, 4, 8))
  model = nnx.Sequential(GlobalAttention(8, "softmax", num_heads=2, rngs=nnx.Rngs(0)),
                         Hamburger(8, dim=8, rank=2, rngs=nnx.Rngs(1)))
  before_graph, before_text = nnx.graphdef(model), _train_step_text(model, x)
  _, nothing = nnx.capture(model, nnx.Intermediate)(x)  # recording off: nothing is sown
  assert not nnx.to_flat_state(nothing)
  _, recorded = recording.attention_weights(model, x)
  assert list(recorded) == ["layers/0", "layers/1"]
  assert set(recorded["layers/1"]) == {recording.WEIGHTS, recording.BASES}
  assert not any(m.record_attention for _, m in recording.recording_layers(model))
  assert not nnx.state(model, nnx.Intermediate)
  assert nnx.graphdef(model) == before_graph
  assert _train_step_text(model, x) == before_text
  model.set_attributes(record_attention=True, raise_if_not_found=False)
  assert _train_step_text(model, x) != before_text  # the comparison above can fail
