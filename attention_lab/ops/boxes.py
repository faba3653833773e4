"""Box operators for one-stage detectors (RetinaNet, Lin et al. 2017): anchors, IoU,
the box coder, anchor matching, batched NMS, and the RetinaNet post-processing. Pure JAX (anchors in numpy: they are static).

Boxes are (ymin, xmin, ymax, xmax) in pixels of the network input, edges
continuous (a box covering pixel rows r0..r1 is [r0, r1 + 1)), as TFDS's
normalised boxes times the image size.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

# The usual box-coder variances (SSD; TF Object Detection API scale factors 10, 10, 5, 5).
VARIANCES = (0.1, 0.1, 0.2, 0.2)


def anchors(image_size, *, min_level: int = 3, max_level: int = 7, anchor_scale: float = 4.0,
            scales_per_octave: int = 3, aspect_ratios=(0.5, 1.0, 2.0)) -> np.ndarray:
  """RetinaNet anchors (Sec. 4): per level l, stride 2^l, sizes anchor_scale·2^l·2^(i/octave)
  for i < scales_per_octave, aspect ratios h/w in `aspect_ratios` (areas kept).

  Feature maps are ⌈H/2^l⌉ × ⌈W/2^l⌉ ('SAME' convolutions); centres at
  ((i + ½)·2^l, (j + ½)·2^l). Order: level, row, column, then scale-major
  anchor index (scale, ratio), matching a head output (B, h, w, A·K) reshaped
  to (B, h·w·A, K). Returns float32 (Σ_l h_l·w_l·A, 4) yxyx.
  """
  height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
  out = []
  for level in range(min_level, max_level + 1):
    stride = 2 ** level
    h, w = -(-height // stride), -(-width // stride)
    shapes = []
    for octave in range(scales_per_octave):
      size = anchor_scale * stride * 2 ** (octave / scales_per_octave)
      for ratio in aspect_ratios:
        shapes.append((size * math.sqrt(ratio), size / math.sqrt(ratio)))
    shapes = np.asarray(shapes)  # (A, 2) heights, widths
    cy, cx = np.meshgrid((np.arange(h) + 0.5) * stride, (np.arange(w) + 0.5) * stride,
                         indexing="ij")
    centres = np.stack([cy, cx], -1)[:, :, None, :]  # (h, w, 1, 2)
    half = shapes[None, None] / 2
    out.append(np.concatenate([centres - half, centres + half], -1).reshape(-1, 4))
  return np.concatenate(out).astype(np.float32)


def num_anchors_per_location(scales_per_octave: int = 3, aspect_ratios=(0.5, 1.0, 2.0)) -> int:
  return scales_per_octave * len(aspect_ratios)


def box_iou(a, b):
  """Pairwise IoU of a (..., N, 4) and b (..., M, 4) yxyx → (..., N, M); O(N·M)."""
  area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
  area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
  top_left = jnp.maximum(a[..., :, None, :2], b[..., None, :, :2])
  bottom_right = jnp.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
  hw = jnp.clip(bottom_right - top_left, 0)
  inter = hw[..., 0] * hw[..., 1]
  union = area_a[..., :, None] + area_b[..., None, :] - inter
  return inter / jnp.maximum(union, 1e-9)


def _centre_form(boxes):
  hw = boxes[..., 2:] - boxes[..., :2]
  return boxes[..., :2] + 0.5 * hw, hw


def encode(boxes, anchor_boxes, variances=VARIANCES):
  """Box targets relative to anchors (Faster R-CNN parametrisation, divided by variances):
  t_y = (y − y_a)/h_a/v0, t_x = (x − x_a)/w_a/v1, t_h = log(h/h_a)/v2, t_w = log(w/w_a)/v3."""
  centre, hw = _centre_form(boxes)
  a_centre, a_hw = _centre_form(anchor_boxes)
  hw = jnp.maximum(hw, 1e-6)
  v = jnp.asarray(variances, boxes.dtype)
  return jnp.concatenate([(centre - a_centre) / a_hw, jnp.log(hw / a_hw)], -1) / v


def decode(deltas, anchor_boxes, variances=VARIANCES, max_log_ratio: float = math.log(1000 / 16)):
  """Inverse of `encode`; log-size deltas clipped at `max_log_ratio` (as Detectron)."""
  a_centre, a_hw = _centre_form(anchor_boxes)
  d = deltas * jnp.asarray(variances, deltas.dtype)
  centre = a_centre + d[..., :2] * a_hw
  hw = a_hw * jnp.exp(jnp.minimum(d[..., 2:], max_log_ratio))
  return jnp.concatenate([centre - hw / 2, centre + hw / 2], -1)


def match(anchor_boxes, gt_boxes, gt_mask, *, positive_iou: float = 0.5,
          negative_iou: float = 0.4, low_quality: bool = True):
  """Assigns each anchor a ground-truth box (RetinaNet Sec. 4).

  anchor_boxes (N, 4), gt_boxes (M, 4), gt_mask (M,) bool (padding False).
  Returns (index (N,) int32 of the matched box, label (N,) int32: 1 positive,
  0 negative, −1 ignored). IoU ≥ `positive_iou`: positive; < `negative_iou`:
  negative; in between: ignored. `low_quality`: every box's best anchors are
  also positive (Detectron2's allow_low_quality_matches), so small boxes are
  never unmatched. O(N·M) time and memory.
  """
  iou = jnp.where(gt_mask[None, :], box_iou(anchor_boxes, gt_boxes), -1.0)  # (N, M)
  best = jnp.max(iou, axis=1)
  index = jnp.argmax(iou, axis=1).astype(jnp.int32)
  label = jnp.where(best >= positive_iou, 1, jnp.where(best < negative_iou, 0, -1))
  if low_quality:
    best_per_box = jnp.max(iou, axis=0)  # (M,)
    is_best = (iou == best_per_box[None, :]) & gt_mask[None, :] & (best_per_box[None, :] > 0)
    label = jnp.where(jnp.any(is_best, axis=1), 1, label)
    # An anchor that is some box's best keeps that box (the highest-IoU such box).
    index = jnp.where(jnp.any(is_best, axis=1),
                      jnp.argmax(jnp.where(is_best, iou, -1.0), axis=1).astype(jnp.int32), index)
  return index, label.astype(jnp.int32)


def nms(boxes, scores, *, iou_threshold: float, valid=None):
  """Greedy non-maximum suppression: boxes (K, 4), scores (K,) → keep (K,) bool.

  The classical greedy algorithm: visit boxes by descending score (ties by
  index), keep a valid box unless a kept box has IoU > `iou_threshold` with
  it. Jit-able and vmap-able: one sort, the (K, K) IoU matrix once, then K
  sequential O(K) steps → O(K log K + K²) time, O(K²) memory.
  """
  k = boxes.shape[0]
  valid = jnp.ones((k,), bool) if valid is None else valid
  order = jnp.argsort(-scores, stable=True)
  overlaps = box_iou(boxes[order], boxes[order]) > iou_threshold  # (K, K)
  valid = valid[order]

  def body(i, keep):
    suppressed = jnp.any(keep & overlaps[:, i])
    return keep.at[i].set(valid[i] & ~suppressed)

  keep = jax.lax.fori_loop(0, k, body, jnp.zeros((k,), bool))
  return jnp.zeros((k,), bool).at[order].set(keep)


def batched_nms(boxes, scores, classes, *, iou_threshold: float, valid=None):
  """Per-class NMS in one pass: boxes of different classes are moved apart by
  class·(extent + 1) so they never overlap (the torchvision `batched_nms` trick).
  Same returns and cost as `nms`."""
  extent = jnp.max(jnp.abs(boxes)) + 1.0
  shifted = boxes + (classes.astype(boxes.dtype) * extent)[:, None]
  return nms(shifted, scores, iou_threshold=iou_threshold, valid=valid)


def postprocess(cls_logits, box_deltas, anchor_boxes, level_sizes, *, image_size,
                pre_nms_top_k: int = 1000, score_threshold: float = 0.05,
                iou_threshold: float = 0.5, max_detections: int = 100):
  """RetinaNet inference (Sec. 5.1) for one image: per level the `pre_nms_top_k`
  highest (anchor, class) scores above `score_threshold`, boxes decoded and
  clipped to the image, per-class NMS over all levels, the best `max_detections`.

  cls_logits (N, C), box_deltas (N, 4), anchor_boxes (N, 4), level_sizes: the
  anchors per level (static ints summing to N). Returns boxes (D, 4), scores
  (D,), classes (D,) int32, valid (D,) bool with D = max_detections, sorted by
  score. Cost O(N·C) for the top-k, O(K²) for NMS, K = Σ_l min(top_k, N_l·C).
  """
  num_classes = cls_logits.shape[-1]
  height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
  all_boxes, all_scores, all_classes = [], [], []
  start = 0
  for size in level_sizes:
    scores = jax.nn.sigmoid(cls_logits[start:start + size].astype(jnp.float32)).reshape(-1)
    k = min(pre_nms_top_k, size * num_classes)
    top, flat = jax.lax.top_k(scores, k)
    anchor = start + flat // num_classes
    all_scores.append(top)
    all_classes.append((flat % num_classes).astype(jnp.int32))
    all_boxes.append(decode(box_deltas[anchor].astype(jnp.float32), anchor_boxes[anchor]))
    start += size
  boxes = jnp.concatenate(all_boxes)
  boxes = jnp.clip(boxes, 0, jnp.asarray([height, width, height, width], jnp.float32))
  scores, classes = jnp.concatenate(all_scores), jnp.concatenate(all_classes)
  order = jnp.argsort(-scores)
  boxes, scores, classes = boxes[order], scores[order], classes[order]
  area_ok = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
  keep = batched_nms(boxes, scores, classes, iou_threshold=iou_threshold,
                     valid=(scores > score_threshold) & area_ok)
  kept_scores = jnp.where(keep, scores, -1.0)
  d = min(max_detections, scores.shape[0])
  top, idx = jax.lax.top_k(kept_scores, d)
  out = (boxes[idx], jnp.maximum(top, 0.0), classes[idx], top > 0)
  if d < max_detections:  # fewer candidates than detections: pad
    pad = max_detections - d
    out = (jnp.pad(out[0], ((0, pad), (0, 0))), jnp.pad(out[1], (0, pad)),
           jnp.pad(out[2], (0, pad)), jnp.pad(out[3], (0, pad)))
  return out
