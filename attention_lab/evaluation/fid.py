"""Sample-quality scores from image features: FID, Inception Score, KID.

All three take features computed once per image set (2048-d Inception pool
features, or any other embedding) and are computed on the host in float64.

- FID (Heusel et al. 2017): ‖μ₁ − μ₂‖² + tr(Σ₁ + Σ₂ − 2 (Σ₁Σ₂)^½), with the
  matrix square root exactly as pytorch-fid computes it (scipy's `sqrtm` of
  the product; on a non-finite result, ε = 1e-6 added to both diagonals; a
  small imaginary part from rounding is dropped, a large one is an error).
- Inception Score (Salimans et al. 2016): exp E_x KL(p(y|x) ‖ p(y)), the mean
  and standard deviation over `splits` equal parts, as the original code.
- KID (Bińkowski et al. 2018): the unbiased MMD² with the cubic polynomial
  kernel k(x, y) = (xᵀy / d + 1)³, averaged over random subsets (the
  torch-fidelity / clean-fid defaults: 100 subsets of 1,000).
"""

import numpy as np
from scipy import linalg


def feature_statistics(features) -> tuple[np.ndarray, np.ndarray]:
  """(mean, covariance) of (N, d) features in float64 (covariance with N − 1, as np.cov)."""
  features = np.asarray(features, np.float64)
  if features.ndim != 2 or features.shape[0] < 2:
    raise ValueError(f"features must be (N ≥ 2, d), got shape {features.shape}")
  return features.mean(0), np.cov(features, rowvar=False)


def frechet_distance(mu1, sigma1, mu2, sigma2, eps: float = 1e-6) -> float:
  """Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2); O(d³)."""
  mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
  sigma1 = np.atleast_2d(np.asarray(sigma1, np.float64))
  sigma2 = np.atleast_2d(np.asarray(sigma2, np.float64))
  if mu1.shape != mu2.shape:
    raise ValueError(f"mu1 and mu2 must have the same shape, got {mu1.shape} and {mu2.shape}")
  d = mu1.shape[0]
  if sigma1.shape != (d, d) or sigma2.shape != (d, d):
    raise ValueError(f"sigma1 and sigma2 must be ({d}, {d}), got {sigma1.shape} and {sigma2.shape}")
  diff = mu1 - mu2
  covmean = linalg.sqrtm(sigma1 @ sigma2)
  if not np.isfinite(covmean).all():
    offset = np.eye(d) * eps
    covmean = linalg.sqrtm((sigma1 + offset) @ (sigma2 + offset))
  if np.iscomplexobj(covmean):
    if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
      raise ValueError(f"imaginary component {np.max(np.abs(covmean.imag))} in sqrtm(sigma1·sigma2)")
    covmean = covmean.real
  return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean))


def fid(features1, features2) -> float:
  """FID between two feature sets (N, d)."""
  return frechet_distance(*feature_statistics(features1), *feature_statistics(features2))


def inception_score(probabilities, splits: int = 10) -> tuple[float, float]:
  """(mean, std) over `splits` parts of exp E KL(p(y|x) ‖ p(y)); probabilities (N, classes)."""
  p = np.asarray(probabilities, np.float64)
  if p.ndim != 2 or p.shape[0] < splits:
    raise ValueError(f"probabilities must be (N ≥ splits={splits}, classes), got {p.shape}")
  scores = []
  for part in np.array_split(p, splits):
    marginal = part.mean(0, keepdims=True)
    kl = np.sum(part * (np.log(np.maximum(part, 1e-30)) - np.log(np.maximum(marginal, 1e-30))), 1)
    scores.append(np.exp(kl.mean()))
  return float(np.mean(scores)), float(np.std(scores))


def kernel_inception_distance(features1, features2, *, num_subsets: int = 100,
                              subset_size: int = 1000, seed: int = 0) -> tuple[float, float]:
  """(mean, std) over subsets of the unbiased MMD² with k(x, y) = (xᵀy/d + 1)³.

  Each subset draws `subset_size` rows of each set without replacement (all rows
  when a set is smaller); O(num_subsets · m² · d).
  """
  x, y = np.asarray(features1, np.float64), np.asarray(features2, np.float64)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
    raise ValueError(f"features must be (N, d) and (M, d), got {x.shape} and {y.shape}")
  m = min(subset_size, len(x), len(y))
  if m < 2:
    raise ValueError(f"KID needs at least 2 samples per set, got {len(x)} and {len(y)}")
  d, rng, values = x.shape[1], np.random.default_rng(seed), []
  for _ in range(num_subsets):
    a = x[rng.choice(len(x), m, replace=False)]
    b = y[rng.choice(len(y), m, replace=False)]
    kxx, kyy, kxy = [(u @ v.T / d + 1) ** 3 for u, v in ((a, a), (b, b), (a, b))]
    values.append((kxx.sum() - np.trace(kxx)) / (m * (m - 1))
                  + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean())
  return float(np.mean(values)), float(np.std(values))
