"""Detection input: `coco/2017` and the embedded `digit_scenes` (facts in data/info.py).

Both datasets give `objects/bbox` as TFDS's normalised (ymin, xmin, ymax, xmax) and
`objects/label`; COCO also `objects/is_crowd` and `objects/area`.

Training (transforms/detection.py; the stream is data/pipeline.py's, a pure function of
(seed, step) resumed in O(1)): scale jitter — the image is resized so that its longer
side is s·S, s ~ U[scale_min, scale_max], S = `dataset.image_size` — then a random S×S
crop (when larger) and zero padding to S×S at the bottom / right (when smaller), then a
horizontal flip with probability ½ (`dataset.flip`). Boxes follow every step in pixels
of the S×S input; boxes cut to less than `min_box_size` pixels in height or width by the
crop are dropped. Crowd boxes are dropped in training (Detectron's RetinaNet ignores
them). Up to `dataset.max_boxes` boxes are kept, padded, with a `box_mask`. Images are
normalised with ImageNet's statistics (the backbones'), once per batch.

Evaluation at full size: the longer side resized to S (aspect kept), padded to S×S;
`scale` = S / longer side maps detections back to the original pixels, where the ground
truth (every box, crowd ones flagged) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attention_lab.data import info, pipeline, sources
from attention_lab.data.transforms import detection as transforms
from attention_lab.data.transforms import image as image_ops

MEAN, STD = info.IMAGENET_STATS  # the backbones' normalisation, whatever the dataset


def normalize(batch):
  return {**batch, "image": image_ops.normalize(batch["image"], MEAN, STD)}


def denormalize(image: np.ndarray) -> np.ndarray:
  """Inverse of `normalize` → uint8 (for pictures)."""
  return np.clip((np.asarray(image) * STD + MEAN) * 255.0, 0, 255).round().astype(np.uint8)


def objects(example) -> dict[str, np.ndarray]:
  """The example's boxes (N, 4), labels (N,) and, where stored, is_crowd and area."""
  stored = example["objects"]
  out = {"boxes": np.asarray(stored["bbox"], np.float32).reshape(-1, 4),
         "labels": np.asarray(stored["label"], np.int32).reshape(-1)}
  for key, dtype in (("is_crowd", bool), ("area", np.float32)):
    if key in stored:
      out[key] = np.asarray(stored[key], dtype).reshape(-1)
  return out


def _records(config, split: str) -> Sequence:
  info.lookup(config.dataset.name, "detection")
  return sources.records(config.dataset, split)


def train_iterator(config, *, local_batch_size: int, start_step: int = 0,
                   records: Sequence | None = None):
  """Endless iterator of this process's numpy batches from `start_step` on.

  `records`: examples to use instead of the prepared train split (tests).
  """
  d = config.dataset

  def augment(example, rng):
    found = objects(example)
    return transforms.train(example["image"], found["boxes"], found["labels"], rng,
                            size=d.image_size, scale_range=tuple(d.scale_range), flip=d.flip,
                            max_boxes=d.max_boxes, min_box_size=d.min_box_size, mean=MEAN,
                            std=STD, is_crowd=found.get("is_crowd"), normalize=False)

  return pipeline.resumable_batches(
      _records(config, d.train_split) if records is None else records, augment,
      seed=config.seed, batch_shape=(local_batch_size,), start_step=start_step,
      workers=d.workers, batch_map=normalize)


def preprocess(config, example) -> dict[str, np.ndarray]:
  """An example → its evaluation input and ground truth (transforms.detection.evaluate),
  the image's pixel values not yet normalised."""
  d, found = config.dataset, objects(example)
  return transforms.evaluate(example["image"], found["boxes"], found["labels"],
                             size=d.image_size, max_boxes=d.eval_max_boxes, mean=MEAN,
                             std=STD, is_crowd=found.get("is_crowd"), area=found.get("area"),
                             normalize=False)


def eval_batches(config, *, local_batch_size: int, records: Sequence | None = None,
                 limit: int | None = None):
  """One pass over this process's share of the eval split (of its first `limit`
  examples), padded to full batches with a 'mask'."""
  d = config.dataset
  return pipeline.padded_batches(
      _records(config, d.eval_split) if records is None else records,
      lambda example: preprocess(config, example), batch_size=local_batch_size, limit=limit,
      batch_map=normalize, workers=d.workers)
