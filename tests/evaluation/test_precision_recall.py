import itertools
import math

import numpy as np
import pytest

from attention_lab.evaluation import precision_recall as pr


def _naive_precision_recall(real, fake, k):
  """Explicit loops in float64: each point's radius is the distance to its k-th nearest other
  point of its own set; a point is covered when within (≤) some ball of the other set."""
  def radii(points):
    out = []
    for i, p in enumerate(points):
      others = sorted(math.dist(p, q) for j, q in enumerate(points) if j != i)
      out.append(others[k - 1])
    return out

  def covered(points, centres, r):
    return [any(math.dist(p, c) <= rc for c, rc in zip(centres, r)) for p in points]

  real, fake = real.tolist(), fake.tolist()
  precision = covered(fake, real, radii(real))
  recall = covered(real, fake, radii(fake))
  return sum(precision) / len(precision), sum(recall) / len(recall)


@pytest.mark.parametrize("n,m,d,k", [(23, 17, 5, 3), (15, 31, 3, 3), (13, 13, 7, 1), (11, 8, 3, 5)])
def test_matches_explicit_loops(n, m, d, k):
  rng = np.random.default_rng(n * m)
  real = rng.normal(size=(n, d))
  fake = rng.normal(size=(m, d)) * 0.8 + 0.7
  got = pr.precision_recall(real, fake, k, row_batch=4)  # several row blocks, odd sizes
  assert got == pytest.approx(_naive_precision_recall(real, fake, k), abs=1e-12)
  assert 0 < got[0] < 1 and 0 < got[1] < 1  # not a degenerate case


def test_knn_radius_is_the_kth_other_point():
  x = np.array([[0.0], [1.0], [3.0], [7.0], [15.0]])
  np.testing.assert_allclose(pr.knn_radii(x, 1), np.array([1, 1, 2, 4, 8]) ** 2.0)
  np.testing.assert_allclose(pr.knn_radii(x, 3, row_batch=2), np.array([7, 6, 4, 7, 14]) ** 2.0)


def test_identical_sets_give_one_and_one():
  x = np.random.default_rng(0).normal(size=(40, 6))
  assert pr.precision_recall(x, x.copy()) == (1.0, 1.0)


def test_a_collapsed_generator_has_precision_one_and_recall_near_zero():
  real = np.random.default_rng(1).normal(size=(200, 4))
  fake = np.repeat(real[:1], 60, axis=0)  # one real point, 60 times
  precision, recall = pr.precision_recall(real, fake)
  assert precision == 1.0
  assert recall == pytest.approx(1 / 200)  # only the copied point itself lies in a 0-ball


def test_disjoint_far_sets_give_zero_and_zero():
  rng = np.random.default_rng(2)
  assert pr.precision_recall(rng.normal(size=(30, 3)), rng.normal(size=(25, 3)) + 100) == (0, 0)


def test_radius_boundary_is_inclusive():
  real = np.array([[0.0], [1.0], [2.0], [3.0]])  # every 1-NN radius is exactly 1
  fake = np.array([[4.0], [5.0]])  # 4 is exactly 1 from 3; 5 is 2 away
  precision, _ = pr.precision_recall(real, fake, k=1)
  assert precision == 0.5


def test_class_recall_averages_within_class_recall():
  rng = np.random.default_rng(3)
  real = rng.normal(size=(60, 3))
  real_labels = np.arange(60) % 3
  fake = real.copy()
  fake[real_labels == 2] = real[real_labels == 2][0]  # class 2 collapsed to one point
  expected = np.mean([1.0, 1.0, 1 / 20])
  assert pr.class_recall(real, real_labels, fake, real_labels) == pytest.approx(expected)


def test_pairwise_distance_and_class_diversity_match_loops():
  rng = np.random.default_rng(4)
  images = rng.integers(0, 256, size=(7, 3, 2, 3), dtype=np.uint8)
  flat = [im.astype(np.float64).ravel() / 255 for im in images]
  pairs = [math.dist(a, b) for a, b in itertools.combinations(flat, 2)]
  assert pr.mean_pairwise_distance(images) == pytest.approx(sum(pairs) / len(pairs), rel=1e-12)
  labels = np.array([0, 1, 0, 1, 0, 2, 1])
  per_class = pr.class_pairwise_distances(images, labels, 4)
  assert per_class[0] == pytest.approx(pr.mean_pairwise_distance(images[[0, 2, 4]]))
  assert np.isnan(per_class[2]) and np.isnan(per_class[3])  # one image, none
  real = np.array([0.5, 0.25, 1.0, 1.0])
  fake = np.array([0.25, 0.25, np.nan, np.nan])
  assert pr.class_diversity(fake, real) == pytest.approx((0.5 + 1.0) / 2)
  collapsed = np.repeat(images[:1], 5, axis=0)
  assert pr.mean_pairwise_distance(collapsed) == 0


def test_bad_input_names_the_argument():
  with pytest.raises(ValueError, match="fake"):
    pr.precision_recall(np.zeros((5, 3)), np.zeros((5, 4)))
  with pytest.raises(ValueError, match="k must"):
    pr.knn_radii(np.zeros((3, 2)), 3)
  with pytest.raises(ValueError, match="fake_distances"):
    pr.class_diversity(np.ones(3), np.ones(4))
