"""Semantic-segmentation preprocessing in numpy (the port of data/segmentation.py's `decode`,
`train_preprocess` and `eval_preprocess`).

Both paths first map the stored labels through `label_table` (a 256-entry lookup, e.g.
`train_id_table(CITYSCAPES_TRAIN_IDS)`; None keeps them) and, when `resize` > 0, resize
image and label to resize×resize (image bilinear without antialiasing, label nearest).
Training: scale s ~ U[scale_range] (image bilinear without antialiasing, label
nearest, new size round(s·(H, W))), padding at the bottom / right to at least
crop×crop (image with the mean pixel, 0 once normalised; label with IGNORE), a random
crop×crop window of image and label together, a left-right flip with probability ½.
Only the window is ever resized, so a large scale costs no more than the crop.
Evaluation: an image larger than `size` resized to fit (aspect kept, bilinear; label
nearest), then padded to size×size the same way.

Outputs {"image": float32 (n, n, 3) normalised, "label": int32 (n, n), 255 = ignore}.
With normalize=False the image keeps pixel values (float32, padding = mean·255) for
`image.normalize` over the whole batch. Randomness comes from `rng`, drawn in this
order: the scale, the crop offsets (y, x), the flip (when `flip`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attention_lab.data.transforms import image as image_ops

IGNORE = 255


def train_id_table(train_ids: Mapping[int, int]) -> np.ndarray:
  """The int32 lookup from the 256 stored label values to `train_ids`, every other value
  → IGNORE (Cityscapes: data/segmentation.py's CITYSCAPES_TRAIN_IDS)."""
  table = np.full(256, IGNORE, np.int32)
  for label_id, train_id in train_ids.items():
    table[label_id] = train_id
  return table


def _labels(label: np.ndarray, table: np.ndarray | None) -> np.ndarray:
  label = label.reshape(label.shape[:2])
  return table[label] if table is not None else label.astype(np.int32)


def _fixed_size(image, label, resize):
  """decode's fixed resize (0: none): image bilinear, label nearest, labels not yet mapped."""
  if not resize:
    return image, label.reshape(label.shape[:2])
  size = (resize, resize)
  return image_ops.bilinear(image, size), image_ops.nearest(label.reshape(label.shape[:2]), size)


def _canvas(pixels, labels, size, normalize, mean, std):
  """Normalised (or raw) pixels and labels padded at the bottom / right to `size`."""
  if normalize:
    pixels, fill = image_ops.normalize(pixels, mean, std), 0.0
  else:
    fill = np.float32(255.0) * np.asarray(mean, np.float32)  # the mean pixel: 0 once normalised
    pixels = pixels.astype(np.float32, copy=False)
  return image_ops.place(pixels, size, fill), image_ops.place(labels, size, IGNORE)


def train(image: np.ndarray, label: np.ndarray, rng: np.random.Generator, *, crop: int,
          mean: Sequence[float], std: Sequence[float], scale_range=(0.5, 2.0),
          flip: bool = True, resize: int = 0, label_table: np.ndarray | None = None,
          normalize: bool = True) -> dict[str, np.ndarray]:
  """`image` uint8 (H, W, 3), `label` integer (H, W) or (H, W, 1) as stored →
  {"image" (crop, crop, 3), "label" int32 (crop, crop)} (see the module docstring)."""
  image, label = _fixed_size(image, label, resize)
  shape = np.asarray(image.shape[:2], np.float32)
  scale = np.float32(rng.uniform(scale_range[0], scale_range[1]))
  height, width = (int(v) for v in np.rint(shape * scale))
  top = int(rng.integers(0, max(height, crop) - crop + 1))
  left = int(rng.integers(0, max(width, crop) - crop + 1))
  window = (top, left, min(crop, height - top), min(crop, width - left))
  pixels = image_ops.bilinear(image, (height, width), window)
  labels = _labels(image_ops.nearest(label, (height, width), window), label_table)
  pixels, labels = _canvas(pixels, labels, (crop, crop), normalize, mean, std)
  if flip and rng.random() < 0.5:
    pixels, labels = pixels[:, ::-1], labels[:, ::-1]
  return {"image": pixels, "label": labels}


def evaluate(image: np.ndarray, label: np.ndarray, *, size: int, mean: Sequence[float],
             std: Sequence[float], resize: int = 0, label_table: np.ndarray | None = None,
             normalize: bool = True) -> dict[str, np.ndarray]:
  """`image`, `label` as `train`'s → {"image" (size, size, 3), "label" int32 (size, size)}."""
  image, label = _fixed_size(image, label, resize)
  shape = np.asarray(image.shape[:2], np.float32)
  scale = min(np.float32(1.0), np.float32(size) / shape.max())
  new = tuple(int(v) for v in np.rint(shape * scale))
  if new != image.shape[:2]:
    image, label = image_ops.bilinear(image, new), image_ops.nearest(label, new)
  pixels, labels = _canvas(image, _labels(label, label_table), (size, size), normalize,
                           mean, std)
  return {"image": pixels, "label": labels}
