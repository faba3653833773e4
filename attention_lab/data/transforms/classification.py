"""Classification preprocessing in numpy (the port of data/pipeline.py `preprocess`).

digits: resized bilinearly (no antialiasing) when stored at another size, grey tiled
to RGB when `channels` = 3 (no augmentation: flips would change the digit). CIFAR
(training): 4-pixel reflect padding, a random 32×32 crop and a left-right flip with
probability ½; resized bilinearly when `size` ≠ 32. ImageNet: `crop` = "resize"
(SAO/KAO recipe): shorter side to round(size·256/224) with antialiasing, a random
size×size crop and a flip; "inception" (AA ResNets): a random crop of 8-100% of the
area and aspect ratio 3/4-4/3 (sampled as tf.image.sample_distorted_bounding_box
does, `inception_box`) resized to size×size with antialiasing, and a flip;
evaluation: shorter side to round(size·256/224), centre crop.

Outputs {"image": float32 (size, size, C) normalised (pixel/255 − mean)/std,
"label": int32}. With normalize=False the image keeps its pixel values (uint8
where no resize interpolated it, float32 otherwise) for `image.normalize` over the
whole batch. Randomness comes from the np.random.Generator `rng`, drawn in this order:
crop (offsets y, x, or the inception box), then the flip.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attention_lab.data.transforms import image as image_ops

CROPS = ("resize", "inception")


def _output(pixels, label, normalize, mean, std) -> dict[str, np.ndarray]:
  if normalize:
    pixels = image_ops.normalize(pixels, mean, std)
  return {"image": pixels, "label": np.asarray(label, np.int32)}


def _shorter_side_to(shape: Sequence[int], side: int) -> tuple[int, int]:
  """round(shape · side / min(shape)) in float32, ties to even (TF's `_resize_shorter`)."""
  shape = np.asarray(shape[:2], np.float32)
  new = np.rint(shape * (np.float32(side) / shape.min()))
  return int(new[0]), int(new[1])


def _flip(pixels, rng):
  return pixels[:, ::-1] if rng.random() < 0.5 else pixels


def _small(pixels, size, channels=None):
  """digits / CIFAR: bilinear resize to size×size where stored at another size; grey → RGB."""
  if pixels.shape[:2] != (size, size):
    pixels = image_ops.bilinear(pixels, (size, size))
  if channels == 3 and pixels.shape[-1] == 1:
    pixels = np.repeat(pixels, 3, axis=-1)
  return pixels


def _cifar_crop(pixels, rng):
  padded = np.pad(pixels, ((4, 4), (4, 4), (0, 0)), mode="reflect")
  y, x = rng.integers(0, 9, size=2)
  return _flip(padded[y:y + 32, x:x + 32], rng)


def inception_box(shape: Sequence[int], rng: np.random.Generator, *,
                  area_range=(0.08, 1.0), aspect_range=(3 / 4, 4 / 3),
                  max_attempts: int = 100) -> tuple[int, int, int, int]:
  """(top, left, height, width) of a random crop of an image of `shape` (H, W, ...), drawn
  as TF's sample_distorted_bounding_box draws it with no boxes and min_object_covered=0.

  Each attempt draws an aspect ratio r ~ U[aspect_range] (width/height), then a height
  uniform over the integers from round(√(min area / r)) to the largest height whose
  round(r·height) fits the width, clipped to H (so the height, not the area, is
  uniform), width round(r·height); one step up or down rescues rounding out of the
  area range. The offsets are uniform over [0, H − height) and [0, W − width): as in
  TF, a crop smaller than the image never touches its bottom / right edge. After
  `max_attempts` failures, the whole image.
  """
  height_in, width_in = int(shape[0]), int(shape[1])
  min_area = np.float32(area_range[0]) * np.float32(width_in) * np.float32(height_in)
  max_area = np.float32(area_range[1]) * np.float32(width_in) * np.float32(height_in)
  low, high = np.float32(aspect_range[0]), np.float32(aspect_range[1])
  for _ in range(max_attempts):
    ratio = rng.random(dtype=np.float32) * (high - low) + low
    box = _crop_of_ratio(height_in, width_in, min_area, max_area, ratio, rng)
    if box is not None:
      return box
  return 0, 0, height_in, width_in


def _crop_of_ratio(height_in, width_in, min_area, max_area, ratio, rng):
  """One attempt of TF's GenerateRandomCrop (float32 arithmetic, lrintf = np.rint)."""
  rint = lambda v: int(np.rint(np.float32(v)))
  height = rint(np.sqrt(min_area / ratio))
  max_height = rint(np.sqrt(max_area / ratio))
  if rint(max_height * ratio) > width_in:  # the largest height whose width fits
    max_height = int((width_in + 0.5 - float(np.float32(1e-7))) / float(ratio))
    if rint(max_height * ratio) > width_in:
      max_height -= 1
  max_height = min(max_height, height_in)
  height = min(height, max_height)
  if height < max_height:
    height += int(rng.integers(0, max_height - height + 1))
  width = rint(height * ratio)
  area = np.float32(width * height)
  if area < min_area:
    height += 1
    width = rint(height * ratio)
    area = np.float32(width * height)
  if area > max_area:
    height -= 1
    width = rint(height * ratio)
    area = np.float32(width * height)
  if (area < min_area or area > max_area or width > width_in or height > height_in
      or width <= 0 or height <= 0):
    return None
  top = int(rng.integers(0, height_in - height)) if height < height_in else 0
  left = int(rng.integers(0, width_in - width)) if width < width_in else 0
  return top, left, height, width


def _imagenet_train(pixels, size, crop, rng):
  if crop == "inception":
    top, left, height, width = inception_box(pixels.shape, rng)
    pixels = image_ops.antialiased(pixels[top:top + height, left:left + width], (size, size))
  else:
    new = _shorter_side_to(pixels.shape, round(size * 256 / 224))
    y = int(rng.integers(0, new[0] - size + 1))
    x = int(rng.integers(0, new[1] - size + 1))
    pixels = image_ops.antialiased(pixels, new, (y, x, size, size))
  return _flip(pixels, rng)


def train(image: np.ndarray, label, rng: np.random.Generator, *, dataset: str, size: int,
          mean: Sequence[float], std: Sequence[float], crop: str = "resize",
          channels: int | None = None, normalize: bool = True) -> dict[str, np.ndarray]:
  """A training example: `image` uint8 (H, W, C) as stored, `label` an integer →
  {"image" (size, size, C'), "label" int32 ()}. `dataset`: "digits", "cifar10",
  "cifar100" or an ImageNet-like name; `crop`: the ImageNet recipe, one of CROPS;
  `channels`: 3 tiles grey digits to RGB."""
  if crop not in CROPS:
    raise ValueError(f"crop must be one of {CROPS}, got {crop!r}")
  if dataset == "digits":
    pixels = _small(image, size, channels)
  elif dataset.startswith("cifar"):
    pixels = _small(_cifar_crop(image, rng), size)
  else:
    pixels = _imagenet_train(image, size, crop, rng)
  return _output(pixels, label, normalize, mean, std)


def evaluate(image: np.ndarray, label, *, dataset: str, size: int, mean: Sequence[float],
             std: Sequence[float], channels: int | None = None, normalize: bool = True
             ) -> dict[str, np.ndarray]:
  """An evaluation example (deterministic), arguments as `train`'s."""
  if dataset == "digits":
    pixels = _small(image, size, channels)
  elif dataset.startswith("cifar"):
    pixels = _small(image, size)
  else:
    new = _shorter_side_to(image.shape, round(size * 256 / 224))
    window = ((new[0] - size) // 2, (new[1] - size) // 2, size, size)
    pixels = image_ops.antialiased(image, new, window)
  return _output(pixels, label, normalize, mean, std)
