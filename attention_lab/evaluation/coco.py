"""COCO box mAP through pycocotools' COCOeval (not re-implemented).

Ground truth and detections are arrays (one row per image, padded with masks),
turned into an in-memory COCO dataset: image ids are row positions, category
ids are label + 1, boxes go from yxyx to COCO's xywh, crowd boxes carry
`iscrowd = 1` (COCOeval matches detections to them without counting them as
misses or false positives) and `area` is the given object area (COCO's
segmentation area; it decides small / medium / large).
"""

import contextlib
import io

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

# COCOeval.stats order (the twelve numbers `summarize()` prints); the first six are boxes' AP.
STAT_NAMES = ("map", "ap50", "ap75", "ap_small", "ap_medium", "ap_large",
              "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large")


def _xywh(yxyx):
  y0, x0, y1, x1 = np.moveaxis(np.asarray(yxyx, np.float64), -1, 0)
  return np.stack([x0, y0, x1 - x0, y1 - y0], -1)


def coco_ground_truth(boxes, labels, box_mask, *, crowd=None, area=None, image_mask=None,
                      image_sizes=None, num_classes: int) -> COCO:
  """An in-memory COCO dataset.

  boxes (I, M, 4) yxyx pixels, labels (I, M) in [0, num_classes), box_mask (I, M);
  crowd (I, M) bool, area (I, M) (default: box area), image_mask (I,) (padded
  images are skipped), image_sizes (I, 2) heights and widths (informational).
  """
  boxes, labels, box_mask = np.asarray(boxes), np.asarray(labels), np.asarray(box_mask, bool)
  crowd = np.zeros_like(box_mask) if crowd is None else np.asarray(crowd, bool)
  xywh = _xywh(boxes)
  area = xywh[..., 2] * xywh[..., 3] if area is None else np.asarray(area, np.float64)
  image_mask = np.ones(len(boxes), bool) if image_mask is None else np.asarray(image_mask, bool)
  images, annotations = [], []
  for i in np.flatnonzero(image_mask):
    h, w = (0, 0) if image_sizes is None else (int(v) for v in image_sizes[i])
    images.append({"id": int(i), "height": h, "width": w})
    for j in np.flatnonzero(box_mask[i]):
      annotations.append({
          "id": len(annotations) + 1, "image_id": int(i), "category_id": int(labels[i, j]) + 1,
          "bbox": [float(v) for v in xywh[i, j]], "area": float(area[i, j]),
          "iscrowd": int(crowd[i, j])})
  coco = COCO()
  coco.dataset = {"images": images, "annotations": annotations,
                  "categories": [{"id": k + 1, "name": str(k)} for k in range(num_classes)]}
  with contextlib.redirect_stdout(io.StringIO()):
    coco.createIndex()
  return coco


def detections_array(boxes, scores, classes, valid, image_mask=None) -> np.ndarray:
  """Rows [image_id, x, y, w, h, score, category_id] (COCO's loadRes array form)."""
  boxes, scores = np.asarray(boxes), np.asarray(scores, np.float64)
  classes, valid = np.asarray(classes), np.asarray(valid, bool)
  if image_mask is not None:
    valid = valid & np.asarray(image_mask, bool)[:, None]
  i, j = np.nonzero(valid)
  xywh = _xywh(boxes[i, j])
  return np.concatenate([i[:, None], xywh, scores[i, j][:, None], classes[i, j][:, None] + 1],
                        axis=1)


def evaluate(ground_truth: COCO, detections: np.ndarray) -> dict[str, float]:
  """COCOeval (iouType 'bbox') → {name: value} for STAT_NAMES; −1 where COCO has no
  ground truth of that kind (e.g. no large objects); every AP is 0 without detections."""
  if len(detections) == 0:
    return {name: 0.0 for name in STAT_NAMES}
  with contextlib.redirect_stdout(io.StringIO()):
    results = ground_truth.loadRes(np.asarray(detections, np.float64))
    evaluator = COCOeval(ground_truth, results, iouType="bbox")
    evaluator.params.imgIds = sorted(ground_truth.getImgIds())
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
  return {name: float(v) for name, v in zip(STAT_NAMES, evaluator.stats)}
