"""Scores that see mode collapse: k-NN precision and recall, and pixel diversity per class.

Precision and recall (Kynkäänniemi et al. 2019, "Improved Precision and Recall
Metric for Assessing Generative Models"): each set of features is a manifold,
the union of balls around its points whose radius is the distance to the
point's k-th nearest neighbour in the same set (k = 3). Precision is the share
of generated points inside the real manifold (quality); recall the share of
real points inside the generated manifold (coverage). A generator that gives
one image per class has precision 1 and recall near 0: its balls have radius 0.

Choices taken from the authors' code (kynkaat/improved-precision-and-recall-metric,
precision_recall.py), so our numbers mean what theirs mean:
- squared Euclidean distances ‖u‖² − 2uᵀv + ‖v‖², clamped at 0, computed in
  blocks of rows (`row_batch`) against the whole other set;
- the radius is the k-th smallest distance in the point's own row, the point
  itself counted as the 0-th (np.partition at index k): the k-th neighbour
  excluding self; no pruning of large radii (their `clamp_to_percentile=None`);
- a point is inside a ball when its distance is ≤ the radius (inclusive).
Ours differs in precision only: float64 on the host instead of float32 on a GPU.
They compare sets of equal size (50,000 each); `evaluation.generative` passes
equally many real and generated features. Cost O(N·M·d) time, O(row_batch·M) memory.

Pixel diversity (`mean_pairwise_distance`): the mean Euclidean distance over all
pairs of a set of images (pixels in [0, 1]); `class_diversity` is, per class,
that of the generated images over that of the real images of the class,
averaged over classes: 1 when G varies within a class as much as the data, near
0 when it draws one image per class.
"""

import numpy as np


def _squared_distances(u, v):
  uu = np.sum(u * u, axis=1)[:, None]
  vv = np.sum(v * v, axis=1)[None, :]
  return np.maximum(uu - 2 * u @ v.T + vv, 0.0)


def _check_features(name, x, d=None):
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or (d is not None and x.shape[1] != d):
    raise ValueError(f"{name} must be (N, {d if d is not None else 'd'}) features, got shape "
                     f"{x.shape}")
  return x


def knn_radii(features, k: int = 3, *, row_batch: int = 2048) -> np.ndarray:
  """(N,) squared distance of each point to its k-th nearest neighbour in `features`,
  itself excluded (N > k needed)."""
  x = _check_features("features", features)
  if not 1 <= k < len(x):
    raise ValueError(f"k must be in [1, N) = [1, {len(x)}), got {k}")
  radii = np.empty(len(x))
  for start in range(0, len(x), row_batch):
    block = _squared_distances(x[start:start + row_batch], x)
    radii[start:start + row_batch] = np.partition(block, k, axis=1)[:, k]
  return radii


def coverage(points, centres, radii, *, row_batch: int = 2048) -> np.ndarray:
  """(N,) bool: whether each point lies in some ball (squared radius `radii`) around
  `centres`."""
  p = _check_features("points", points)
  c = _check_features("centres", centres, p.shape[1])
  inside = np.empty(len(p), bool)
  for start in range(0, len(p), row_batch):
    block = _squared_distances(p[start:start + row_batch], c)
    inside[start:start + row_batch] = np.any(block <= radii[None, :], axis=1)
  return inside


def precision_recall(real, fake, k: int = 3, *, row_batch: int = 2048) -> tuple[float, float]:
  """(precision, recall) of generated features `fake` (M, d) against `real` (N, d)."""
  real = _check_features("real", real)
  fake = _check_features("fake", fake, real.shape[1])
  precision = coverage(fake, real, knn_radii(real, k, row_batch=row_batch), row_batch=row_batch)
  recall = coverage(real, fake, knn_radii(fake, k, row_batch=row_batch), row_batch=row_batch)
  return float(precision.mean()), float(recall.mean())


def class_recall(real, real_labels, fake, fake_labels, k: int = 3) -> float:
  """Recall within each class (manifolds of that class's points only), averaged over the
  classes present in both sets with more than k points each."""
  real, fake = _check_features("real", real), _check_features("fake", fake)
  real_labels, fake_labels = np.asarray(real_labels), np.asarray(fake_labels)
  values = []
  for c in np.intersect1d(real_labels, fake_labels):
    r, f = real[real_labels == c], fake[fake_labels == c]
    if len(r) > k and len(f) > k:
      values.append(coverage(r, f, knn_radii(f, k)).mean())
  if not values:
    raise ValueError(f"class_recall needs a class with more than k={k} real and generated points")
  return float(np.mean(values))


def mean_pairwise_distance(images) -> float:
  """Mean Euclidean distance over the n(n−1)/2 pairs of images (n, ...) with pixels in
  [0, 1] (uint8 images are divided by 255)."""
  x = np.asarray(images)
  scale = 255.0 if x.dtype == np.uint8 else 1.0
  x = x.reshape(len(x), -1).astype(np.float64) / scale
  if len(x) < 2:
    raise ValueError(f"images must hold at least 2 images, got {len(x)}")
  d = np.sqrt(_squared_distances(x, x))
  return float(d[np.triu_indices(len(x), 1)].mean())


def class_pairwise_distances(images, labels, num_classes: int) -> np.ndarray:
  """(num_classes,) mean pairwise distance among each class's images; NaN for a class with
  fewer than 2."""
  labels = np.asarray(labels)
  out = np.full(num_classes, np.nan)
  for c in range(num_classes):
    members = np.flatnonzero(labels == c)
    if len(members) >= 2:
      out[c] = mean_pairwise_distance(np.asarray(images)[members])
  return out


def class_diversity(fake_distances, real_distances) -> float:
  """Mean over classes of fake / real mean pairwise distance (classes where both are
  defined and the real one is positive)."""
  fake, real = np.asarray(fake_distances, np.float64), np.asarray(real_distances, np.float64)
  if fake.shape != real.shape:
    raise ValueError(f"fake_distances and real_distances must have the same shape, got "
                     f"{fake.shape} and {real.shape}")
  ok = np.isfinite(fake) & np.isfinite(real) & (real > 0)
  if not ok.any():
    raise ValueError("class_diversity needs a class with at least 2 real and 2 generated images")
  return float(np.mean(fake[ok] / real[ok]))
