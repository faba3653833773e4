"""TFDS input pipelines: one builder lookup, one resumable training stream, padded
evaluation batches; and the classification pipeline.

Training streams are a pure function of (config seed, process, step): shuffling uses
a fixed seed, augmentation uses stateless random ops seeded by (seed, example
index), and a resumed run skips the examples it has already consumed, so a run
stopped at step s and resumed sees exactly the batches of an uninterrupted run.
Each process reads its own slice of the split (`tfds.split_for_jax_process`).
Every task module (classification here, segmentation, detection, restoration,
gan) builds its stream with `resumable_batches` and its evaluation batches with
`padded_batches`, passing its own decode and augmentation functions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Iterator, Mapping

import jax
import numpy as np
from absl import logging
from etils import epath, epy

with epy.lazy_imports():  # TensorFlow only once a pipeline is built
  import tensorflow as tf
  import tensorflow_datasets as tfds


# Per-channel mean and std of the pixel values in [0, 1].
_STATS = {
    "digits": ((0.16,), (0.28,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


def normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """(mean, std) per channel, of pixels in [0, 1], that `name`'s classification images are
  normalised with (what a model trained on them expects)."""
  if name not in _STATS:
    raise ValueError(f"dataset.name must be one of {sorted(_STATS)}, got {name!r}")
  return _STATS[name]

def get_builder(name: str, data_dir: str | None = None, manual_dir: str | None = None, *,
                supported: Collection[str] | None = None) -> tfds.core.DatasetBuilder:
  """The TFDS builder of dataset `name` ("family" or "family/config"), ready to read.

  `supported`: the names the caller's task reads (others are a ValueError).

  Our builders (data/builders) are prepared on first use: the generated ones here,
  the manual-download ones from `manual_dir` (TFDS's default manual directory,
  <data_dir>/downloads/manual, when empty). TFDS catalogue datasets that need a
  manual download (Cityscapes, ImageNet) are prepared from `manual_dir` too; the
  others are read as `tfds build` prepared them. "" means the TFDS default.
  """
  from attention_lab.data.builders import BUILDERS  # pylint: disable=g-import-not-at-top
  if logging.get_verbosity() < logging.INFO:
    tfds.disable_progress_bar()
  if supported is not None and name not in supported:
    raise ValueError(f"dataset.name must be one of {sorted(supported)}, got {name!r}")
  data_dir, manual_dir = data_dir or None, manual_dir or None
  family, _, variant = name.partition("/")
  if family not in BUILDERS:
    builder = tfds.builder(name, data_dir=data_dir)
    if builder.MANUAL_DOWNLOAD_INSTRUCTIONS and not builder.is_prepared():
      builder.download_and_prepare(
          download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    return builder
  builder = BUILDERS[family](data_dir=data_dir, **({"config": variant} if variant else {}))
  if not builder.MANUAL_DOWNLOAD_INSTRUCTIONS:
    builder.download_and_prepare()
  elif not builder.is_prepared():
    manual_dir = manual_dir or str(epath.Path(builder.data_dir_root) / "downloads" / "manual")
    if not epath.Path(manual_dir).is_dir():
      raise ValueError(f"manual_dir must name the downloaded files of {name!r} (see "
                       f"{BUILDERS[family].__module__}); {manual_dir} is not a folder")
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  return builder


def process_examples(builder: tfds.core.DatasetBuilder, split: str, *,
                     drop_remainder: bool = False) -> tf.data.Dataset:
  """This process's slice of `split`, in stored order (drop_remainder: equal slices)."""
  split = tfds.split_for_jax_process(split, drop_remainder=drop_remainder)
  return builder.as_dataset(split=split, shuffle_files=False)


def resumable_batches(examples: tf.data.Dataset, augment: Callable, *, seed: int,
                      shuffle_buffer: int, batch_shape: tuple[int, ...],
                      start_step: int = 0) -> Iterator[dict[str, np.ndarray]]:
  """Endless numpy batches of `augment(example, seed)` over this process's `examples`.

  The examples repeat endlessly, shuffled with the seed `seed`·1,000,003 + process
  index; `augment` receives a stateless seed (int64 [2]: that seed and the example's
  index in the endless stream, so every epoch augments afresh). A stream resumed at
  `start_step` skips the raw examples of the earlier steps before `augment`:
  resuming augments nothing. `batch_shape` is one step's leading axes: (B,), or
  (B, K) for K consecutive examples per row (the GAN's K discriminator updates).
  """
  seed = seed * 1_000_003 + jax.process_index()

  def augment_indexed(index, example):
    return augment(example, tf.stack([tf.constant(seed, tf.int64), index]))

  ds = examples.repeat().enumerate()
  ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  ds = ds.skip(start_step * math.prod(batch_shape))
  ds = ds.map(augment_indexed, num_parallel_calls=tf.data.AUTOTUNE)
  for size in reversed(batch_shape):
    ds = ds.batch(size, drop_remainder=True)
  return iter(tfds.as_numpy(ds.with_options(tf_data_options()).prefetch(2)))


def padded_batches(examples: tf.data.Dataset, preprocess: Callable, *, batch_size: int,
                   limit: int | None = None, pad_values: Mapping[str, int] | None = None
                   ) -> Iterator[dict[str, np.ndarray]]:
  """One pass over `examples` (the first `limit` of them) mapped by `preprocess`, in
  numpy batches of exactly `batch_size`: the last one is padded (with 0, or
  pad_values[key]) and every batch has a bool "mask" of its real examples."""
  if limit is not None:
    examples = examples.take(limit)
  ds = examples.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
  for batch in tfds.as_numpy(ds.with_options(tf_data_options())):
    n = len(next(iter(batch.values())))
    pad = batch_size - n
    out = {k: np.pad(v, [(0, pad)] + [(0, 0)] * (v.ndim - 1),
                     constant_values=(pad_values or {}).get(k, 0)) for k, v in batch.items()}
    out["mask"] = np.arange(batch_size) < n
    yield out


def _builder(config) -> tfds.core.DatasetBuilder:
  return get_builder(config.dataset.name, config.dataset.data_dir, supported=_STATS)


def _normalize(name, image):
  mean, std = _STATS[name]
  return (tf.cast(image, tf.float32) / 255.0 - mean) / std


def _resize_shorter(image, size):
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = size / tf.reduce_min(shape)
  new = tf.cast(tf.round(shape * scale), tf.int32)
  return tf.image.resize(image, new, antialias=True)


def _center_crop(image, size):
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  return tf.image.crop_to_bounding_box(image, (h - size) // 2, (w - size) // 2, size, size)


def _inception_crop(image, size, seed):
  begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.shape(image), tf.zeros([0, 0, 4], tf.float32), seed=seed,
      area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.0,
      use_image_if_no_bounding_boxes=True)
  image = tf.slice(image, begin, crop)
  return tf.image.resize(image, (size, size), antialias=True)


def preprocess(config, example, *, train: bool, seed=None):
  """Maps a TFDS example to {'image': float32 (H, W, C), 'label': int32}.

  digits: normalisation only (flips would change the digit). CIFAR: 4-pixel
  reflect pad, random 32 crop and flip (train). ImageNet, config.dataset.crop
  = "resize" (SAO/KAO recipe): shorter side 256 then random 224 crop + flip;
  "inception" (AA ResNets): random area/aspect crop resized to 224 + flip;
  evaluation: shorter side 256 (size·256/224), centre crop.
  """
  name, size = config.dataset.name, config.dataset.image_size
  image = example["image"]
  if name == "digits":
    image = tf.image.resize(image, (size, size)) if size != 32 else tf.cast(image, tf.float32)
    if config.dataset.channels == 3:  # grey → RGB, e.g. to pretrain an RGB backbone
      image = tf.image.grayscale_to_rgb(image)
  elif name.startswith("cifar"):
    image = tf.cast(image, tf.float32)
    if train:
      image = tf.pad(image, [[4, 4], [4, 4], [0, 0]], mode="REFLECT")
      image = tf.image.stateless_random_crop(image, (32, 32, 3), seed=seed)
      image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
    if size != 32:
      image = tf.image.resize(image, (size, size))
  else:
    image = tf.cast(image, tf.float32)
    if train and config.dataset.crop == "inception":
      image = _inception_crop(image, size, seed)
    elif train:
      image = _resize_shorter(image, round(size * 256 / 224))
      image = tf.image.stateless_random_crop(image, (size, size, 3), seed=seed)
    else:
      image = _center_crop(_resize_shorter(image, round(size * 256 / 224)), size)
    if train:
      image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
  image = tf.clip_by_value(image, 0.0, 255.0)
  return {"image": _normalize(name, image), "label": tf.cast(example["label"], tf.int32)}


def tf_data_options() -> tf.data.Options:
  """The options of every input pipeline here (train and eval, every task)."""
  options = tf.data.Options()
  options.deterministic = True
  # One thread per core this process may use (2 here; a TPU host's ImageNet decoding needs
  # its dozens). Parallel maps run on this pool: the autotuner is off (below).
  options.threading.private_threadpool_size = (
      len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
  # No autotuner: destroying an autotuned iterator blocked, idle, in RootDataset::Iterator's
  # destructor, waiting for a background thread (by all signs the autotuner's model thread,
  # whose sleep grows to 60 s). Every eval pass and every run's end destroy one: the default
  # segmentation run idled 8-20 s after each evaluation and 19 s + 50 s at the ends of its
  # two runs. The data are the same.
  options.autotune.enabled = False
  return options


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of numpy batches for this process, positioned at `start_step`."""
  examples = process_examples(_builder(config), config.dataset.train_split, drop_remainder=True)
  return resumable_batches(
      examples, lambda example, seed: preprocess(config, example, train=True, seed=seed),
      seed=config.seed, shuffle_buffer=config.dataset.shuffle_buffer,
      batch_shape=(local_batch_size,), start_step=start_step)


def eval_batches(config, *, local_batch_size: int):
  """One pass over this process's eval split, padded to full batches with a 'mask'."""
  examples = process_examples(_builder(config), config.dataset.eval_split)
  return padded_batches(examples, lambda example: preprocess(config, example, train=False),
                        batch_size=local_batch_size)
