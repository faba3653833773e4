"""Restoration data: (input, target) pairs from TFDS, training patches, full test images.

config.dataset fields:
  name: "restoration_photos" (2D, embedded), "synthetic_volumes/denoising",
    "synthetic_volumes/projection" (3D, synthetic, embedded) or "care/planaria",
    "care/tribolium", "care/flywing" (manual_dir, see data/builders/care.py).
  data_dir: TFDS directory ("" = default); manual_dir: the CARE folder.
  train_split, eval_split: e.g. "train" / "test" (CARE: "test_condition_1").
  patch_size: the input patch (spatial) cut at a random place from every
    training example (a CARE patch of exactly that size is taken whole, as
    SAO Table 10's 16×64×64 / 50×64×64 patches are); a projection target is
    cut at the same Y, X.
  augment: random flips of every spatial axis but the first of 3D inputs
    (Y, X) and 90° rotations in (Y, X) when square (False: CARE's default).
  input_percentiles: (low, high) or None: evaluation inputs are normalised
    (x − p_low)/(p_high − p_low) before prediction, as CSBDeep's
    `PercentileNormalizer(1, 99.8)` does for CARE test stacks (the training
    patches of the CARE npz are already normalised that way).
  shuffle_buffer.

The training stream is a pure function of (seed, step), resumable exactly (the
examples before `start_step` are skipped before any cropping), and each process
reads its own slice of the split.
"""

from __future__ import annotations


import numpy as np
from etils import epy

with epy.lazy_imports():  # TensorFlow only once a pipeline is built
  import tensorflow as tf
  import tensorflow_datasets as tfds

from attention_lab.data import pipeline

NAMES = ("restoration_photos", "synthetic_volumes/denoising", "synthetic_volumes/projection",
         "care/planaria", "care/tribolium", "care/flywing")


def _builder(config) -> tfds.core.DatasetBuilder:
  return pipeline.get_builder(config.dataset.name, config.dataset.data_dir,
                              config.dataset.manual_dir, supported=NAMES)


def _crop_pair(example, patch, seed):
  """Random `patch` (input spatial size) of input and the aligned region of the target."""
  x, y = example["input"], example["target"]
  rank_in, rank_out = len(patch), len(y.shape) - 1
  shape = tf.shape(x)[:rank_in]
  patch_t = tf.constant(patch, tf.int32)
  limit = tf.maximum(shape - patch_t + 1, 1)
  offsets = tf.cast(tf.floor(tf.random.stateless_uniform([rank_in], seed) *
                             tf.cast(limit, tf.float32)), tf.int32)
  offsets = tf.minimum(offsets, limit - 1)
  x = tf.slice(x, tf.concat([offsets, [0]], 0), tf.concat([patch_t, [-1]], 0))
  drop = rank_in - rank_out  # projection: the target lacks the first spatial axis
  y = tf.slice(y, tf.concat([offsets[drop:], [0]], 0), tf.concat([patch_t[drop:], [-1]], 0))
  x = tf.ensure_shape(x, list(patch) + [None])
  y = tf.ensure_shape(y, list(patch[drop:]) + [None])
  return x, y


def _augment(x, y, seed):
  """Random flips of the last two spatial axes and, for square patches, 90° rotations."""
  r = tf.random.stateless_uniform([3], seed)
  ax_x, ax_y = len(x.shape) - 3, len(y.shape) - 3  # the Y axis of each (X follows)
  for i, offset in ((0, 0), (1, 1)):
    flip = r[i] < 0.5
    x = tf.cond(flip, lambda: tf.reverse(x, [ax_x + offset]), lambda: x)
    y = tf.cond(flip, lambda: tf.reverse(y, [ax_y + offset]), lambda: y)
  if x.shape[ax_x] == x.shape[ax_x + 1]:
    swap = lambda t, a: tf.transpose(t, [*range(a), a + 1, a, *range(a + 2, len(t.shape))])
    rotate = r[2] < 0.5
    x = tf.cond(rotate, lambda: swap(x, ax_x), lambda: x)
    y = tf.cond(rotate, lambda: swap(y, ax_y), lambda: y)
  return x, y


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of {"input", "target"} numpy patch batches, positioned at `start_step`."""
  patch = tuple(config.dataset.patch_size)
  augment = config.dataset.augment

  def crop(example, seed):
    x, y = _crop_pair(example, patch, seed)
    if augment:
      x, y = _augment(x, y, seed + 1)
    return {"input": x, "target": y}

  examples = pipeline.process_examples(_builder(config), config.dataset.train_split,
                                       drop_remainder=True)
  return pipeline.resumable_batches(examples, crop, seed=config.seed,
                                    shuffle_buffer=config.dataset.shuffle_buffer,
                                    batch_shape=(local_batch_size,), start_step=start_step)


def eval_examples(config):
  """Every (input, target, name) of the eval split as float32 numpy (the same on every process).

  Inputs are percentile-normalised when config.dataset.input_percentiles is set.
  """
  ds = _builder(config).as_dataset(split=config.dataset.eval_split, shuffle_files=False)
  percentiles = config.dataset.input_percentiles
  for index, example in enumerate(tfds.as_numpy(ds)):
    x = example["input"].astype(np.float32)
    if percentiles:
      lo, hi = np.percentile(x, percentiles)
      x = ((x - lo) / (hi - lo + 1e-20)).astype(np.float32)
    name = example.get("name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name or index)
    yield x, example["target"].astype(np.float32), name or str(index)
