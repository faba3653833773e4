"""HamNet, the Ham paper's segmentation network, and its recipe (App. E.3 and the official
Enjoy-Hamburger seg/HamNet code), shared by configs/hamburger/voc_hamnet.py (whose docstring
gives the details), pcontext_hamnet.py and ade20k_hamnet.py."""

import ml_collections

from configs import presets, schema


def recipe() -> ml_collections.ConfigDict:
  """A segmentation config with HamNet (ResNet-101 at output stride 8, deep stem, multi-grid,
  Hamburger NMF d = 512, r = 64, K = 6 / 7) and its training recipe (scale 0.5-2.0, crop 513,
  flip; batch 16; SGD momentum 0.9, lr 9e-3, poly 0.9, weight decay 1e-4 on conv weights);
  the caller sets the dataset and the schedule's length."""
  config = schema.segmentation()
  d = config.dataset
  d.resize = 0
  d.crop_size, d.eval_size = 513, 513
  d.scale_min, d.scale_max, d.flip = 0.5, 2.0, True

  config.model.update(
      name="hamnet", depth=101, width=1.0, output_stride=8,
      stem="deep", stem_widths=(64, 64, 128), multi_grid=(1, 2, 4),
      padding="auto",  # "torch" when init_from is a torch .pth, else "same"
      channels=512, rank=64, ham="nmf",
      ham_options=ml_collections.ConfigDict({
          "init": "random", "gradient": "one_step", "train_steps": 6, "eval_steps": 7,
          "dim": 512, "temperature": 0.01, "without": ()}),  # dim: d (× width, as channels)
      align_channels=256, dropout=0.1, dtype="float32")
  config.init_from = ""  # --config.init_from=<the backbone's .pth> (see voc_hamnet.py)
  config.init_scope = "backbone"

  config.eval.scales = (1.0, 1.5, 2.0)
  config.batch_size = 16
  config.optimizer.update(
      name="sgd", learning_rate=9e-3, momentum=0.9, nesterov=False, weight_decay=1e-4,
      decay_params="conv_kernels", head_lr_multiplier=1.0, schedule="poly", power=0.9)
  config.log_every_steps = 100
  return config


def cpu_or_tiny(config: ml_collections.ConfigDict, preset: str, path: str,
                others: tuple[str, ...] = ()) -> ml_collections.ConfigDict:
  """A HamNet config's `:cpu` (digit scenes, the CPU sizes of configs/segmentation/default.py)
  or `:tiny` (tests) preset, with the standard stem and one grid; ValueError naming the
  presets of `path` (`others` and these two) for any other."""
  if preset == "cpu":
    presets.digit_scenes(config)
  elif preset == "tiny":
    presets.digit_scenes_tiny(config)
  else:
    expected = ", ".join(repr(p) for p in (*others, "cpu")) + " or 'tiny'"
    raise ValueError(f"unknown preset {preset!r} for {path}; expected {expected}")
  config.model.stem, config.model.multi_grid = "standard", (1,)
  return config
