"""experiments.attention_maps: the drawn maps reproduce the layers' outputs (out = A·v), every
recording layer is drawn, and the command draws the default experiment's `:tiny` checkpoint."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab.layers import AugmentedConv, GlobalAttention, Hamburger, recording
from attention_lab.train.trainer import Trainer
from configs import default
from experiments import attention_maps


@pytest.mark.parametrize("operator", ["softmax", "kronecker_kv", "kronecker_qkv"])
def test_drawn_maps_reproduce_the_output_over_the_grid(operator):
  """The drawn map A satisfies out_i = Σ_j A_ij v_j over the grid (KAO: through the summaries)."""
  x = jax.random.normal(jax.random.key(0), (2, 5, 6, 8))  # odd, non-square grid
  layer = GlobalAttention(8, operator, num_heads=2, project="qkv", rngs=nnx.Rngs(1))
  out, recorded = recording.attention_weights(layer, x)
  a, query_grid, key_grid = attention_maps.grid_weights(
      layer, recorded["model"][recording.WEIGHTS][0])
  assert a.shape == (2, 2, 30, 30) and query_grid == key_grid == (5, 6)
  v = layer.value(x).reshape(2, 30, 2, 4)
  drawn = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(2, 5, 6, 8)
  np.testing.assert_allclose(drawn, out, rtol=2e-4, atol=2e-5)
  if operator != "kronecker_qkv":
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)


def test_maps_are_drawn_for_2d_grids_only():
  layer = GlobalAttention(4, "softmax", rngs=nnx.Rngs(0))
  _, recorded = recording.attention_weights(layer, jnp.ones((1, 5, 4)))
  with pytest.raises(ValueError, match="2D grids only"):
    attention_maps.grid_weights(layer, recorded["model"][recording.WEIGHTS][0])


def test_draw_model_draws_every_recording_layer(tmp_path):
  model = nnx.Sequential(
      AugmentedConv(1, 8, 3, kappa=0.5, upsilon=0.5, heads=2, spatial_shape=(7, 6),
                    rngs=nnx.Rngs(0)),
      GlobalAttention(8, "kronecker_qkv", num_heads=2, rngs=nnx.Rngs(1)),
      Hamburger(8, dim=8, rank=4, rngs=nnx.Rngs(2)))
  model.eval()
  images = jax.random.uniform(jax.random.key(0), (2, 7, 6, 1))
  paths = attention_maps.draw_model(model, images, tmp_path, "net", max_layers=3)
  assert [p.name for p in paths] == [f"attention_maps_net_layers_{i}.png" for i in range(3)]
  assert all(p.stat().st_size > 10_000 for p in paths)


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
