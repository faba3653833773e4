"""TFDS pipelines for semantic segmentation: random scale, pad, crop, flip; full-size evaluation.

Datasets (config.dataset.name): `digit_scenes` (embedded, 11 classes: background
and the digits 0-9), `voc_segmentation` (21), `ade20k_challenge` (150),
`pascal_context` (59),
`cityscapes/semantic_segmentation` (TFDS, manual; its raw labelIds are mapped
to the 19 trainIds, everything else 255). Labels are int32 (H, W) with 255 =
ignore.

Training (DeepLab / Ham recipes): the image is normalised (per-channel mean and
std), then scaled by s ~ U[scale_min, scale_max] (bilinear; the mask nearest),
padded at the bottom / right to at least crop×crop with the dataset mean (0
after normalisation; DeepLab pads with the mean pixel) and the mask with 255,
randomly cropped to crop×crop (image and mask cropped together as one
tensor, so they stay aligned) and flipped left-right with probability 1/2.
Randomness is stateless, seeded by (config seed, example index): a resumed run
sees the same batches.

`dataset.resize` (0: off) first resizes every image to a fixed square (the
digit-scenes CPU experiment doubles its 64×64 scenes; labels nearest, so each
label pixel becomes exactly four).

Evaluation at full resolution: the normalised image is padded at the bottom /
right to `eval_size` (mean) and the mask with 255 (padding never counts),
so one static shape serves every image; an image larger than `eval_size` is
first resized to fit (bilinear; the mask nearest), the only deviation from
full-resolution evaluation. The task then runs the model on the whole padded
canvas or in sliding windows (config.eval.window), optionally at several
scales and flipped.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from etils import epy

with epy.lazy_imports():  # TensorFlow only once a pipeline is built
  import tensorflow as tf
  import tensorflow_datasets as tfds

from attention_lab.data import pipeline
from attention_lab.data.info import PASCAL_CONTEXT_CLASSES
from attention_lab.data.info import VOC_CLASSES

IGNORE = 255
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# Cityscapes labelId → trainId (cityscapesScripts labels.py); every other id → 255.
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
                        23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic_light",
                      "traffic_sign", "vegetation", "terrain", "sky", "person", "rider", "car",
                      "truck", "bus", "train", "motorcycle", "bicycle")


@dataclasses.dataclass(frozen=True)
class Dataset:
  image_key: str
  label_key: str
  num_classes: int
  class_names: tuple[str, ...]
  stats: tuple[tuple[float, ...], tuple[float, ...]] = IMAGENET_STATS


DATASETS = {
    "digit_scenes": Dataset("image", "mask", 11, ("background",) + tuple(map(str, range(10))),
                            # measured on 1,000 train scenes
                            ((0.173, 0.172, 0.178), (0.132, 0.131, 0.130))),
    "voc_segmentation": Dataset("image", "segmentation_mask", 21, VOC_CLASSES),
    "ade20k_challenge": Dataset("image", "segmentation_mask", 150,
                                tuple(f"class{k}" for k in range(1, 151))),
    "pascal_context": Dataset("image", "segmentation_mask", 59, PASCAL_CONTEXT_CLASSES),
    "cityscapes/semantic_segmentation": Dataset("image_left", "segmentation_label", 19,
                                                CITYSCAPES_CLASSES),
}


def dataset(name: str) -> Dataset:
  if name not in DATASETS:
    raise ValueError(f"dataset.name must be one of {sorted(DATASETS)} for segmentation, "
                     f"got {name!r}")
  return DATASETS[name]


def _builder(config) -> tfds.core.DatasetBuilder:
  return pipeline.get_builder(config.dataset.name, config.dataset.data_dir,
                              config.dataset.manual_dir, supported=DATASETS)


def _label_table(name: str):
  """A 256-entry lookup from stored label values to training labels, or None."""
  if name.startswith("cityscapes"):
    table = np.full(256, IGNORE, np.int32)
    for label_id, train_id in CITYSCAPES_TRAIN_IDS.items():
      table[label_id] = train_id
    return tf.constant(table)
  return None


def decode(config, example):
  """(image float32 (H, W, 3) normalised, label int32 (H, W, 1) with 255 = ignore)."""
  spec = dataset(config.dataset.name)
  image = tf.cast(example[spec.image_key], tf.float32)
  mean, std = spec.stats
  image = (image / 255.0 - mean) / std
  label = tf.cast(example[spec.label_key], tf.int32)
  table = _label_table(config.dataset.name)
  if table is not None:
    label = tf.gather(table, label)
  size = config.dataset.resize
  if size:  # fixed-size inputs (digit scenes ×2): image bilinear, labels nearest
    image = tf.image.resize(image, (size, size), "bilinear")
    label = tf.image.resize(label, (size, size), "nearest")
  return image, label


def _pad_to(image, label, height, width):
  """Bottom / right padding: image with 0 (the mean after normalisation), label with 255."""
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  pads = [[0, tf.maximum(height - h, 0)], [0, tf.maximum(width - w, 0)], [0, 0]]
  return tf.pad(image, pads), tf.pad(label, pads, constant_values=IGNORE)


def train_preprocess(image, label, *, crop: int, scale_range=(0.5, 2.0), flip: bool = True,
                     seed):
  """Random scale, pad, crop (image and label together), flip → (crop, crop, 3), (crop, crop)."""
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = tf.random.stateless_uniform([], seed=seed, minval=scale_range[0],
                                      maxval=scale_range[1])
  size = tf.cast(tf.round(shape * scale), tf.int32)
  image = tf.image.resize(image, size, "bilinear")
  label = tf.image.resize(label, size, "nearest")
  image, label = _pad_to(image, label, crop, crop)
  both = tf.concat([image, tf.cast(label, tf.float32)], axis=-1)
  both = tf.image.stateless_random_crop(both, (crop, crop, image.shape[-1] + 1), seed=seed + 1)
  if flip:
    both = tf.image.stateless_random_flip_left_right(both, seed=seed + 2)
  return both[..., :-1], tf.cast(tf.round(both[..., -1]), tf.int32)


def eval_preprocess(image, label, *, size: int):
  """Full resolution, padded to size×size (resized to fit first if larger)."""
  shape = tf.shape(image)[:2]
  scale = tf.minimum(1.0, size / tf.cast(tf.reduce_max(shape), tf.float32))
  new = tf.cast(tf.round(tf.cast(shape, tf.float32) * scale), tf.int32)
  image = tf.image.resize(image, new, "bilinear")
  label = tf.image.resize(label, new, "nearest")
  image, label = _pad_to(image, label, size, size)
  return tf.ensure_shape(image, (size, size, 3)), tf.ensure_shape(label[..., 0], (size, size))


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of this process's batches {"image", "label"}, positioned at start_step."""
  d = config.dataset

  def augment(example, seed):
    image, label = train_preprocess(*decode(config, example), crop=d.crop_size,
                                    scale_range=(d.scale_min, d.scale_max), flip=d.flip,
                                    seed=seed)
    return {"image": image, "label": label}

  examples = pipeline.process_examples(_builder(config), d.train_split, drop_remainder=True)
  return pipeline.resumable_batches(examples, augment, seed=config.seed,
                                    shuffle_buffer=d.shuffle_buffer,
                                    batch_shape=(local_batch_size,), start_step=start_step)


def eval_batches(config, *, local_batch_size: int, limit: int | None = None):
  """One pass over this process's eval split (its first `limit` examples): {"image",
  "label", "mask"}, padded to full batches (padded examples have mask False and every
  label 255)."""

  def preprocess(example):
    image, label = eval_preprocess(*decode(config, example), size=config.dataset.eval_size)
    return {"image": image, "label": label}

  examples = pipeline.process_examples(_builder(config), config.dataset.eval_split)
  return pipeline.padded_batches(examples, preprocess, batch_size=local_batch_size, limit=limit,
                                 pad_values={"label": IGNORE})


def num_examples(config, split: str) -> int:
  return _builder(config).info.splits[split].num_examples
