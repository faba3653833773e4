import itertools
import math

import numpy as np
import pytest

from attention_lab.evaluation import fid
from tests import peers


def _psd_sqrt(a):
  w, v = np.linalg.eigh((a + a.T) / 2)
  return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def _reference_fid(mu1, s1, mu2, s2):
  """tr (Σ₁Σ₂)^½ = tr (Σ₁^½ Σ₂ Σ₁^½)^½: symmetric eigendecompositions only, no sqrtm."""
  r = _psd_sqrt(s1)
  return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2)
               - 2 * np.trace(_psd_sqrt(r @ s2 @ r)))


@pytest.mark.parametrize("d,n", [(1, 50), (7, 40), (16, 300)])
def test_frechet_distance_matches_an_eigendecomposition_reference(d, n):
  rng = np.random.default_rng(d)
  a = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
  b = rng.normal(size=(n, d)) * 2 + 0.5
  mu1, s1 = fid.feature_statistics(a)
  mu2, s2 = fid.feature_statistics(b)
  np.testing.assert_allclose(fid.frechet_distance(mu1, s1, mu2, s2),
                             _reference_fid(mu1, np.atleast_2d(s1), mu2, np.atleast_2d(s2)),
                             rtol=1e-7)
  assert fid.fid(a, b) == pytest.approx(fid.frechet_distance(mu1, s1, mu2, s2))


def test_frechet_distance_of_identical_gaussians_is_zero_and_symmetric():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 8))
  mu, s = fid.feature_statistics(x)
  assert abs(fid.frechet_distance(mu, s, mu, s)) < 1e-8
  y = rng.normal(size=(200, 8)) + 1
  assert fid.fid(x, y) == pytest.approx(fid.fid(y, x), rel=1e-8)


def test_near_singular_covariances():
  """Fewer samples than dimensions: rank-deficient Σ; the result is finite and matches."""
  rng = np.random.default_rng(1)
  a, b = rng.normal(size=(6, 20)), rng.normal(size=(6, 20)) + 0.3
  mu1, s1 = fid.feature_statistics(a)
  mu2, s2 = fid.feature_statistics(b)
  value = fid.frechet_distance(mu1, s1, mu2, s2)
  assert np.isfinite(value)
  np.testing.assert_allclose(value, _reference_fid(mu1, s1, mu2, s2), rtol=1e-5, atol=1e-5)


def test_frechet_distance_rejects_mismatched_shapes():
  with pytest.raises(ValueError, match="sigma1"):
    fid.frechet_distance(np.zeros(3), np.eye(2), np.zeros(3), np.eye(3))


def test_inception_score_matches_the_naive_formula():
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(50, 7)) * 3
  p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  scores = []
  for part in np.array_split(p, 5):
    py = [sum(row[c] for row in part) / len(part) for c in range(7)]
    kl = [sum(row[c] * (math.log(row[c]) - math.log(py[c])) for c in range(7)) for row in part]
    scores.append(math.exp(sum(kl) / len(kl)))
  mean, std = fid.inception_score(p, splits=5)
  assert mean == pytest.approx(np.mean(scores), rel=1e-10)
  assert std == pytest.approx(np.std(scores), rel=1e-8)
  # Confident and uniform over classes → the number of classes.
  assert fid.inception_score(np.eye(7)[np.arange(70) % 7], splits=1)[0] == pytest.approx(7)


def test_kid_matches_the_naive_unbiased_mmd():
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=(9, 4)), rng.normal(size=(9, 4)) + 0.5
  k = lambda u, v: (sum(a * b for a, b in zip(u, v)) / 4 + 1) ** 3
  m = 9
  xx = sum(k(x[i], x[j]) for i, j in itertools.permutations(range(m), 2)) / (m * (m - 1))
  yy = sum(k(y[i], y[j]) for i, j in itertools.permutations(range(m), 2)) / (m * (m - 1))
  xy = sum(k(x[i], y[j]) for i in range(m) for j in range(m)) / m ** 2
  mean, std = fid.kernel_inception_distance(x, y, num_subsets=3, subset_size=100)
  assert mean == pytest.approx(xx + yy - 2 * xy, rel=1e-10) and std < 1e-12  # whole sets
  a, b, c = rng.normal(size=(3, 400, 4))
  same = fid.kernel_inception_distance(a, b, num_subsets=4, subset_size=200)[0]
  shifted = fid.kernel_inception_distance(a, c + 0.5, num_subsets=4, subset_size=200)[0]
  assert abs(same) < 0.05 * shifted


def _torch_fidelity():
  """torch and torch-fidelity's metric modules (the peers extra)."""
  return (peers.require("torch"), peers.require("torch_fidelity.metric_isc", "torch-fidelity"),
          peers.require("torch_fidelity.metric_kid", "torch-fidelity"))


@pytest.mark.parametrize("rank_deficient", [False, True])
def test_frechet_distance_equals_pytorch_fid(rank_deficient):
  """pytorch-fid's own statistics and distance on the same features; with fewer samples than
  dimensions Σ is singular and sqrtm's result complex, whose rounding both drop."""
  fid_score = peers.require("pytorch_fid.fid_score", "pytorch-fid")
  rng = np.random.default_rng(7)
  n = 12 if rank_deficient else 200
  a = rng.normal(size=(n, 24)) @ rng.normal(size=(24, 24))
  b = rng.normal(size=(n, 24)) * 1.5 + 0.2
  stats = [(x.mean(0), np.cov(x, rowvar=False)) for x in (a, b)]  # pytorch-fid's statistics
  theirs = fid_score.calculate_frechet_distance(*stats[0], *stats[1])
  assert fid.fid(a, b) == pytest.approx(theirs, rel=1e-9)


def test_inception_score_equals_torch_fidelity():
  torch, metric_isc, _ = _torch_fidelity()
  logits = np.random.default_rng(5).normal(size=(60, 11)) * 2
  theirs = metric_isc.isc_features_to_metric(torch.from_numpy(logits), splits=6, shuffle=False)
  p = np.exp(logits - logits.max(1, keepdims=True))
  mean, std = fid.inception_score(p / p.sum(1, keepdims=True), splits=6)  # 6 equal parts
  assert mean == pytest.approx(theirs["inception_score_mean"], rel=1e-10)
  assert std == pytest.approx(theirs["inception_score_std"], rel=1e-8)


def test_kid_equals_torch_fidelity_on_whole_sets():
  """Subsets of the whole set are permutations of it, so both draw the same MMD²."""
  torch, _, metric_kid = _torch_fidelity()
  rng = np.random.default_rng(6)
  x, y = rng.normal(size=(40, 16)), rng.normal(size=(40, 16)) * 1.2 + 0.3
  theirs = metric_kid.kid_features_to_metric(
      torch.from_numpy(x), torch.from_numpy(y), kid_subsets=2, kid_subset_size=40,
      kid_kernel="poly", kid_kernel_poly_degree=3, kid_kernel_poly_gamma=None,
      kid_kernel_poly_coef0=1, rng_seed=0, verbose=False)
  mean, _ = fid.kernel_inception_distance(x, y, num_subsets=2, subset_size=40)
  assert mean == pytest.approx(theirs["kernel_inception_distance_mean"], rel=1e-10)
