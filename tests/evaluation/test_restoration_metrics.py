"""PSNR / SSIM / NRMSE against scikit-image and naive float64 loops, 2D and 3D; CARE protocol."""

import itertools

import numpy as np
import pytest
from skimage import metrics as skm

from attention_lab.evaluation import restoration as R

SHAPES = [(7, 7), (13, 22), (31, 9), (8, 9, 11), (7, 12, 10)]


def _pair(shape, seed=0):
  rng = np.random.default_rng(seed)
  target = rng.uniform(0, 1, shape)
  return target, target + rng.normal(0, 0.1, shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_psnr_and_nrmse_match_skimage(shape):
  target, prediction = _pair(shape)
  assert R.psnr(target, prediction, 1.0) == pytest.approx(
      skm.peak_signal_noise_ratio(target, prediction, data_range=1.0), rel=1e-12)
  for ours, theirs in (("euclidean", "euclidean"), ("min-max", "min-max"), ("mean", "mean")):
    assert R.nrmse(target, prediction, ours) == pytest.approx(
        skm.normalized_root_mse(target, prediction, normalization=theirs), rel=1e-12)
  naive = np.sqrt(sum((t - p) ** 2 for t, p in zip(target.ravel(), prediction.ravel()))
                  / target.size)
  assert R.nrmse(target, prediction, "none") == pytest.approx(naive, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("data_range", [1.0, 3.5])
def test_ssim_matches_skimage(shape, data_range):
  target, prediction = _pair(shape, seed=1)
  target, prediction = target * data_range, prediction * data_range
  expected = skm.structural_similarity(target, prediction, data_range=data_range)
  assert R.ssim(target, prediction, data_range) == pytest.approx(expected, rel=1e-10)


def _naive_ssim(x, y, data_range, win=7):
  """Explicit loops over every window fully inside the image (skimage's crop), float64."""
  pad = (win - 1) // 2
  values = []
  ranges = [range(pad, s - pad) for s in x.shape]
  n = win**x.ndim
  for center in itertools.product(*ranges):
    window = tuple(slice(c - pad, c + pad + 1) for c in center)
    a, b = x[window].ravel(), y[window].ravel()
    ma, mb = a.sum() / n, b.sum() / n
    va = ((a - ma) ** 2).sum() / (n - 1)
    vb = ((b - mb) ** 2).sum() / (n - 1)
    cov = ((a - ma) * (b - mb)).sum() / (n - 1)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    values.append((2 * ma * mb + c1) * (2 * cov + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2)))
  return float(np.mean(values))


@pytest.mark.parametrize("shape", [(9, 12), (8, 7, 9)])
def test_ssim_matches_naive_loops(shape):
  target, prediction = _pair(shape, seed=2)
  assert R.ssim(target, prediction, 1.0) == pytest.approx(
      _naive_ssim(target, prediction, 1.0), rel=1e-10)


def test_identical_images():
  target, _ = _pair((10, 10))
  assert R.psnr(target, target, 1.0) == float("inf")
  assert R.ssim(target, target, 1.0) == pytest.approx(1.0)
  assert R.nrmse(target, target) == 0.0


def test_normalize_minmse_is_the_least_squares_affine_fit():
  rng = np.random.default_rng(3)
  x = rng.normal(size=(20, 30))
  target = 2.5 * x - 0.7 + rng.normal(0, 0.01, x.shape)
  fitted = R.normalize_minmse(x, target)
  design = np.stack([x.ravel(), np.ones(x.size)], 1)
  coef = np.linalg.lstsq(design, target.ravel(), rcond=None)[0]
  np.testing.assert_allclose(fitted.ravel(), design @ coef, rtol=1e-8, atol=1e-8)


def test_care_protocol_is_invariant_to_affine_changes_of_the_prediction():
  target, prediction = _pair((16, 18, 20), seed=4)
  target = 100 + 900 * target  # raw camera units
  a = R.restoration_metrics(target, prediction, protocol="care")
  b = R.restoration_metrics(target, 7.0 * prediction - 3.0, protocol="care")
  for key in a:
    assert a[key] == pytest.approx(b[key], rel=1e-9)
  # NRMSE is the RMSE after percentile normalisation, PSNR its data_range-1 counterpart.
  assert a["psnr"] == pytest.approx(-20 * np.log10(a["nrmse"]), rel=1e-12)
  t = R.percentile_normalize(target, 0.1, 99.9)
  assert np.percentile(t, 0.1) == pytest.approx(0.0, abs=1e-12)
  assert np.percentile(t, 99.9) == pytest.approx(1.0, abs=1e-9)


def test_bad_arguments():
  target, prediction = _pair((10, 10))
  with pytest.raises(ValueError, match="prediction must have"):
    R.psnr(target, prediction[:5], 1.0)
  with pytest.raises(ValueError, match="data_range"):
    R.ssim(target, prediction, 0.0)
  with pytest.raises(ValueError, match="every side"):
    R.ssim(target[:5], prediction[:5], 1.0)
  with pytest.raises(ValueError, match="normalization"):
    R.nrmse(target, prediction, "max")
  with pytest.raises(ValueError, match="protocol"):
    R.restoration_metrics(target, prediction, protocol="csbdeep")
