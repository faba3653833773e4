"""Semantic-segmentation metrics from a confusion matrix summed over a whole evaluation set.

The confusion matrix C (num_classes × num_classes, rows: true class, columns:
predicted class) holds exact integer pixel counts; pixels whose label is the
ignore label (255), or outside [0, num_classes), or excluded by `weights`
(e.g. padded examples or the padding around an image) are not counted. Summing
per-batch matrices gives the whole-set matrix exactly, whatever the batch
padding or device count. From it (Long et al. 2015, Sec. 5; the DeepLab / Ham
evaluation code):
- IoU_c = C_cc / (Σ_j C_cj + Σ_i C_ic − C_cc);
- mIoU: the mean of IoU_c over the classes present in the labels or the
  predictions (a class absent from both has no IoU, reported as NaN);
- pixel accuracy Σ_c C_cc / Σ C; mean class accuracy: mean over classes with
  labelled pixels of C_cc / Σ_j C_cj.
Cost: O(pixels) time (one scatter-add), O(num_classes²) memory.
"""

import jax.numpy as jnp
import numpy as np


def confusion_matrix(labels, predictions, num_classes: int, ignore_label: int = 255, *,
                     weights=None):
  """int32 (num_classes, num_classes) counts of (true, predicted) pixel pairs.

  Args:
    labels: integer array of true classes, any shape; `ignore_label` and values
      outside [0, num_classes) are not counted.
    predictions: integer array of predicted classes, the same shape.
    num_classes: the number of classes.
    ignore_label: the label of unlabelled pixels.
    weights: optional boolean array broadcastable to `labels`; False excludes
      a pixel (padding).
  Works under jit and on sharded arrays.
  """
  labels, predictions = jnp.asarray(labels), jnp.asarray(predictions)
  if labels.shape != predictions.shape:
    raise ValueError(f"labels and predictions must have the same shape, got {labels.shape} "
                     f"and {predictions.shape}")
  if not (jnp.issubdtype(labels.dtype, jnp.integer) and
          jnp.issubdtype(predictions.dtype, jnp.integer)):
    raise ValueError(f"labels and predictions must be integer arrays, got {labels.dtype} and "
                     f"{predictions.dtype}")
  if num_classes < 1:
    raise ValueError(f"num_classes must be positive, got {num_classes}")
  labels, predictions = labels.astype(jnp.int32), predictions.astype(jnp.int32)
  valid = ((labels != ignore_label) & (labels >= 0) & (labels < num_classes)
           & (predictions >= 0) & (predictions < num_classes))
  if weights is not None:
    valid &= jnp.broadcast_to(jnp.asarray(weights, bool), labels.shape)
  index = jnp.where(valid, labels * num_classes + predictions, 0)
  counts = jnp.zeros(num_classes * num_classes, jnp.int32).at[index.ravel()].add(
      valid.ravel().astype(jnp.int32))
  return counts.reshape(num_classes, num_classes)


def _check(confusion):
  confusion = np.asarray(confusion, np.float64)
  if confusion.ndim != 2 or confusion.shape[0] != confusion.shape[1]:
    raise ValueError(f"confusion must be a square matrix, got shape {confusion.shape}")
  return confusion


def mean_iou(confusion) -> tuple[float, np.ndarray]:
  """(mIoU over the classes present in labels or predictions, per-class IoU (NaN if absent))."""
  confusion = _check(confusion)
  true_positive = np.diag(confusion)
  union = confusion.sum(0) + confusion.sum(1) - true_positive
  with np.errstate(invalid="ignore", divide="ignore"):
    iou = np.where(union > 0, true_positive / union, np.nan)
  present = union > 0
  return (float(iou[present].mean()) if present.any() else float("nan")), iou


def pixel_accuracy(confusion) -> float:
  confusion = _check(confusion)
  total = confusion.sum()
  return float(np.trace(confusion) / total) if total else float("nan")


def mean_class_accuracy(confusion) -> float:
  """Mean over classes with labelled pixels of the fraction of their pixels predicted right."""
  confusion = _check(confusion)
  labelled = confusion.sum(1)
  present = labelled > 0
  return float((np.diag(confusion)[present] / labelled[present]).mean()) if present.any() \
      else float("nan")


def summary(confusion, class_names=None) -> dict[str, float]:
  """{"miou", "pixel_accuracy", "mean_class_accuracy", "iou/<class>"} of a confusion matrix."""
  miou, iou = mean_iou(confusion)
  names = class_names or [str(c) for c in range(len(iou))]
  result = {"miou": miou, "pixel_accuracy": pixel_accuracy(confusion),
            "mean_class_accuracy": mean_class_accuracy(confusion)}
  result.update({f"iou/{name}": float(v) for name, v in zip(names, iou)})
  return result
