"""Image-restoration metrics (PSNR, SSIM, NRMSE) and the CARE evaluation protocol.

All functions take numpy arrays of any spatial rank (2D images, 3D volumes;
no batch or channel axis: pass one image or volume at a time) and compute in
float64 on the host. Time O(n) for n pixels/voxels (SSIM: O(n) with separable
box filters).

The CARE protocol (Weigert et al. 2018, Methods "Evaluation"; CSBDeep
`csbdeep.utils.normalize` and `normalize_minmse`), which the SAO paper's
Table 7 follows on the CARE datasets:
1. the target is percentile-normalised, y ← (y − p_0.1(y)) / (p_99.9(y) − p_0.1(y));
2. the prediction (and, for the "input" row, the raw input) is affinely
   rescaled to minimise its MSE to the normalised target:
   x ← αx + β with α = cov(x, y) / var(x), β = ȳ − αx̄ (`normalize_minmse`);
3. PSNR and SSIM with data_range = 1 and NRMSE = RMSE of the pair (so NRMSE
   is the RMSE in units of the target's 0.1–99.9 percentile range; the
   paper's PSNR ≈ −20·log10(NRMSE) per image confirms this, e.g. Flywing
   21.96 dB ↔ 0.0798).
"""

import numpy as np
from scipy import ndimage

NRMSE_NORMALIZATIONS = ("euclidean", "min-max", "mean", "none")


def _pair(target, prediction):
  target = np.asarray(target, np.float64)
  prediction = np.asarray(prediction, np.float64)
  if target.shape != prediction.shape:
    raise ValueError(f"prediction must have the target's shape {target.shape}, got "
                     f"{prediction.shape}")
  if target.size == 0:
    raise ValueError("target must not be empty")
  return target, prediction


def mse(target, prediction) -> float:
  target, prediction = _pair(target, prediction)
  return float(np.mean((target - prediction) ** 2))


def psnr(target, prediction, data_range: float) -> float:
  """Peak signal-to-noise ratio 10·log10(data_range² / MSE) in dB (inf when MSE = 0)."""
  if not data_range > 0:
    raise ValueError(f"data_range must be positive, got {data_range}")
  err = mse(target, prediction)
  return float("inf") if err == 0 else float(10 * np.log10(data_range**2 / err))


def nrmse(target, prediction, normalization: str = "euclidean") -> float:
  """Normalised root mean squared error, RMSE / d, with d by `normalization`:

  "euclidean" (default, as scikit-image's `normalized_root_mse`): d = sqrt(mean(target²)),
  i.e. ‖target − prediction‖ / ‖target‖; "min-max": d = max(target) − min(target);
  "mean": d = mean(target); "none": d = 1 (the CARE protocol's NRMSE, computed on a
  percentile-normalised target: see the module docstring and `care_metrics`).
  """
  if normalization not in NRMSE_NORMALIZATIONS:
    raise ValueError(f"normalization must be one of {NRMSE_NORMALIZATIONS}, got "
                     f"{normalization!r}")
  target, prediction = _pair(target, prediction)
  rmse = np.sqrt(np.mean((target - prediction) ** 2))
  if normalization == "euclidean":
    denom = np.sqrt(np.mean(target**2))
  elif normalization == "min-max":
    denom = target.max() - target.min()
  elif normalization == "mean":
    denom = target.mean()
  else:
    denom = 1.0
  return float(rmse / denom)


def ssim(target, prediction, data_range: float, *, win_size: int = 7) -> float:
  """Mean structural similarity (Wang et al. 2004) with scikit-image's definition.

  As `skimage.metrics.structural_similarity` with its defaults: a uniform
  `win_size`^d window (7), K1 = 0.01, K2 = 0.03, sample covariances
  (normalised by n_w/(n_w − 1), n_w = win_size^d), C1 = (K1·L)², C2 = (K2·L)²
  for L = data_range, window means by a separable box filter with reflected
  borders, and the SSIM map averaged after cropping (win_size − 1)/2 pixels
  from every border. Works for any rank d (2D images, 3D volumes); every side
  must be ≥ win_size.
  """
  if not data_range > 0:
    raise ValueError(f"data_range must be positive, got {data_range}")
  if win_size < 1 or win_size % 2 == 0:
    raise ValueError(f"win_size must be a positive odd int, got {win_size}")
  x, y = _pair(target, prediction)
  if min(x.shape) < win_size:
    raise ValueError(f"every side of target must be >= win_size ({win_size}), got {x.shape}")
  n_w = win_size**x.ndim
  cov_norm = n_w / (n_w - 1)
  mean = lambda a: ndimage.uniform_filter(a, size=win_size, mode="reflect")
  ux, uy = mean(x), mean(y)
  vx = cov_norm * (mean(x * x) - ux * ux)
  vy = cov_norm * (mean(y * y) - uy * uy)
  vxy = cov_norm * (mean(x * y) - ux * uy)
  c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
  s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
  pad = (win_size - 1) // 2
  return float(s[(slice(pad, -pad or None),) * s.ndim].mean())


def percentile_normalize(x, low: float = 0.1, high: float = 99.9, eps: float = 1e-20):
  """(x − p_low(x)) / (p_high(x) − p_low(x) + eps) in float64 (CSBDeep `normalize`)."""
  if not 0 <= low < high <= 100:
    raise ValueError(f"percentiles must satisfy 0 <= low < high <= 100, got ({low}, {high})")
  x = np.asarray(x, np.float64)
  lo, hi = np.percentile(x, low), np.percentile(x, high)
  return (x - lo) / (hi - lo + eps)


def normalize_minmse(x, target):
  """αx + β with the α, β that minimise mean((αx + β − target)²) (CSBDeep `normalize_minmse`).

  α = cov(x, target) / (var(x) + 1e-10), β = mean(target) − α·mean(x).
  """
  x, target = _pair(x, target)
  xc = x - x.mean()
  var = np.mean(xc * xc)
  alpha = np.mean(xc * (target - target.mean())) / (var + 1e-10)
  return alpha * x + (target.mean() - alpha * x.mean())


def restoration_metrics(target, prediction, *, protocol: str = "care",
                        data_range: float = 1.0, percentiles=(0.1, 99.9)) -> dict[str, float]:
  """{"psnr", "ssim", "nrmse"} of one image or volume under an evaluation protocol.

  "care": the CARE protocol of the module docstring (percentile-normalised
  target, min-MSE affine prediction, data_range 1, NRMSE = RMSE). "plain":
  the arrays as given, PSNR/SSIM with `data_range`, NRMSE = RMSE / data_range
  (for data with a known range, e.g. photographs in [0, 1]).
  """
  if protocol == "care":
    target = percentile_normalize(target, *percentiles)
    prediction = normalize_minmse(prediction, target)
    data_range = 1.0
  elif protocol != "plain":
    raise ValueError(f"protocol must be 'care' or 'plain', got {protocol!r}")
  return {"psnr": psnr(target, prediction, data_range),
          "ssim": ssim(target, prediction, data_range),
          "nrmse": nrmse(target, prediction, "none") / data_range}
