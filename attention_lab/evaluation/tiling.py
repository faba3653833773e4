"""Tile-by-tile prediction of large images and volumes (CSBDeep's `n_tiles` idea).

The input (*S, C) is reflect-padded so every side is a multiple of the
network's divisor, then cut into windows of one fixed `tile` shape whose
starts are multiples of the divisor. Each window contributes only its inner
"core" (the tile minus `overlap` on each side, or up to the image border), so
a convolutional network whose receptive-field radius is ≤ `overlap` gives
exactly its untiled output (the windows are aligned with its poolings). With
global attention inside the network the result is that of attention over each
tile (as in training on patches), not over the whole image.

Memory is bounded by the tile: the network only ever sees (batch, *tile, C)
arrays; the full-size output is assembled in host memory. Windows are
predicted `batch_size` at a time (one compiled shape; the last batch is
zero-padded). A projection network (output without the first spatial axis)
is tiled over the remaining axes only, with the whole first axis in every
window. Cost: (number of windows) × (one tile's prediction); the windows
overlap by 2·overlap/tile per axis.
"""

import itertools
from typing import Callable

import numpy as np


def _axis_windows(size: int, tile: int, overlap: int):
  """[(window start, core start, core stop)] covering 0..size along one axis."""
  if tile >= size:
    return [(0, 0, size)]
  core = tile - 2 * overlap
  windows = []
  for start in range(0, size, core):
    window = min(max(start - overlap, 0), size - tile)
    windows.append((window, start, min(start + core, size)))
  return windows


def predict_tiled(apply: Callable[[np.ndarray], np.ndarray], x: np.ndarray, *,
                  tile: tuple[int, ...], overlap: tuple[int, ...], multiple: tuple[int, ...],
                  batch_size: int, reduce_first_axis: bool = False) -> np.ndarray:
  """`apply` on (batch_size, *tile, C) windows of x (*S, C), stitched into the full output.

  Args:
    apply: numpy (B, *window, C) → (B, *window_out, C_out), window_out = window
      (or window without its first axis when `reduce_first_axis`).
    x: (*S, C) input.
    tile: window shape per spatial axis (a side ≥ the padded image takes it whole).
    overlap: context kept on each side of a window's core, per axis.
    multiple: divisor of the network per axis (padding and window alignment).
    batch_size: windows per `apply` call.
    reduce_first_axis: the output lacks the input's first spatial axis
      (3D → 2D projection); that axis is never tiled.

  Returns:
    (*S_out, C_out) float32 with S_out = S (or S[1:]).
  """
  x = np.asarray(x)
  rank = x.ndim - 1
  for name, value in (("tile", tile), ("overlap", overlap), ("multiple", multiple)):
    if len(value) != rank:
      raise ValueError(f"{name} must have one entry per spatial axis ({rank}), got {value}")
  if batch_size < 1:
    raise ValueError(f"batch_size must be positive, got {batch_size}")
  first = 1 if reduce_first_axis else 0  # spatial axes before `first` are not tiled
  xp = _pad_to_multiple(x, multiple)
  sides = _window_sides(xp.shape[:-1], tile, overlap, multiple, first)
  windows = list(itertools.product(*(_axis_windows(size, side, o) for size, side, o
                                      in zip(xp.shape[:-1], sides, overlap))))
  out = None
  for i in range(0, len(windows), batch_size):
    group = windows[i:i + batch_size]
    predictions = _predict_windows(apply, xp, group, sides, batch_size)
    if out is None:
      out = np.zeros(xp.shape[first:-1] + predictions.shape[-1:], np.float32)
    _paste_cores(out, predictions, group, first)
  return out[tuple(slice(0, s) for s in x.shape[first:-1])]


def _pad_to_multiple(x: np.ndarray, multiple) -> np.ndarray:
  """x (*S, C) padded at the end of each spatial axis to a multiple of `multiple`: reflected,
  or repeated where a side is 1 (nothing to reflect)."""
  shape = x.shape[:-1]
  pad = [(0, -s % m) for s, m in zip(shape, multiple)] + [(0, 0)]
  return np.pad(x, pad, mode="reflect" if all(s > 1 for s in shape) else "edge")


def _window_sides(padded, tile, overlap, multiple, first: int) -> tuple[int, ...]:
  """The window's side per spatial axis: the tile, at most the padded side; axes before
  `first` whole. ValueError when a tile or overlap breaks the network's alignment."""
  sides = list(padded[:first])
  for axis in range(first, len(padded)):
    size, t, o, m = padded[axis], tile[axis], overlap[axis], multiple[axis]
    if t % m or o % m:
      raise ValueError(f"tile ({t}) and overlap ({o}) of spatial axis {axis} must be multiples "
                       f"of {m}")
    if t < size and t - 2 * o < m:
      raise ValueError(f"tile ({t}) of spatial axis {axis} must exceed 2·overlap ({2 * o})")
    sides.append(min(t, size))
  return tuple(sides)


def _predict_windows(apply, xp: np.ndarray, windows, sides, batch_size: int) -> np.ndarray:
  """The predictions for `windows`: their crops of xp in one `apply` call, the batch
  zero-padded to `batch_size` windows (one compiled shape)."""
  batch = np.stack([xp[tuple(slice(w, w + side) for (w, _, _), side in zip(window, sides))]
                    for window in windows])
  count = len(batch)
  if count < batch_size:
    batch = np.concatenate([batch, np.zeros((batch_size - count,) + batch.shape[1:],
                                            batch.dtype)])
  return np.asarray(apply(batch))[:count]


def _paste_cores(out: np.ndarray, predictions, windows, first: int) -> None:
  """Writes each window's core of its prediction into `out`, whose spatial axes are xp's
  from `first` on."""
  for window, prediction in zip(windows, predictions):
    target = tuple(slice(c0, c1) for _, c0, c1 in window[first:])
    source = tuple(slice(c0 - w, c1 - w) for w, c0, c1 in window[first:])
    out[target] = prediction[source]
