"""Preset strings of the configs: `file.py:row`, `file.py:cpu`, `file.py:row,cpu`.

A preset string is a comma-separated list: at most one paper row (a name the
config lists) and at most one size ("cpu": learns visibly on digits in a minute
or two on a 2-core CPU; "tiny": a few steps, for tests).
"""

import os

import ml_collections
from etils import epath

SIZES = ("cpu", "tiny")


def parse(preset: str | None, rows, *, default_row: str | None = None, where: str = "config"):
  """(row, size) from a preset string; ValueError naming what is allowed."""
  row, size = None, None
  for token in filter(None, (t.strip() for t in (preset or "").split(","))):
    if token in SIZES and size is None:
      size = token
    elif token in rows and row is None:
      row = token
    else:
      raise ValueError(
          f"unknown preset {preset!r} for {where}; expected a comma-separated row from "
          f"{sorted(rows)} and/or a size from {list(SIZES)}")
  return row or default_row, size


def digits_cpu(config: ml_collections.ConfigDict, optimizer: ml_collections.ConfigDict, *,
               image_size: int = 32, steps: int = 400, batch_size: int = 32,
               learning_rate: float = 3e-3) -> ml_collections.ConfigDict:
  """Shrinks an ImageNet/CIFAR config to the embedded digits data with a recipe that learns
  in a few hundred steps: AdamW (the papers' SGD / RMSProp at these step counts leaves
  BatchNorm-heavy nets near chance), cosine decay, no dropout, eval at the end.
  `optimizer`: a fresh `schema.optimizer()`, which replaces the paper's."""
  config.dataset.name = "digits"
  config.dataset.train_split, config.dataset.eval_split = "train", "test"
  config.dataset.image_size = image_size
  config.dataset.crop = "resize"
  config.model.image_size, config.model.in_channels = image_size, 1
  if "dropout" in config.model:
    config.model.dropout = 0.0
  config.model.dtype = "float32"
  config.batch_size = batch_size
  config.bn_group_size = 0  # one CPU: BatchNorm over the whole batch
  config.num_train_steps = steps
  config.label_smoothing = 0.0
  config.optimizer = optimizer
  config.optimizer.update(name="adamw", learning_rate=learning_rate, weight_decay=1e-4,
                          grad_clip_norm=0.0, schedule="cosine", warmup_epochs=0.0,
                          momentum=0.9, nesterov=False)
  config.log_every_steps = 50
  config.eval_every_steps = config.checkpoint_every_steps = steps
  config.keep_checkpoints = 1
  return config


def digit_scenes(config: ml_collections.ConfigDict, steps: int = 300) -> ml_collections.ConfigDict:
  """Shrinks a segmentation paper config to the CPU: digit scenes ×2, a width-1/8 depth-14
  backbone, `steps` steps (the `:cpu` preset of every segmentation paper config; the paper's
  head and recipe otherwise kept)."""
  d = config.dataset
  d.name, d.data_dir, d.manual_dir = "digit_scenes", "", ""
  d.train_split, d.eval_split = "train", "test"
  d.resize = d.crop_size = d.eval_size = 128
  d.scale_min, d.scale_max, d.flip = 0.75, 2.0, False
  m = config.model
  m.depth, m.width = 14, 0.125
  if m.name == "deeplab_v2" and m.head == "aspp":
    m.rates = (1, 2, 3, 4)  # 16×16 features
  if "rank" in m:
    m.rank = 8
  config.init_from = ""
  config.eval.scales, config.eval.flip, config.eval.window = (1.0,), False, 0
  config.batch_size = 16
  config.num_epochs, config.num_train_steps = 0, steps
  # The paper recipes' SGD learns too slowly for a minutes-long CPU check; AdamW as
  # configs/segmentation/default.py.
  config.optimizer.name, config.optimizer.learning_rate = "adamw", 3e-3
  config.optimizer.weight_decay, config.optimizer.head_lr_multiplier = 1e-4, 1.0
  config.log_every_steps = 20
  config.eval_every_steps = config.checkpoint_every_steps = steps
  return config


def digit_scenes_tiny(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A few-step segmentation test run: digit scenes at 64², width 1/16."""
  digit_scenes(config, steps=2)
  config.model.width = 0.0625
  if "rank" in config.model:
    config.model.rank = 4
  if "heads" in config.model:
    config.model.heads = 2
  config.batch_size = 8
  config.dataset.resize = config.dataset.eval_size = 64
  config.dataset.crop_size = 48
  config.log_every_steps = 1
  config.num_summary_images = 2
  return config


def gan_digits(config: ml_collections.ConfigDict, size: str | None) -> ml_collections.ConfigDict:
  """A GAN paper config's `:cpu` / `:tiny` (`size`): its model and recipe on the embedded
  digits at 32×32; None leaves the config as it is."""
  if size not in ("cpu", "tiny"):
    return config
  config.dataset.name = "digits"
  config.dataset.image_size = 32
  config.model.width = 4
  config.batch_size = 32
  config.num_train_steps = 300
  config.eval_every_steps = 300
  config.eval.features = "digits"
  config.eval.classifier_workdir = "workdirs/default"
  config.eval.num_samples = 1000
  config.eval.num_kid_real = 1497
  config.eval.batch_size = 500
  config.log_every_steps = 50
  config.checkpoint_every_steps = 300
  if size == "tiny":
    config.model.width = 1
    config.model.latent_dim = 8
    config.batch_size = 8
    config.num_train_steps = 2
    config.eval_every_steps = 2
    config.log_every_steps = 1
    config.eval.features = "none"
    config.eval.grid_rows = 2
  return config


def tiny(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A `:cpu` config cut to a few steps (tests)."""
  config.num_train_steps = 2
  config.batch_size = 8
  config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
  return config


def compilation_cache_dir() -> str:
  """The configs' persistent compilation cache: $XDG_CACHE_HOME/attention_lab/
  jax_compilation_cache, or under ~/.cache (a per-user directory)."""
  base = epath.Path(os.environ.get("XDG_CACHE_HOME") or epath.Path("~/.cache").expanduser())
  return str(base / "attention_lab" / "jax_compilation_cache")


def run_options(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The fields every training config has for how a run executes, not what it learns:
  the persistent compilation cache ("" turns it off; JAX_COMPILATION_CACHE_DIR overrides
  it) and a profiler trace of steps (start, end) (() for none), by process 0 or by all."""
  config.compilation_cache_dir = compilation_cache_dir()
  config.profile_steps = ()
  config.profile_all_processes = False
  return config


def imagenet(config, crop: str) -> None:
  """ImageNet at 224² (TFDS imagenet2012, resized in the pipeline) with the training `crop`
  ("resize": SAO/KAO; "inception": the AA networks)."""
  d = config.dataset
  d.name, d.train_split, d.eval_split = "imagenet2012", "train", "validation"
  d.image_size, d.crop = 224, crop
