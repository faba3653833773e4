"""Confusion matrix and mIoU against naive loops: ignore label, absent classes, padding, devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab.evaluation import segmentation as seg


def naive_confusion(labels, predictions, num_classes, ignore=255, weights=None):
  c = np.zeros((num_classes, num_classes), np.int64)
  weights = (np.ones(np.shape(labels), bool) if weights is None
             else np.broadcast_to(weights, np.shape(labels))).ravel()
  labels, predictions = np.asarray(labels).ravel(), np.asarray(predictions).ravel()
  for y, p, w in zip(labels, predictions, weights):
    if w and y != ignore and 0 <= y < num_classes:
      c[y, p] += 1
  return c


def naive_iou(c):
  n = len(c)
  ious = []
  for k in range(n):
    tp = c[k, k]
    fp = sum(c[i, k] for i in range(n) if i != k)
    fn = sum(c[k, j] for j in range(n) if j != k)
    ious.append(float("nan") if tp + fp + fn == 0 else tp / (tp + fp + fn))
  present = [v for v in ious if v == v]
  return sum(present) / len(present), ious


@pytest.mark.parametrize("shape,num_classes", [((2, 7, 5), 4), ((3, 13, 11), 6), ((1, 9, 9), 21)])
def test_confusion_and_miou_match_naive_loops(shape, num_classes):
  rng = np.random.default_rng(sum(shape))
  labels = rng.integers(0, num_classes, shape)
  labels[rng.random(shape) < 0.2] = 255  # ignored pixels
  labels[labels == num_classes - 1] = 0   # the last class is absent from labels...
  predictions = rng.integers(0, num_classes - 1, shape)  # ... and from predictions
  weights = rng.random(shape[:1])[:, None, None] < 0.7  # padded examples
  expected = naive_confusion(labels, predictions, num_classes, weights=weights)
  got = seg.confusion_matrix(labels, predictions, num_classes, weights=weights)
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(got, expected)
  miou, iou = seg.mean_iou(got)
  naive_m, naive_per_class = naive_iou(expected)
  assert np.isnan(iou[-1])  # absent from labels and predictions: no IoU, not in the mean
  np.testing.assert_allclose(iou, naive_per_class, rtol=1e-12)
  assert miou == pytest.approx(naive_m, rel=1e-12)


def test_accuracies_and_summary():
  c = np.array([[5, 1, 0], [2, 2, 0], [0, 3, 0]])
  assert seg.pixel_accuracy(c) == pytest.approx(7 / 13)
  assert seg.mean_class_accuracy(c) == pytest.approx((5 / 6 + 2 / 4 + 0 / 3) / 3)
  s = seg.summary(c, ["a", "b", "c"])
  assert s["iou/c"] == 0.0 and s["miou"] == pytest.approx((5 / 8 + 2 / 8 + 0) / 3)


def test_one_device_and_eight_devices_agree_exactly():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 5, (8, 6, 10)).astype(np.int32)
  labels[:, :2] = 255
  predictions = rng.integers(0, 5, labels.shape).astype(np.int32)
  fn = jax.jit(lambda y, p: seg.confusion_matrix(y, p, 5))
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  sharding = NamedSharding(mesh, P("data"))
  sharded = fn(jax.device_put(labels, sharding), jax.device_put(predictions, sharding))
  single = fn(jax.device_put(labels, jax.devices()[0]), jax.device_put(predictions,
                                                                       jax.devices()[0]))
  np.testing.assert_array_equal(sharded, single)
  np.testing.assert_array_equal(single, naive_confusion(labels, predictions, 5))
  # Summing per-batch matrices is the whole-set matrix.
  halves = fn(labels[:3], predictions[:3]) + fn(labels[3:], predictions[3:])
  np.testing.assert_array_equal(halves, single)


def test_bad_inputs():
  with pytest.raises(ValueError, match="same shape"):
    seg.confusion_matrix(np.zeros((2, 3), int), np.zeros((3, 2), int), 2)
  with pytest.raises(ValueError, match="integer"):
    seg.confusion_matrix(np.zeros(3), np.zeros(3, int), 2)
  with pytest.raises(ValueError, match="square"):
    seg.mean_iou(np.zeros((2, 3)))
