"""The SAO Table 7 recipe on CARE's 3D data (configs/sanet/care_planaria.py, care_tribolium.py,
care_flywing.py start from it; care_planaria.py's docstring gives the details)."""

import ml_collections

from configs import schema


def recipe(preset: str | None, *, dataset: str, epochs: int) -> ml_collections.ConfigDict:
  """The SAO Table 7 recipe (3D U-Net+SAO, Adam 4e-4, batch 16, L1, the CARE evaluation
  protocol) on the CARE dataset `dataset` for `epochs` epochs; `:cpu` / `:tiny` train on
  synthetic volumes."""
  config = schema.restoration()
  d = config.dataset
  d.name = dataset
  d.eval_split = "test_condition_1"
  d.patch_size = (16, 64, 64)
  d.augment = False  # CARE trains on its patches as they are
  d.input_percentiles = (1.0, 99.8)
  d.channels = 1  # every CARE dataset is one channel
  config.model.update(
      name="unet3d", attention="siamese", features=32, depth=3, heads=4,
      attention_kwargs=ml_collections.ConfigDict({"query_chunk_size": 256}), dtype="float32")
  config.loss = "mae"
  config.batch_size = 16
  config.num_epochs = epochs
  config.optimizer.update(name="adam", learning_rate=4e-4, b1=0.9, b2=0.999, schedule="constant")
  config.eval.protocol = "care"
  config.eval.percentiles = (0.1, 99.9)
  config.eval.tile_size = (32, 128, 128)
  config.eval.tile_overlap = (8, 32, 32)
  config.log_every_steps = 100
  config.eval_every_steps = 20_000
  config.checkpoint_every_steps = 2_000
  config.keep_checkpoints = 3
  if preset in ("cpu", "tiny"):
    config.dataset.name = "synthetic_volumes/denoising"
    config.dataset.eval_split = "test"
    config.dataset.input_percentiles = ()
    config.dataset.augment = True
    config.dataset.patch_size = (8, 24, 24)
    config.model.features = 8
    config.batch_size = 8
    config.num_train_steps = 60
    config.optimizer.learning_rate = 1e-3
    config.eval.tile_size = (8, 32, 32)
    config.eval.tile_overlap = (0, 8, 8)
    config.eval.max_examples = 1
    config.eval.crop_size = (8, 48, 48)
    config.log_every_steps = 10
    config.eval_every_steps = config.checkpoint_every_steps = 60
    if preset == "tiny":
      config.model.features = 4
      config.dataset.patch_size = (4, 16, 16)
      config.num_train_steps = 2
      config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r}; expected 'cpu' or 'tiny'")
  return config
