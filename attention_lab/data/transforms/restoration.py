"""Restoration patches in numpy (the port of data/restoration.py's `_crop_pair` and `_augment`).

An input (*S, C) of spatial rank len(S) (2D images, 3D volumes) and its target, of the
same spatial shape or, for projection, without the first spatial axis. Training cuts
an aligned random `patch` (the input's spatial size; the target is cut at the same
positions of its axes) and, with `augment`, flips each of the last two spatial axes
(Y, X) with probability ½ and, when the patch is square in (Y, X), swaps them with
probability ½ (with the flips, the 8 symmetries of the square: rotations by 90°
and reflections). Randomness comes from `rng`: one uniform per spatial axis of the
input for the offsets, then three (flip Y, flip X, swap) when augmenting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def crop_pair(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, *,
              patch: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """A random `patch` of `x` (*S, C) and the aligned region of `y` (*S or S[1:], C')."""
  patch = tuple(int(p) for p in patch)
  shape = x.shape[:len(patch)]
  if any(s < p for s, p in zip(shape, patch)) or len(patch) != x.ndim - 1:
    raise ValueError(f"patch must have one size per spatial axis of the input, none larger: "
                     f"got patch {patch} for an input of shape {x.shape}")
  drop = len(patch) - (y.ndim - 1)  # projection: the target lacks the first spatial axis
  limit = np.asarray(shape) - patch + 1
  offsets = np.minimum(np.floor(rng.random(len(patch), dtype=np.float32) * limit), limit - 1)
  cut = tuple(slice(int(o), int(o) + p) for o, p in zip(offsets, patch))
  return x[cut], y[cut[drop:]]


def augment_pair(x: np.ndarray, y: np.ndarray, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
  """Random flips of the last two spatial axes of both, and their swap when square."""
  flip_y, flip_x, swap = rng.random(3) < 0.5
  axis_x, axis_y = x.ndim - 3, y.ndim - 3  # each one's Y axis (X follows)
  for flipped, offset in ((flip_y, 0), (flip_x, 1)):
    if flipped:
      x, y = np.flip(x, axis_x + offset), np.flip(y, axis_y + offset)
  if swap and x.shape[axis_x] == x.shape[axis_x + 1]:
    x, y = np.swapaxes(x, axis_x, axis_x + 1), np.swapaxes(y, axis_y, axis_y + 1)
  return x, y


def train(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, *, patch: Sequence[int],
          augment: bool) -> dict[str, np.ndarray]:
  """A training example (input `x`, target `y`) → {"input" (*patch, C), "target" (*patch
  or patch[1:], C')}."""
  x, y = crop_pair(x, y, rng, patch=patch)
  if augment:
    x, y = augment_pair(x, y, rng)
  return {"input": x, "target": y}
