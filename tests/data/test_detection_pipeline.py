"""Detection input: records as TFDS decodes them (sequences of objects as lists) to padded
boxes, train and eval batches from records, an exact resume. (The augmentation moving the
boxes with the pixels: tests/data/test_transforms.py.)"""

import ml_collections
import numpy as np

from attention_lab.data import detection

# Three boxes (normalised yxyx) on a 48×64 (H×W) image, one per channel.
BOXES = np.array([[0.1, 0.05, 0.5, 0.3], [0.4, 0.6, 0.95, 1.0], [0.7, 0.2, 0.9, 0.45]],
                 np.float32)


def _example(crowd=(False, False, False), count=3):
  """An example as sources.Records gives it: an object sequence's fields are lists."""
  h, w = 48, 64
  image = np.zeros((h, w, 3), np.uint8)
  for c, (y0, x0, y1, x1) in enumerate(BOXES[:count]):
    image[round(y0 * h):round(y1 * h), round(x0 * w):round(x1 * w), c] = 255
  return {"image": image,
          "objects": {"bbox": list(BOXES[:count]),
                      "label": [np.int64(v) for v in (3, 1, 2)][:count],
                      "is_crowd": [np.bool_(c) for c in crowd][:count],
                      "area": [np.int64(v) for v in (100, 200, 300)][:count]}}


def _config():
  return ml_collections.ConfigDict(dict(seed=0, dataset=dict(
      image_size=32, scale_range=(0.8, 1.2), flip=True, max_boxes=4, eval_max_boxes=4,
      min_box_size=2.0, workers=0)))


def test_objects_of_a_record():
  found = detection.objects(_example(crowd=(False, True, False)))
  np.testing.assert_array_equal(found["boxes"], BOXES)
  assert found["labels"].tolist() == [3, 1, 2] and found["labels"].dtype == np.int32
  assert found["is_crowd"].tolist() == [False, True, False]
  np.testing.assert_array_equal(found["area"], [100, 200, 300])
  empty = detection.objects({"objects": {"bbox": [], "label": []}})  # a scene without objects
  assert empty["boxes"].shape == (0, 4) and empty["labels"].shape == (0,)
  assert "is_crowd" not in empty


def test_eval_keeps_crowd_boxes_in_original_pixels():
  out = detection.preprocess(_config(), _example(crowd=(False, True, False)))
  assert out["crowd"].tolist() == [False, True, False, False]
  np.testing.assert_allclose(out["boxes"][:3], BOXES * [48, 64, 48, 64], atol=1e-4)
  assert float(out["scale"]) == 0.5 and out["image"].shape == (32, 32, 3)


def test_batches_from_records():
  records = [_example(), _example(count=1), _example(count=2)]
  config = _config()
  train = next(detection.train_iterator(config, local_batch_size=2, records=records))
  assert train["image"].shape == (2, 32, 32, 3) and train["image"].dtype == np.float32
  assert train["boxes"].shape == (2, 4, 4) and train["box_mask"].dtype == bool
  batches = list(detection.eval_batches(config, local_batch_size=2, records=records))
  assert len(batches) == 2 and batches[1]["mask"].tolist() == [True, False]
  assert batches[0]["box_mask"].sum(1).tolist() == [3, 1]
  # Normalised with ImageNet's statistics: an image's black pixels are −mean/std.
  black = batches[0]["image"][0, -1, -1]
  np.testing.assert_allclose(black, -np.asarray(detection.MEAN) / detection.STD, rtol=1e-6)
  fresh = detection.train_iterator(config, local_batch_size=2, records=records)
  expected = [next(fresh) for _ in range(4)][2:]
  resumed = detection.train_iterator(config, local_batch_size=2, start_step=2, records=records)
  for want in expected:  # resuming at step 2 continues the fresh stream exactly
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])
