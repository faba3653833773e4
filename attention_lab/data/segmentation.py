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

import dataclasses

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from attention_lab.data import pipeline
from attention_lab.data.builders.ade20k_challenge import Ade20kChallenge
from attention_lab.data.builders import pascal_context
from attention_lab.data.builders.voc_segmentation import CLASSES as VOC_CLASSES
from attention_lab.data.builders.voc_segmentation import VocSegmentation

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
  builder: type | None = None  # a manual_dir builder of ours; None: TFDS or embedded


DATASETS = {
    "digit_scenes": Dataset("image", "mask", 11, ("background",) + tuple(map(str, range(10))),
                            # measured on 1,000 train scenes
                            ((0.173, 0.172, 0.178), (0.132, 0.131, 0.130))),
    "voc_segmentation": Dataset("image", "segmentation_mask", 21, VOC_CLASSES,
                                builder=VocSegmentation),
    "ade20k_challenge": Dataset("image", "segmentation_mask", 150,
                                tuple(f"class{k}" for k in range(1, 151)),
                                builder=Ade20kChallenge),
    "pascal_context": Dataset("image", "segmentation_mask", 59, pascal_context.CLASSES,
                              builder=pascal_context.PascalContext),
    "cityscapes/semantic_segmentation": Dataset("image_left", "segmentation_label", 19,
                                                CITYSCAPES_CLASSES),
}


def dataset(name: str) -> Dataset:
  if name not in DATASETS:
    raise ValueError(f"dataset.name must be one of {sorted(DATASETS)} for segmentation, "
                     f"got {name!r}")
  return DATASETS[name]


def get_builder(config) -> tfds.core.DatasetBuilder:
  """The builder of config.dataset; manual_dir builders are prepared on first use from
  `config.dataset.manual_dir` (or TFDS's default manual directory)."""
  name, data_dir = config.dataset.name, config.dataset.get("data_dir") or None
  spec = dataset(name)
  if spec.builder is None and name in pipeline._EMBEDDED:  # pylint: disable=protected-access
    return pipeline.get_builder(name, data_dir)
  builder = (tfds.builder(name, data_dir=data_dir) if spec.builder is None
             else spec.builder(data_dir=data_dir))
  if not builder.is_prepared():
    manual_dir = config.dataset.get("manual_dir") or None
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  return builder


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
  size = config.dataset.get("resize", 0)
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
  builder = get_builder(config)
  split = tfds.split_for_jax_process(config.dataset.train_split, drop_remainder=True)
  ds = builder.as_dataset(split=split, shuffle_files=False).repeat().enumerate()
  seed = config.seed * 1_000_003 + jax.process_index()
  d = config.dataset

  def map_fn(index, example):
    pair = tf.stack([tf.constant(seed, tf.int64), index])
    image, label = decode(config, example)
    image, label = train_preprocess(image, label, crop=d.crop_size,
                                    scale_range=(d.scale_min, d.scale_max), flip=d.flip,
                                    seed=pair)
    return {"image": image, "label": label}

  ds = ds.shuffle(d.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  ds = ds.skip(start_step * local_batch_size)  # before the map: resuming augments nothing
  ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(local_batch_size, drop_remainder=True)
  return iter(tfds.as_numpy(ds.with_options(pipeline.tf_data_options()).prefetch(2)))


def eval_batches(config, *, local_batch_size: int, limit: int | None = None):
  """One pass over this process's eval split: {"image", "label", "mask"}, padded to full
  batches (padded examples have mask False and every label 255)."""
  builder = get_builder(config)
  split = tfds.split_for_jax_process(config.dataset.eval_split)
  ds = builder.as_dataset(split=split, shuffle_files=False)
  if limit is not None:
    ds = ds.take(limit)
  size = config.dataset.eval_size

  def map_fn(example):
    image, label = eval_preprocess(*decode(config, example), size=size)
    return {"image": image, "label": label}

  ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE).batch(local_batch_size)
  for batch in tfds.as_numpy(ds.with_options(pipeline.tf_data_options())):
    n = len(batch["label"])
    pad = local_batch_size - n
    yield {"image": np.pad(batch["image"], [(0, pad)] + [(0, 0)] * 3),
           "label": np.pad(batch["label"], [(0, pad), (0, 0), (0, 0)], constant_values=IGNORE),
           "mask": np.arange(local_batch_size) < n}


def num_examples(config, split: str) -> int:
  return get_builder(config).info.splits[split].num_examples
