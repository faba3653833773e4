"""Semantic segmentation input: random scale, pad, crop, flip; full-size evaluation.

Datasets (config.dataset.name; their facts in data/info.py): `digit_scenes` (embedded,
11 mask classes: background and the digits 0-9), `voc_segmentation` (21),
`ade20k_challenge` (150), `pascal_context` (59), `cityscapes/semantic_segmentation`
(TFDS, manual; its raw labelIds are mapped to the 19 trainIds, everything else 255).
Labels are int32 (H, W) with 255 = ignore.

Training (DeepLab / Ham recipes; transforms/segmentation.py): scale s ~
U[scale_min, scale_max] (bilinear; the mask nearest), padding at the bottom / right to
at least crop×crop with the dataset's mean pixel (0 after normalisation; DeepLab pads
with the mean pixel) and the mask with 255, a random crop×crop window of both, a
left-right flip with probability 1/2. The per-channel normalisation runs once per batch.
The stream is data/pipeline.py's: a pure function of (seed, step), resumed in O(1).

`dataset.resize` (0: off) first resizes every image to a fixed square (the
digit-scenes CPU experiment doubles its 64×64 scenes; labels nearest, so each
label pixel becomes exactly four).

Evaluation at full resolution: the normalised image is padded at the bottom / right to
`eval_size` (mean) and the mask with 255 (padding never counts), so one static shape
serves every image; an image larger than `eval_size` is first resized to fit
(bilinear; the mask nearest), the only deviation from full-resolution evaluation. The
task then runs the model on the whole padded canvas or in sliding windows
(config.eval.window), optionally at several scales and flipped.
"""

from __future__ import annotations

import numpy as np

from attention_lab.data import info, pipeline, sources
from attention_lab.data.transforms import image as image_ops
from attention_lab.data.transforms import segmentation as transforms

IGNORE = transforms.IGNORE
# Cityscapes labelId → trainId (cityscapesScripts labels.py); every other id → 255.
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
                        23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


def facts(name: str) -> info.DataInfo:
  """The facts of a segmentation dataset (ValueError naming the allowed ones)."""
  return info.lookup(name, "segmentation")


def label_table(name: str) -> np.ndarray | None:
  """The lookup from stored label values to training labels (Cityscapes), or None."""
  return (transforms.train_id_table(CITYSCAPES_TRAIN_IDS) if name.startswith("cityscapes")
          else None)


def _options(config) -> dict:
  """The keyword arguments transforms.segmentation takes from `config`."""
  name = config.dataset.name
  mean, std = facts(name).stats
  return dict(mean=mean, std=std, resize=config.dataset.resize, label_table=label_table(name),
              normalize=False)


def normalizer(name: str):
  """The per-batch normalisation of the images (the padding's mean pixel becomes 0)."""
  mean, std = facts(name).stats
  return lambda batch: {**batch, "image": image_ops.normalize(batch["image"], mean, std)}


def preprocess(config, example) -> dict[str, np.ndarray]:
  """An example → its evaluation canvas {"image" (pixel values), "label"} (eval_size²)."""
  spec = facts(config.dataset.name)
  return transforms.evaluate(example[spec.image_key], example[spec.label_key],
                             size=config.dataset.eval_size, **_options(config))


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of this process's batches {"image", "label"}, positioned at start_step."""
  d, spec, options = config.dataset, facts(config.dataset.name), _options(config)

  def augment(example, rng):
    return transforms.train(example[spec.image_key], example[spec.label_key], rng,
                            crop=d.crop_size, scale_range=(d.scale_min, d.scale_max),
                            flip=d.flip, **options)

  return pipeline.resumable_batches(
      sources.records(d, d.train_split), augment, seed=config.seed,
      batch_shape=(local_batch_size,), start_step=start_step, workers=d.workers,
      batch_map=normalizer(d.name))


def eval_batches(config, *, local_batch_size: int, limit: int | None = None):
  """One pass over this process's share of the eval split (of its first `limit`
  examples): {"image", "label", "mask"}, padded to full batches (padded examples have
  mask False and every label 255)."""
  d = config.dataset
  return pipeline.padded_batches(
      sources.records(d, d.eval_split), lambda example: preprocess(config, example),
      batch_size=local_batch_size, limit=limit, pad_values={"label": IGNORE},
      batch_map=normalizer(d.name), workers=d.workers)
