"""TFDS input pipelines: deterministic, resumable, per-process.

Training streams are a pure function of (config seed, step): shuffling uses a
fixed seed, augmentation uses stateless random ops seeded by (seed, example
index), and a resumed run skips the batches it has already consumed, so a run
stopped at step s and resumed sees exactly the batches of an uninterrupted run.
Each process reads its own slice of the split (`tfds.split_for_jax_process`).
"""

import dataclasses
import os

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from attention_lab.data.builders.digit_scenes import DigitScenes
from attention_lab.data.builders.digits import Digits

# Per-channel mean and std of the pixel values in [0, 1].
_STATS = {
    "digits": ((0.16,), (0.28,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
_EMBEDDED = {"digits": Digits, "digit_scenes": DigitScenes}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  num_classes: int
  image_shape: tuple[int, int, int]
  num_train_examples: int
  num_eval_examples: int


def get_builder(name: str, data_dir: str | None = None) -> tfds.core.DatasetBuilder:
  """The TFDS builder for `name`; embedded datasets are prepared locally on first use."""
  data_dir = data_dir or None  # "" in configs means the TFDS default directory.
  if name in _EMBEDDED:
    builder = _EMBEDDED[name](data_dir=data_dir)
    builder.download_and_prepare()
    return builder
  if name not in _STATS:
    raise ValueError(f"dataset name must be one of {sorted(_STATS)}, got {name!r}")
  return tfds.builder(name, data_dir=data_dir)


def dataset_info(config) -> DatasetInfo:
  builder = get_builder(config.dataset.name, config.dataset.data_dir)
  size = config.dataset.image_size
  return DatasetInfo(
      num_classes=builder.info.features["label"].num_classes,
      image_shape=(size, size, config.dataset.get("channels", 0)
                   or builder.info.features["image"].shape[-1]),
      num_train_examples=builder.info.splits[config.dataset.train_split].num_examples,
      num_eval_examples=builder.info.splits[config.dataset.eval_split].num_examples,
  )


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
    if config.dataset.get("channels", 0) == 3:  # grey → RGB, e.g. to pretrain an RGB backbone
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
  builder = get_builder(config.dataset.name, config.dataset.data_dir)
  split = tfds.split_for_jax_process(config.dataset.train_split, drop_remainder=True)
  ds = builder.as_dataset(split=split, shuffle_files=False)
  ds = ds.repeat().enumerate()  # index over the endless stream: fresh augmentation per epoch
  seed = config.seed * 1_000_003 + jax.process_index()

  def map_fn(index, example):
    pair = tf.stack([tf.constant(seed, tf.int64), index])
    return preprocess(config, example, train=True, seed=pair)

  ds = ds.shuffle(config.dataset.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  ds = ds.skip(start_step * local_batch_size)  # before the map: resuming augments nothing
  ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(local_batch_size, drop_remainder=True)
  return iter(tfds.as_numpy(ds.with_options(tf_data_options()).prefetch(2)))


def eval_batches(config, *, local_batch_size: int):
  """One pass over this process's eval split, padded to full batches with a 'mask'."""
  builder = get_builder(config.dataset.name, config.dataset.data_dir)
  split = tfds.split_for_jax_process(config.dataset.eval_split)
  ds = builder.as_dataset(split=split, shuffle_files=False)
  ds = ds.map(lambda ex: preprocess(config, ex, train=False), num_parallel_calls=tf.data.AUTOTUNE)
  for batch in tfds.as_numpy(ds.batch(local_batch_size).with_options(tf_data_options())):
    n = len(batch["label"])
    pad = local_batch_size - n
    yield {
        "image": np.pad(batch["image"], [(0, pad)] + [(0, 0)] * 3),
        "label": np.pad(batch["label"], (0, pad)),
        "mask": np.arange(local_batch_size) < n,
    }
