"""Detection preprocessing in numpy (the port of data/detection.py's `train_preprocess` and
`eval_preprocess`).

Inputs as TFDS stores them: `image` uint8 (H, W, 3); `boxes` (N, 4) normalised
(ymin, xmin, ymax, xmax); `labels` (N,); `is_crowd` (N,) bool and `area` (N,) where
the dataset has them (COCO).

Training: crowd boxes dropped; scale jitter (the longer side resized to s·S, s ~
U[scale_range], S = `size`, bilinear with antialiasing); a random S×S crop where
larger and zero padding to S×S at the bottom / right where smaller; boxes followed in
pixels, clipped to the visible window, dropped when cut below `min_box_size` in height
or width; a left-right flip of the S×S canvas with probability ½ (`flip`); the first
`max_boxes` boxes kept, zero-padded, with a `box_mask`. Only the visible window is
resized. Randomness comes from `rng`, drawn in this order: the scale, the crop
offsets (y, x), the flip (when `flip`).

Evaluation: the longer side resized to S (aspect kept), padded to S×S; ground truth
in the original pixels (crowd boxes kept and flagged; `area` the stored one, else
the box's), `scale` = S / longer side maps detections back, `image_size` = (H, W).

Images are float32 normalised (pixel/255 − mean)/std; with normalize=False uint8
pixels for `image.normalize` over the whole batch (the padding is pixel 0 either way).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attention_lab.data.transforms import image as image_ops


def _pad(values: np.ndarray, max_boxes: int) -> np.ndarray:
  """The first `max_boxes` rows of `values`, zero-padded to `max_boxes`."""
  out = np.zeros((max_boxes, *values.shape[1:]), values.dtype)
  n = min(len(values), max_boxes)
  out[:n] = values[:n]
  return out


def _finish(pixels, normalize, mean, std):
  return image_ops.normalize(pixels, mean, std) if normalize else pixels


def train(image: np.ndarray, boxes: np.ndarray, labels: np.ndarray, rng: np.random.Generator,
          *, size: int, scale_range: Sequence[float], flip: bool, max_boxes: int,
          min_box_size: float, mean: Sequence[float], std: Sequence[float],
          is_crowd: np.ndarray | None = None, normalize: bool = True
          ) -> dict[str, np.ndarray]:
  """→ {"image" (size, size, 3), "boxes" float32 (max_boxes, 4) in input pixels,
  "labels" int32 (max_boxes,), "box_mask" bool (max_boxes,)}."""
  boxes, labels = np.asarray(boxes, np.float32), np.asarray(labels, np.int32)
  if is_crowd is not None:
    keep = ~np.asarray(is_crowd, bool)
    boxes, labels = boxes[keep], labels[keep]
  hw = np.asarray(image.shape[:2], np.float32)
  scale = np.float32(rng.uniform(scale_range[0], scale_range[1]))
  new_hw = np.maximum(np.rint(hw * scale * np.float32(size) / hw.max()), np.float32(1))
  room = np.maximum(new_hw - np.float32(size), np.float32(0))
  offset = np.minimum(np.floor(rng.random(2, dtype=np.float32) * (room + 1)), room)
  (top, left), (height, width) = offset.astype(int), new_hw.astype(int)
  window = np.minimum(new_hw - offset, np.float32(size))
  visible = (top, left, int(window[0]), int(window[1]))
  pixels = image_ops.place(image_ops.antialiased(image, (height, width), visible),
                           (size, size), 0)
  boxes = boxes * np.concatenate([new_hw, new_hw]) - np.concatenate([offset, offset])
  boxes = np.clip(boxes, 0, np.concatenate([window, window]))
  big = ((boxes[:, 2] - boxes[:, 0] >= min_box_size)
         & (boxes[:, 3] - boxes[:, 1] >= min_box_size))
  boxes, labels = boxes[big], labels[big]
  if flip and rng.random() < 0.5:
    pixels = pixels[:, ::-1]
    boxes = np.stack([boxes[:, 0], size - boxes[:, 3], boxes[:, 2], size - boxes[:, 1]], 1)
  return {"image": _finish(pixels, normalize, mean, std), "boxes": _pad(boxes, max_boxes),
          "labels": _pad(labels, max_boxes), "box_mask": np.arange(max_boxes) < len(boxes)}


def evaluate(image: np.ndarray, boxes: np.ndarray, labels: np.ndarray, *, size: int,
             max_boxes: int, mean: Sequence[float], std: Sequence[float],
             is_crowd: np.ndarray | None = None, area: np.ndarray | None = None,
             normalize: bool = True) -> dict[str, np.ndarray]:
  """→ {"image" (size, size, 3), "boxes" float32 (max_boxes, 4) in original pixels,
  "labels" int32, "crowd" bool, "area" float32 (max_boxes,), "box_mask" bool
  (max_boxes,), "scale" float32 (), "image_size" float32 (2,)}."""
  hw = np.asarray(image.shape[:2], np.float32)
  scale = np.float32(size) / hw.max()
  pixels = image
  if image.shape[:2] != (size, size):
    new_hw = np.maximum(np.rint(hw * scale), np.float32(1)).astype(int)
    pixels = image_ops.place(image_ops.antialiased(image, tuple(new_hw)), (size, size), 0)
  boxes = np.asarray(boxes, np.float32) * np.concatenate([hw, hw])
  box_area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
  area = box_area if area is None else np.where(np.asarray(area) > 0, area, box_area)
  crowd = np.zeros(len(boxes), bool) if is_crowd is None else np.asarray(is_crowd, bool)
  return {"image": _finish(pixels, normalize, mean, std), "boxes": _pad(boxes, max_boxes),
          "labels": _pad(np.asarray(labels, np.int32), max_boxes),
          "crowd": _pad(crowd, max_boxes), "area": _pad(area.astype(np.float32), max_boxes),
          "box_mask": np.arange(max_boxes) < len(boxes), "scale": scale, "image_size": hw}
