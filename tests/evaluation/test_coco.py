"""The COCOeval path on hand-made boxes whose mAP is known by hand."""

import numpy as np
import pytest

from attention_lab.evaluation import coco
from attention_lab.train.tasks.detection import coco_map

A = [0, 0, 10, 10]
B = [20, 20, 40, 30]


def _run(gt_boxes, gt_labels, dets, crowd=None, area=None, num_classes=2):
  """gt_* and crowd: per image lists; dets: per image lists of (box, score, class)."""
  m = max(1, max(len(g) for g in gt_boxes))
  n = len(gt_boxes)
  boxes, labels = np.zeros((n, m, 4)), np.zeros((n, m), int)
  box_mask, crowd_a = np.zeros((n, m), bool), np.zeros((n, m), bool)
  for i, g in enumerate(gt_boxes):
    boxes[i, :len(g)], labels[i, :len(g)], box_mask[i, :len(g)] = g, gt_labels[i], True
    if crowd is not None:
      crowd_a[i, :len(g)] = crowd[i]
  d = max(1, max(len(x) for x in dets))
  det_boxes, scores = np.zeros((n, d, 4)), np.zeros((n, d))
  classes, valid = np.zeros((n, d), int), np.zeros((n, d), bool)
  for i, x in enumerate(dets):
    for j, (b, s, c) in enumerate(x):
      det_boxes[i, j], scores[i, j], classes[i, j], valid[i, j] = b, s, c, True
  gt = coco.coco_ground_truth(boxes, labels, box_mask, crowd=crowd_a, area=area,
                              num_classes=num_classes)
  return coco.evaluate(gt, coco.detections_array(det_boxes, scores, classes, valid))


def test_perfect_detections_score_one():
  stats = _run([[A, B], [B]], [[0, 1], [1]], [[(A, 0.9, 0), (B, 0.8, 1)], [(B, 0.7, 1)]])
  assert stats["map"] == pytest.approx(1.0)
  assert stats["ap50"] == pytest.approx(1.0) and stats["ap75"] == pytest.approx(1.0)
  assert stats["ap_small"] == pytest.approx(1.0)  # every box is below 32² pixels
  assert stats["ap_large"] == -1  # no large ground truth at all


def test_false_positive_between_true_positives():
  # Ranked: TP (P 1, R ½), FP (P ½), TP (P ⅔, R 1). COCO's 101-point interpolated AP:
  # precision 1 at the 51 recall points ≤ ½, ⅔ at the 50 above.
  stats = _run([[A], [B]], [[0], [0]], [[(A, 0.9, 0)], [(A, 0.8, 0), (B, 0.7, 0)]],
               num_classes=1)
  assert stats["map"] == pytest.approx((51 + 50 * 2 / 3) / 101, abs=1e-6)


def test_iou_decides_which_thresholds_match():
  # IoU 0.78: a true positive at thresholds 0.50 ... 0.75 (6 of 10), a miss above.
  stats = _run([[A]], [[0]], [[([0, 0, 10, 7.8], 0.9, 0)]], num_classes=1)
  assert stats["ap50"] == pytest.approx(1.0) and stats["ap75"] == pytest.approx(1.0)
  assert stats["map"] == pytest.approx(0.6)


def test_crowd_regions_absorb_detections_and_wrong_class_does_not_count():
  # A detection on a crowd box is neither a hit nor a false positive.
  stats = _run([[A, B]], [[0, 0]], [[(B, 0.95, 0), (A, 0.9, 0)]], crowd=[[False, True]],
               num_classes=1)
  assert stats["map"] == pytest.approx(1.0)
  stats = _run([[A]], [[0]], [[(A, 0.9, 1)]])  # right box, wrong class
  assert stats["map"] == pytest.approx(0.0)


def test_area_decides_small_medium_large_and_no_detections():
  area = np.array([[100.0 * 100.0]])  # a "large" object (> 96²) by its given area, though the box is small
  stats = _run([[A]], [[0]], [[(A, 0.9, 0)]], area=area, num_classes=1)
  assert stats["ap_large"] == pytest.approx(1.0) and stats["ap_small"] == -1
  assert _run([[A]], [[0]], [[]], num_classes=1)["map"] == 0.0


def test_task_coco_map_skips_padded_images():
  out = {"boxes": np.array([[A], [B]], float), "labels": np.zeros((2, 1), int),
         "box_mask": np.ones((2, 1), bool), "crowd": np.zeros((2, 1), bool),
         "area": np.full((2, 1), 100.0), "mask": np.array([True, False]),
         "image_size": np.full((2, 2), 64.0),
         "det_boxes": np.array([[A], [A]], float), "det_scores": np.full((2, 1), 0.9),
         "det_classes": np.zeros((2, 1), int), "det_valid": np.ones((2, 1), bool)}
  assert coco_map(out, num_classes=1)["map"] == pytest.approx(1.0)
