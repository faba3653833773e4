"""TFDS detection pipelines: `coco/2017` and the embedded `digit_scenes`.

Both datasets give `objects/bbox` as TFDS's normalised (ymin, xmin, ymax, xmax)
and `objects/label`; COCO also `objects/is_crowd` and `objects/area`.

Training (deterministic, resumable, per process as data/pipeline.py):
scale jitter — the image is resized so that its longer side is s·S, s ~
U[scale_min, scale_max], S = `dataset.image_size` — then a random S×S crop
(when larger) and zero padding to S×S at the bottom / right (when smaller),
then a horizontal flip with probability ½ (`dataset.flip`). Boxes follow every
step in pixels of the S×S input; boxes cut to less than `min_box_size` pixels
in height or width by the crop are dropped. Crowd boxes are dropped in
training (Detectron's RetinaNet ignores them). Up to `dataset.max_boxes` boxes
are kept, padded, with a `box_mask`.

Evaluation at full size: the longer side resized to S (aspect kept), padded to
S×S; `scale` = S / longer side maps detections back to the original pixels,
where the ground truth (every box, crowd ones flagged) is kept.
"""

from __future__ import annotations


import numpy as np
from etils import epy

with epy.lazy_imports():  # TensorFlow only once a pipeline is built
  import tensorflow as tf
  import tensorflow_datasets as tfds

from attention_lab.data import pipeline

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet, as the backbones'.
DATASETS = ("digit_scenes", "coco/2017")


def _builder(config) -> tfds.core.DatasetBuilder:
  return pipeline.get_builder(config.dataset.name, config.dataset.data_dir, supported=DATASETS)


def normalize(image):
  return (tf.cast(image, tf.float32) / 255.0 - MEAN) / STD


def denormalize(image: np.ndarray) -> np.ndarray:
  """Inverse of `normalize` → uint8 (for pictures)."""
  return np.clip((np.asarray(image) * STD + MEAN) * 255.0, 0, 255).round().astype(np.uint8)


def _objects(example):
  objects = example["objects"]
  crowd = objects.get("is_crowd", tf.zeros_like(objects["label"], tf.bool))
  area = objects.get("area", tf.zeros_like(objects["label"], tf.int64))
  return (tf.cast(objects["bbox"], tf.float32), tf.cast(objects["label"], tf.int32),
          tf.cast(crowd, tf.bool), tf.cast(area, tf.float32))


def _pad_boxes(boxes, max_boxes, value=0):
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  boxes = boxes[:n]
  pad = [[0, max_boxes - n]] + [[0, 0]] * (len(boxes.shape) - 1)
  return tf.pad(boxes, pad, constant_values=value)


def train_preprocess(example, *, size: int, scale_range, flip: bool, max_boxes: int,
                     min_box_size: float, seed):
  """Scale jitter, crop / pad to size², flip; boxes in input pixels (see module docstring)."""
  image = tf.cast(example["image"], tf.float32)
  boxes, labels, crowd, _ = _objects(example)
  keep = tf.logical_not(crowd)
  boxes, labels = tf.boolean_mask(boxes, keep), tf.boolean_mask(labels, keep)
  seeds = tf.random.experimental.stateless_split(seed, 4)
  hw = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = tf.random.stateless_uniform([], seeds[0], scale_range[0], scale_range[1])
  new_hw = tf.maximum(tf.round(hw * scale * size / tf.reduce_max(hw)), 1.0)
  image = tf.image.resize(image, tf.cast(new_hw, tf.int32), antialias=True)
  boxes = boxes * tf.concat([new_hw, new_hw], 0)
  # Random crop offset where the image is larger than size, 0 elsewhere.
  room = tf.maximum(new_hw - size, 0.0)
  offset = tf.floor(tf.random.stateless_uniform([2], seeds[1]) * (room + 1.0))
  offset = tf.minimum(offset, room)
  oy, ox = tf.cast(offset[0], tf.int32), tf.cast(offset[1], tf.int32)
  image = image[oy:oy + size, ox:ox + size]
  image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
  window = tf.minimum(new_hw - offset, float(size))
  boxes = boxes - tf.concat([offset, offset], 0)
  boxes = tf.concat([tf.clip_by_value(boxes[:, :2], 0.0, window),
                     tf.clip_by_value(boxes[:, 2:], 0.0, window)], 1)
  big = tf.logical_and(boxes[:, 2] - boxes[:, 0] >= min_box_size,
                       boxes[:, 3] - boxes[:, 1] >= min_box_size)
  boxes, labels = tf.boolean_mask(boxes, big), tf.boolean_mask(labels, big)
  if flip:
    do_flip = tf.random.stateless_uniform([], seeds[2]) < 0.5
    image = tf.cond(do_flip, lambda: image[:, ::-1], lambda: image)
    flipped = tf.stack([boxes[:, 0], size - boxes[:, 3], boxes[:, 2], size - boxes[:, 1]], 1)
    boxes = tf.cond(do_flip, lambda: flipped, lambda: boxes)
  image = tf.clip_by_value(image, 0.0, 255.0)
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  return {"image": normalize(image), "boxes": _pad_boxes(boxes, max_boxes),
          "labels": _pad_boxes(labels, max_boxes), "box_mask": tf.range(max_boxes) < n}


def eval_preprocess(example, *, size: int, max_boxes: int):
  """Longer side to `size`, padded to size²; ground truth in original pixels."""
  image = tf.cast(example["image"], tf.float32)
  boxes, labels, crowd, area = _objects(example)
  hw = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = size / tf.reduce_max(hw)
  new_hw = tf.maximum(tf.round(hw * scale), 1.0)
  if image.shape[0] != size or image.shape[1] != size:
    image = tf.image.resize(image, tf.cast(new_hw, tf.int32), antialias=True)
    image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
  image = tf.clip_by_value(image, 0.0, 255.0)
  boxes = boxes * tf.concat([hw, hw], 0)
  box_area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
  area = tf.where(area > 0, area, box_area)
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  return {"image": normalize(image), "boxes": _pad_boxes(boxes, max_boxes),
          "labels": _pad_boxes(labels, max_boxes), "crowd": _pad_boxes(crowd, max_boxes),
          "area": _pad_boxes(area, max_boxes), "box_mask": tf.range(max_boxes) < n,
          "scale": scale, "image_size": hw}


def train_iterator(config, *, local_batch_size: int, start_step: int = 0, source=None):
  """Endless iterator of this process's numpy batches from `start_step` on.

  `source`: a tf.data.Dataset of TFDS-like examples to use instead of the builder (tests).
  """
  d = config.dataset
  if source is None:
    source = pipeline.process_examples(_builder(config), d.train_split, drop_remainder=True)

  def augment(example, seed):
    return train_preprocess(example, size=d.image_size, scale_range=tuple(d.scale_range),
                            flip=d.flip, max_boxes=d.max_boxes, min_box_size=d.min_box_size,
                            seed=seed)

  return pipeline.resumable_batches(source, augment, seed=config.seed,
                                    shuffle_buffer=d.shuffle_buffer,
                                    batch_shape=(local_batch_size,), start_step=start_step)


def eval_batches(config, *, local_batch_size: int, source=None, limit: int | None = None):
  """One pass over this process's eval split (its first `limit` examples), padded to full
  batches with a 'mask'."""
  d = config.dataset
  if source is None:
    source = pipeline.process_examples(_builder(config), d.eval_split)
  return pipeline.padded_batches(
      source, lambda ex: eval_preprocess(ex, size=d.image_size, max_boxes=d.eval_max_boxes),
      batch_size=local_batch_size, limit=limit)
