"""GAN input pipelines: images in [−1, 1] (RGB, side `config.dataset.image_size`) and labels.

Datasets (TFDS builders, or the embedded ones of data/builders):
- `digits` (embedded, 32×32 grey, tiled to RGB; 10 classes);
- `cifar10` (32×32, resized when image_size differs; 10 classes);
- `celeb_a`: the heykeetae SAGAN recipe the Refined-SA paper ran: centre crop
  160×160 of the 218×178 aligned face, resized to image_size; unconditional
  (label 0). TFDS's Google-Drive download often fails its checksum, so
  `config.dataset.image_dir` may instead name the `img_align_celeba/` folder of
  JPEGs: sorted by name, the official partition (first 162,770 train, next
  19,867 validation, the rest test);
- `imagenet2012` (manual TFDS download): BigGAN/SAGAN's centre crop to the
  shorter side, resized to image_size (128 for Ham Table 6); 1,000 classes.
Resizes are bilinear with antialiasing.

Training batches are {"image": (B, d_steps, S, S, 3) float32, "label": (B, d_steps) int32}:
one train step holds the real images of its `d_steps` discriminator updates, the
example axis first so that each device's shard of the batch has its share of
every D update. The stream is a pure function of (seed, step) and a resumed run
skips the batches already consumed, as in data/pipeline.py.
"""

from __future__ import annotations


import jax
from etils import epath, epy

with epy.lazy_imports():  # TensorFlow only once a pipeline is built
  import tensorflow as tf
  import tensorflow_datasets as tfds

from attention_lab.data import pipeline

DATASETS = ("digits", "cifar10", "celeb_a", "imagenet2012")
CELEBA_CROP = 160
CELEBA_PARTITION = {"train": (0, 162_770), "validation": (162_770, 182_637),
                    "test": (182_637, None)}


def check(config):
  if config.dataset.name not in DATASETS:
    raise ValueError(f"dataset.name must be one of {DATASETS} for the GAN task, got "
                     f"{config.dataset.name!r}")


def _image_dir(config) -> str:
  return config.dataset.image_dir if config.dataset.name == "celeb_a" else ""


def _celeba_files(image_dir: str, split: str) -> list[str]:
  if split not in CELEBA_PARTITION:
    raise ValueError(f"split must be one of {sorted(CELEBA_PARTITION)} with dataset.image_dir, "
                     f"got {split!r}")
  folder = epath.Path(image_dir)
  if not folder.is_dir():
    raise ValueError(f"dataset.image_dir {image_dir!r} is not a directory")
  files = sorted(f.name for f in folder.iterdir() if f.name.lower().endswith((".jpg", ".png")))
  start, stop = CELEBA_PARTITION[split]
  return [str(folder / f) for f in files[start:stop]]


def _builder(config):
  return pipeline.get_builder(config.dataset.name, config.dataset.data_dir)


def _dataset(config, split: str, *, per_process: bool, drop_remainder: bool = False):
  """The raw examples of `split` ({"image": uint8 (H, W, C), maybe "label"})."""
  if _image_dir(config):
    files = _celeba_files(_image_dir(config), split)
    if per_process:
      files = files[jax.process_index()::jax.process_count()]
    return tf.data.Dataset.from_tensor_slices(files).map(
        lambda f: {"image": tf.io.decode_image(tf.io.read_file(f), channels=3,
                                               expand_animations=False)})
  if per_process:
    return pipeline.process_examples(_builder(config), split, drop_remainder=drop_remainder)
  return _builder(config).as_dataset(split=split, shuffle_files=False)


def preprocess(config, example) -> dict[str, tf.Tensor]:
  """A raw example → {"image": float32 (S, S, 3) in [−1, 1], "label": int32} (no augmentation)."""
  name, size = config.dataset.name, config.dataset.image_size
  image = tf.cast(example["image"], tf.float32)
  if name == "celeb_a":
    h, w = tf.shape(image)[0], tf.shape(image)[1]
    crop = tf.minimum(tf.minimum(h, w), CELEBA_CROP)
    image = tf.image.crop_to_bounding_box(image, (h - crop) // 2, (w - crop) // 2, crop, crop)
  elif name == "imagenet2012":
    h, w = tf.shape(image)[0], tf.shape(image)[1]
    side = tf.minimum(h, w)
    image = tf.image.crop_to_bounding_box(image, (h - side) // 2, (w - side) // 2, side, side)
  if name in ("celeb_a", "imagenet2012") or image.shape[0] != size:
    image = tf.image.resize(image, (size, size), antialias=True)
  image = tf.reshape(image, (size, size, -1))
  if image.shape[-1] == 1:
    image = tf.tile(image, (1, 1, 3))
  image = tf.clip_by_value(image, 0.0, 255.0) / 127.5 - 1.0
  label = tf.cast(example.get("label", 0), tf.int32)
  return {"image": image, "label": label}


def train_iterator(config, *, local_batch_size: int, d_steps: int, start_step: int = 0):
  """Endless numpy batches {"image": (B, d_steps, S, S, 3), "label": (B, d_steps)} for this
  process, positioned at `start_step`."""
  check(config)
  examples = _dataset(config, config.dataset.train_split, per_process=True, drop_remainder=True)
  return pipeline.resumable_batches(
      examples, lambda example, _: preprocess(config, example), seed=config.seed,
      shuffle_buffer=config.dataset.shuffle_buffer, batch_shape=(local_batch_size, d_steps),
      start_step=start_step)


def real_images(config, split: str, *, limit: int, batch_size: int = 256):
  """The first `limit` images of `split` (every process reads the same ones), as numpy
  batches {"image": float32 (b, S, S, 3) in [−1, 1], "label": (b,)}: the real side of FID."""
  check(config)
  ds = _dataset(config, split, per_process=False)
  if limit:
    ds = ds.take(limit)
  ds = ds.map(lambda ex: preprocess(config, ex), num_parallel_calls=tf.data.AUTOTUNE)
  return tfds.as_numpy(ds.batch(batch_size).with_options(pipeline.tf_data_options()))
