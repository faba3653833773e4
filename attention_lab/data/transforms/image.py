"""Resizing as tf.image.resize does it, and per-channel normalisation, in numpy.

Every resize follows TensorFlow's half-pixel convention: output pixel i of an axis
resized from n to m samples the input at (i + ½)·n/m − ½, edges clamped.
- `bilinear`: tf.image.resize(method="bilinear", antialias=False). Computed in
  float32 in TF's order (two lerps across, one down), so bit-equal to TF.
- `antialiased`: tf.image.resize(method="bilinear", antialias=True): a triangle
  kernel widened by the downscale factor (plain bilinear when enlarging), the
  weights of the in-image taps renormalised at the borders. Computed by Pillow on
  uint8 pixels; Pillow's two separable passes each round to uint8, so the result is
  within one pixel level of TF's float32 one (about 0.3 on average).
- `nearest`: tf.image.resize(method="nearest"), input index ⌊(i + ½)·n/m⌋; exact.
Each takes an optional output `window` = (top, left, height, width): only that part
of the resized image is computed, in O(height·width) time, so a random crop of a
large rescale costs only the crop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

Window = tuple[int, int, int, int]  # (top, left, height, width) of the output


def _window(size: Sequence[int], window: Window | None) -> Window:
  return (0, 0, int(size[0]), int(size[1])) if window is None else tuple(map(int, window))


def _centres(n_in: int, n_out: int, start: int, count: int) -> np.ndarray:
  """Input coordinates (float32, TF's arithmetic) of output pixels start..start+count−1."""
  scale = np.float32(n_in) / np.float32(n_out)
  return (np.arange(start, start + count, dtype=np.float32) + np.float32(0.5)) * scale


def _flat_columns(columns: np.ndarray, channels: int) -> np.ndarray:
  """Indices into a row flattened to W·C values of the given pixel columns, all channels."""
  return (columns[:, None] * channels + np.arange(channels)).ravel()


def bilinear(image: np.ndarray, size: Sequence[int], window: Window | None = None) -> np.ndarray:
  """`image` (H, W, C), any real dtype, resized to `size` = (h, w) bilinearly without
  antialiasing → float32 (h, w, C), or its `window`. O(window area · C)."""
  top, left, height, width = _window(size, window)
  in_h, in_w, channels = image.shape
  y = _centres(in_h, size[0], top, height) - np.float32(0.5)
  x = _centres(in_w, size[1], left, width) - np.float32(0.5)
  y_floor, x_floor = np.floor(y), np.floor(x)
  y_lerp, x_lerp = y - y_floor, np.repeat(x - x_floor, channels)
  lower = np.maximum(y_floor, 0).astype(np.intp)
  upper = np.minimum(np.ceil(y), in_h - 1).astype(np.intp)
  rows, where = np.unique(np.concatenate([lower, upper]), return_inverse=True)
  flat = image.reshape(in_h, in_w * channels)[rows]
  west = flat.take(_flat_columns(np.maximum(x_floor, 0).astype(np.intp), channels), axis=1)
  east = flat.take(_flat_columns(np.minimum(np.ceil(x), in_w - 1).astype(np.intp), channels),
                   axis=1)
  west = west.astype(np.float32)
  across = west + (east.astype(np.float32) - west) * x_lerp
  upper_rows, lower_rows = across[where[:height]], across[where[height:]]
  out = upper_rows + (lower_rows - upper_rows) * y_lerp[:, None]
  return out.reshape(height, width, channels)


def nearest(image: np.ndarray, size: Sequence[int], window: Window | None = None) -> np.ndarray:
  """`image` (H, W) or (H, W, C) resized to `size` by nearest neighbour (same dtype), or
  its `window`. O(window area)."""
  top, left, height, width = _window(size, window)
  rows = np.minimum(np.floor(_centres(image.shape[0], size[0], top, height)),
                    image.shape[0] - 1).astype(np.intp)
  cols = np.minimum(np.floor(_centres(image.shape[1], size[1], left, width)),
                    image.shape[1] - 1).astype(np.intp)
  channels = image.shape[2:]
  flat = image.reshape(image.shape[0], -1)[rows]
  return flat.take(_flat_columns(cols, int(np.prod(channels))), axis=1).reshape(
      height, width, *channels)


def antialiased(image: np.ndarray, size: Sequence[int], window: Window | None = None
                ) -> np.ndarray:
  """uint8 `image` (H, W, 1 or 3) resized to `size` = (h, w) bilinearly with antialiasing
  → uint8 (h, w, C), or its `window`. O(window area · C · max(1, H/h, W/w))."""
  top, left, height, width = _window(size, window)
  in_h, in_w, channels = image.shape
  if image.dtype != np.uint8 or channels not in (1, 3):
    raise ValueError(f"image must be uint8 with 1 or 3 channels, got {image.dtype} "
                     f"{image.shape}")
  if (in_h, in_w) == (height, width) == tuple(size):
    return image
  step_y, step_x = in_h / size[0], in_w / size[1]
  box = (left * step_x, top * step_y, (left + width) * step_x, (top + height) * step_y)
  pil = Image.fromarray(image[..., 0] if channels == 1 else image)
  out = np.asarray(pil.resize((width, height), Image.Resampling.BILINEAR, box=box))
  return out.reshape(height, width, channels)


def normalize(images: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
  """(images / 255 − mean) / std as float32, per channel (the last axis): one image or a
  whole batch. Two passes over the data (a scale and a shift), along whole rows: numpy
  loops over a broadcast 3-channel axis several times slower."""
  channels, width = images.shape[-1], images.shape[-2] if images.ndim > 1 else 1
  std = np.broadcast_to(np.asarray(std, np.float32), channels)
  scale = 1.0 / (np.float32(255.0) * std)
  shift = np.broadcast_to(np.asarray(mean, np.float32), channels) / std
  rows = images.reshape(-1, width * channels)
  out = np.multiply(rows, np.tile(scale, width), dtype=np.float32)
  out -= np.tile(shift, width)
  return out.reshape(images.shape)


def place(pixels: np.ndarray, size: Sequence[int], fill) -> np.ndarray:
  """`pixels` (h, w, ...) at the top left of a `size` canvas filled with `fill` (a scalar,
  or one value per channel): padding at the bottom and right, as
  tf.image.pad_to_bounding_box(·, 0, 0, ...)."""
  canvas = np.empty((*size, *pixels.shape[2:]), pixels.dtype)
  rows = canvas.reshape(size[0], -1)
  rows[...] = np.tile(np.asarray(fill, pixels.dtype).ravel(), rows.shape[1] // np.size(fill))
  canvas[:pixels.shape[0], :pixels.shape[1]] = pixels
  return canvas
