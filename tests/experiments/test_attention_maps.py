"""experiments.attention_maps: the drawn weights reproduce the layers' outputs (out = A·v), and
the command draws the default experiment's `:tiny` checkpoint."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.layers import AugmentedConv, GlobalAttention, Hamburger
from attention_lab.layers.global_attention import OPERATORS
from attention_lab.train.trainer import Trainer
from configs import default
from experiments import attention_maps


def _batch_statistics(layer, x):
  """Run once in training mode so the coefficient batch norm has non-trivial running stats."""
  layer.train()
  for _ in range(3):
    layer(x)
  layer.eval()


@pytest.mark.parametrize("operator, coefficients", [
    (op, c) for op in OPERATORS for c in ("scale", "batch_norm")
    if not (op == "relative" and c == "batch_norm")])  # relative has no coefficient batch norm
def test_global_attention_weights_reproduce_the_output(operator, coefficients):
  x = jax.random.normal(jax.random.key(0), (2, 5, 6, 8))  # odd, non-square grid
  layer = GlobalAttention(8, operator, num_heads=2, project="qkv", spatial_shape=(5, 6),
                          coefficients=coefficients, bn_momentum=0.5, rngs=nnx.Rngs(1))
  if operator == "siamese":
    layer.w[...] = jax.random.normal(jax.random.key(2), layer.w.shape)
  if coefficients == "batch_norm":
    _batch_statistics(layer, x)
  layer.eval()
  a, v, query_grid, key_grid = attention_maps.global_attention_weights(layer, x)
  assert a.shape == (2, 2, 30, int(np.prod(key_grid))) and query_grid == (5, 6)
  out = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(2, 5, 6, 8)
  np.testing.assert_allclose(out, layer(x), rtol=2e-4, atol=2e-5)
  if operator in ("softmax", "softmax_pool", "relative", "kronecker_kv"):
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("positional", ["relative", "none", "sine", "coordconv"])
def test_augmented_conv_weights_reproduce_the_attention_branch(positional):
  x = jax.random.normal(jax.random.key(0), (2, 6, 7, 8))
  layer = AugmentedConv(8, 16, 3, kappa=0.5, upsilon=0.5, heads=2, positional=positional,
                        spatial_shape=(6, 7), rngs=nnx.Rngs(0))
  a, v, grid, _ = attention_maps.augmented_conv_weights(layer, x)
  attended = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(2, *grid, layer.dv)
  np.testing.assert_allclose(layer.attn_out(attended), layer._attend(x), rtol=2e-4, atol=2e-5)


def test_hamburger_codes_are_the_layers():
  x = jax.random.normal(jax.random.key(0), (2, 4, 5, 8))
  layer = Hamburger(8, dim=8, rank=3, rngs=nnx.Rngs(0))
  layer.eval()
  codes, strength = attention_maps.hamburger_codes(layer, x)
  assert codes.shape == (2, 4, 5, 3) and strength.shape == (2, 3)
  assert bool(jnp.all(codes >= 0))


def test_command_draws_the_default_tiny_checkpoint(tmp_path, monkeypatch):
  config = default.get_config("tiny")
  config.dataset.data_dir = str(tmp_path / "tfds")
  workdir = str(tmp_path / "workdir")
  Trainer(config, workdir).run()
  flags = {"_CONFIG": config, "_WORKDIR": workdir, "_NUM_IMAGES": 2, "_MAX_LAYERS": 3,
           "_OUT_DIR": str(tmp_path / "out"), "_NAME": ""}
  for name, value in flags.items():
    monkeypatch.setattr(attention_maps, name, type("Flag", (), {"value": value})())
  attention_maps.main([])
  pngs = sorted((tmp_path / "out").glob("attention_maps_*.png"))
  assert [p.name for p in pngs] == ["attention_maps_attention_cnn_softmax_block.png"]
  assert pngs[0].stat().st_size > 10_000
