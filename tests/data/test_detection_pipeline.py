"""Detection pipeline: boxes stay on their objects under scale jitter, crop, pad and flip
(each box is drawn into its own channel, then read back from the augmented image)."""

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from attention_lab.data import detection

# Three boxes (normalised yxyx) on a 48×64 (H×W) image, one per channel; the second
# touches the right edge, so the crops and flips cut it.
BOXES = np.array([[0.1, 0.05, 0.5, 0.3], [0.4, 0.6, 0.95, 1.0], [0.7, 0.2, 0.9, 0.45]],
                 np.float32)


def _example(crowd=(False, False, False)):
  h, w = 48, 64
  image = np.zeros((h, w, 3), np.uint8)
  for c, (y0, x0, y1, x1) in enumerate(BOXES):
    image[round(y0 * h):round(y1 * h), round(x0 * w):round(x1 * w), c] = 255
  return {"image": tf.constant(image),
          "objects": {"bbox": tf.constant(BOXES), "label": tf.constant([3, 1, 2], tf.int64),
                      "is_crowd": tf.constant(crowd),
                      "area": tf.constant([100, 200, 300], tf.int64)}}


def _read_back(image, channel):
  """The pixel-edge box of the pixels where `channel` is on, or None."""
  rows, cols = np.nonzero(detection.denormalize(image)[..., channel] > 127)
  if rows.size == 0:
    return None
  return np.array([rows.min(), cols.min(), rows.max() + 1, cols.max() + 1], np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_train_boxes_follow_scale_crop_and_flip(seed):
  out = detection.train_preprocess(
      _example(), size=56, scale_range=(0.6, 1.6), flip=True, max_boxes=5, min_box_size=2.0,
      seed=tf.constant([seed, 11], tf.int64))
  image, boxes = out["image"].numpy(), out["boxes"].numpy()
  mask, labels = out["box_mask"].numpy(), out["labels"].numpy()
  assert image.shape == (56, 56, 3) and boxes.shape == (5, 4) and mask[3:].sum() == 0
  kept = {int(l): b for l, b, m in zip(labels, boxes, mask) if m}
  for channel, label in enumerate([3, 1, 2]):
    seen = _read_back(image, channel)
    if label not in kept:  # dropped: cropped away (or to a sliver)
      assert seen is None or min(seen[2] - seen[0], seen[3] - seen[1]) <= 3
      continue
    np.testing.assert_allclose(kept[label], seen, atol=1.5)  # resampling blurs ≤ 1 px


def test_flip_happens_and_mirrors_boxes():
  flips = set()
  for seed in range(8):
    out = detection.train_preprocess(
        _example(), size=64, scale_range=(1.0, 1.0), flip=True, max_boxes=4, min_box_size=1.0,
        seed=tf.constant([seed, 3], tf.int64))
    first = _read_back(out["image"].numpy(), 0)
    flips.add(bool(first[1] > 32))
    np.testing.assert_allclose(out["boxes"].numpy()[0], first, atol=1.0)
  assert flips == {True, False}


def test_crowd_boxes_dropped_in_training_kept_in_eval():
  example = _example(crowd=(False, True, False))
  out = detection.train_preprocess(example, size=64, scale_range=(1.0, 1.0), flip=False,
                                   max_boxes=4, min_box_size=1.0,
                                   seed=tf.constant([0, 0], tf.int64))
  assert out["box_mask"].numpy().sum() == 2 and 1 not in out["labels"].numpy()[:2]
  ev = detection.eval_preprocess(example, size=32, max_boxes=4)
  assert ev["crowd"].numpy().tolist() == [False, True, False, False]
  # Ground truth in original pixels; the image is resized by 32 / 64 and padded below.
  np.testing.assert_allclose(ev["boxes"].numpy()[:3], BOXES * [48, 64, 48, 64], atol=1e-4)
  assert float(ev["scale"]) == 0.5 and ev["image"].shape == (32, 32, 3)
  np.testing.assert_allclose(ev["area"].numpy()[:3], [100, 200, 300])
  seen = _read_back(ev["image"].numpy(), 2)
  np.testing.assert_allclose(seen, BOXES[2] * [48, 64, 48, 64] * 0.5, atol=1.0)
  assert _read_back(ev["image"].numpy()[24:], 0) is None  # padding below the image


def test_batches_from_a_source():
  config = ml_collections.ConfigDict(dict(
      seed=0, dataset=dict(image_size=32, scale_range=(0.8, 1.2), flip=True, max_boxes=4,
                           eval_max_boxes=4, min_box_size=2.0, shuffle_buffer=4)))
  source = tf.data.Dataset.from_tensors(_example()).repeat(3)
  train = next(detection.train_iterator(config, local_batch_size=2, source=source))
  assert train["image"].shape == (2, 32, 32, 3) and train["boxes"].shape == (2, 4, 4)
  batches = list(detection.eval_batches(config, local_batch_size=2, source=source))
  assert len(batches) == 2 and batches[1]["mask"].tolist() == [True, False]
  fresh = detection.train_iterator(config, local_batch_size=2, source=source)
  expected = [next(fresh) for _ in range(4)][2:]
  resumed = detection.train_iterator(config, local_batch_size=2, start_step=2, source=source)
  for want in expected:  # resuming at step 2 continues the fresh stream exactly
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])
