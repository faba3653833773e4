"""ops.boxes against explicit loops and formulas (float64 numpy references)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab.ops import boxes

# The tests jit the operators: run eagerly, each jnp primitive inside them is its own XLA
# compile per shape (seconds in all on a GPU).
box_iou, encode, decode = jax.jit(boxes.box_iou), jax.jit(boxes.encode), jax.jit(boxes.decode)
match = jax.jit(boxes.match, static_argnames="low_quality")


def _random_boxes(rng, n, size=64.0, min_side=2.0):
  yx = rng.uniform(0, size - min_side, (n, 2))
  hw = rng.uniform(min_side, size / 2, (n, 2))
  return np.concatenate([yx, yx + hw], 1).astype(np.float32)


def _iou(a, b):
  ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
  iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
  inter = ih * iw
  union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
  return inter / union


@pytest.mark.parametrize("size", [64, (100, 75), 33])
def test_anchors_count_centres_and_shapes(size):
  h, w = (size, size) if isinstance(size, int) else size
  got = boxes.anchors(size, min_level=3, max_level=7, anchor_scale=4.0)
  grids = [(-(-h // 2**l), -(-w // 2**l)) for l in range(3, 8)]
  assert got.shape == (sum(gh * gw for gh, gw in grids) * 9, 4)
  start = 0
  for level, (gh, gw) in zip(range(3, 8), grids):
    stride = 2**level
    block = got[start:start + gh * gw * 9].reshape(gh, gw, 9, 4).astype(np.float64)
    start += gh * gw * 9
    for i, j, a in itertools.product(range(gh), range(gw), range(9)):
      y0, x0, y1, x1 = block[i, j, a]
      np.testing.assert_allclose([(y0 + y1) / 2, (x0 + x1) / 2],
                                 [(i + 0.5) * stride, (j + 0.5) * stride], atol=1e-3)
      scale, ratio = divmod(a, 3)
      side = 4.0 * stride * 2 ** (scale / 3)
      np.testing.assert_allclose((y1 - y0) * (x1 - x0), side * side, rtol=1e-5)
      np.testing.assert_allclose((y1 - y0) / (x1 - x0), (0.5, 1.0, 2.0)[ratio], rtol=1e-5)


def test_encode_matches_formula_and_decode_inverts():
  rng = np.random.default_rng(0)
  gt, anchor = _random_boxes(rng, 37), _random_boxes(rng, 37)
  t = np.asarray(encode(jnp.asarray(gt), jnp.asarray(anchor)), np.float64)
  for g, a, ti in zip(gt.astype(np.float64), anchor.astype(np.float64), t):
    ha, wa = a[2] - a[0], a[3] - a[1]
    hg, wg = g[2] - g[0], g[3] - g[1]
    expected = [((g[0] + g[2]) / 2 - (a[0] + a[2]) / 2) / ha / 0.1,
                ((g[1] + g[3]) / 2 - (a[1] + a[3]) / 2) / wa / 0.1,
                math.log(hg / ha) / 0.2, math.log(wg / wa) / 0.2]
    np.testing.assert_allclose(ti, expected, rtol=1e-4, atol=1e-4)
  back = decode(jnp.asarray(t, jnp.float32), jnp.asarray(anchor))
  np.testing.assert_allclose(back, gt, atol=1e-3)


def test_box_iou_matches_loop():
  rng = np.random.default_rng(1)
  a, b = _random_boxes(rng, 7), _random_boxes(rng, 5)
  expected = [[_iou(x, y) for y in b.astype(np.float64)] for x in a.astype(np.float64)]
  np.testing.assert_allclose(box_iou(jnp.asarray(a), jnp.asarray(b)), expected, atol=1e-6)


def test_match_thresholds_ignore_band_and_low_quality():
  anchor = jnp.asarray([[0, 0, 10, 10], [0, 0, 10, 6], [0, 0, 10, 4.5], [20, 20, 30, 30],
                        [50, 50, 52, 52]], jnp.float32)
  gt = jnp.asarray([[0, 0, 10, 10], [49, 49, 60, 60], [0, 0, 1, 1]], jnp.float32)
  index, label = match(anchor, gt, jnp.asarray([True, True, False]))
  # IoUs with box 0: 1, 0.6, 0.45 (ignored), 0, 0; anchor 4 is box 1's best (IoU 4/121).
  np.testing.assert_array_equal(label, [1, 1, -1, 0, 1])
  np.testing.assert_array_equal(np.asarray(index)[[0, 1, 4]], [0, 0, 1])
  _, label = match(anchor, gt, jnp.asarray([True, True, False]), low_quality=False)
  np.testing.assert_array_equal(label, [1, 1, -1, 0, 0])


def _naive_nms(b, classes, valid, threshold):
  keep = []
  for i in range(len(b)):
    if valid[i] and all(classes[j] != classes[i] or _iou(b[j], b[i]) <= threshold
                        for j in keep):
      keep.append(i)
  return keep


@pytest.mark.parametrize("n,num_classes,threshold", [(1, 1, 0.5), (13, 1, 0.5), (40, 3, 0.3),
                                                     (57, 2, 0.7)])
def test_batched_nms_matches_naive_loop(n, num_classes, threshold):
  rng = np.random.default_rng(n)
  centres = rng.uniform(10, 54, (4, 2))[rng.integers(0, 4, n)] + rng.normal(0, 3, (n, 2))
  hw = rng.uniform(6, 16, (n, 2))
  b = np.concatenate([centres - hw / 2, centres + hw / 2], 1).astype(np.float32)
  scores = np.sort(rng.uniform(size=n))[::-1].astype(np.float32)
  classes = rng.integers(0, num_classes, n)
  valid = rng.uniform(size=n) < 0.9
  perm = rng.permutation(n)  # nms sorts by score itself
  keep = jax.jit(lambda b, s, c, v: boxes.batched_nms(b, s, c, iou_threshold=threshold, valid=v))(
      jnp.asarray(b[perm]), jnp.asarray(scores[perm]), jnp.asarray(classes[perm]),
      jnp.asarray(valid[perm]))
  expected = _naive_nms(b.astype(np.float64), classes, valid, threshold)
  assert sorted(perm[np.flatnonzero(np.asarray(keep))].tolist()) == expected


def test_postprocess_finds_the_encoded_boxes():
  size = 64
  anchor = boxes.anchors(size, min_level=3, max_level=4, anchor_scale=2.0)
  levels = [8 * 8 * 9, 4 * 4 * 9]
  gt = np.asarray([[10, 12, 30, 26], [40, 35, 60, 61]], np.float32)
  logits = np.full((len(anchor), 3), -8.0, np.float32)
  iou = np.asarray(box_iou(jnp.asarray(anchor), jnp.asarray(gt)))
  deltas = np.zeros((len(anchor), 4), np.float32)
  for k, cls in enumerate([2, 0]):
    near = np.flatnonzero(iou[:, k] > 0.3)
    logits[near, cls] = 4.0 * iou[near, k]  # The best anchor scores highest.
    deltas[near] = encode(jnp.asarray(gt[k:k + 1]), jnp.asarray(anchor[near]))
  out = jax.jit(lambda c, d: boxes.postprocess(c, d, jnp.asarray(anchor), levels,
                                                image_size=size, max_detections=5))(
                                                    jnp.asarray(logits), jnp.asarray(deltas))
  det, scores, classes, valid = (np.asarray(o) for o in out)
  assert det.shape == (5, 4) and valid.sum() == 2  # NMS merged each cluster into one box.
  assert np.all(np.diff(scores) <= 0)
  order = np.argsort(classes[:2])
  np.testing.assert_allclose(det[:2][order], gt[[1, 0]], atol=1e-3)
