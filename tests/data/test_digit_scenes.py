import numpy as np
import pytest

from attention_lab.data import sources
from attention_lab.data.builders import digit_scenes
from tests.data.test_segmentation_data import prepared


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  return prepared("digit_scenes", tmp_path_factory.mktemp("tfds"))


def _examples(built, split):
  """The split's examples, each object field an array (records hold them as lists)."""
  records, examples = sources.Records(built.data_dir, split), []
  for i in range(len(records)):
    example = records[i]
    objects = {k: np.asarray(v) for k, v in example["objects"].items()}
    objects["bbox"] = objects["bbox"].reshape(-1, 4)
    examples.append({**example, "objects": objects})
  return examples


@pytest.fixture(scope="module")
def test_examples(built):
  return _examples(built, "test")


def _objects(example):
  objects = example["objects"]
  return objects["bbox"], objects["label"], objects["area"], objects["index"]


def test_split_sizes_and_features(built, test_examples):
  assert built.info.splits["train"].num_examples == digit_scenes.NUM_TRAIN == 4000
  assert built.info.splits["test"].num_examples == digit_scenes.NUM_TEST == 500
  example = test_examples[0]
  assert example["image"].shape == (64, 64, 3) and example["image"].dtype == np.uint8
  assert example["mask"].shape == (64, 64, 1) and example["mask"].dtype == np.uint8
  counts = [len(e["objects"]["label"]) for e in test_examples]
  assert min(counts) >= 1 and max(counts) == 4
  labels = np.concatenate([e["objects"]["label"] for e in test_examples])
  assert sorted(set(labels.tolist())) == list(range(10))


def test_masks_boxes_and_areas_agree(test_examples):
  for example in test_examples:
    mask = example["mask"][..., 0]
    assert mask.max() <= 10
    bbox, labels, areas, _ = _objects(example)
    assert np.all(areas >= 20)  # Occlusion leaves every digit mostly visible.
    assert np.all((bbox >= 0) & (bbox <= 1))
    assert np.all(bbox[:, 0] < bbox[:, 2]) and np.all(bbox[:, 1] < bbox[:, 3])
    # Independent reference: every pixel of class k lies in some box labelled k,
    # and the visible areas of the digits of class k sum to its pixel count.
    covered = np.zeros(mask.shape, bool)
    for box, label in zip(bbox, labels):
      y0, x0, y1, x1 = np.round(box * 64).astype(int)
      region = np.zeros(mask.shape, bool)
      region[y0:y1, x0:x1] = True
      covered |= region & (mask == label + 1)
      # The box is tight: each of its four edges touches a pixel of its class.
      inside = (mask == label + 1) & region
      assert inside[y0].any() and inside[y1 - 1].any()
      assert inside[:, x0].any() and inside[:, x1 - 1].any()
    assert np.array_equal(covered, mask > 0)
    for k in range(10):
      assert areas[labels == k].sum() == np.count_nonzero(mask == k + 1)


def test_boxes_overlap_little(test_examples):
  def iou(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

  # Visible boxes are at most the placement boxes, so their IoU stays small too.
  worst = max((iou(a, b) for e in test_examples for i, a in enumerate(e["objects"]["bbox"])
               for b in e["objects"]["bbox"][:i]), default=0.0)
  assert worst < 0.5


def test_one_scene_renders_visible_digits_on_a_dark_background(test_examples):
  example = test_examples[3]
  image = example["image"].astype(np.float64)
  mask = example["mask"][..., 0]
  background = image[mask == 0].mean(axis=-1)
  foreground = image[mask > 0].max(axis=-1)
  assert background.mean() < 90 and foreground.mean() > background.mean() + 60
  assert image[mask == 0].std() > 1  # Noise and gradient, not a flat colour.


def test_deterministic_and_equal_to_the_module_function(test_examples):
  pools = digit_scenes.digit_pools()
  for i in (0, 7, 499):
    image, mask, objects = digit_scenes.scene("test", i, pools)
    again = digit_scenes.scene("test", i)
    np.testing.assert_array_equal(image, again[0])
    np.testing.assert_array_equal(mask, again[1])
    np.testing.assert_array_equal(image, test_examples[i]["image"])
    np.testing.assert_array_equal(mask, test_examples[i]["mask"])
    np.testing.assert_array_equal(objects["label"], test_examples[i]["objects"]["label"])
    np.testing.assert_allclose(objects["bbox"], test_examples[i]["objects"]["bbox"])
  assert not np.array_equal(digit_scenes.scene("test", 0, pools)[0],
                            digit_scenes.scene("train", 0, pools)[0])


def test_no_digit_is_in_both_splits(built, test_examples):
  pools = digit_scenes.digit_pools()
  assert len(pools["train"][0]) == 1497 and len(pools["test"][0]) == 300
  assert not set(pools["train"][2].tolist()) & set(pools["test"][2].tolist())
  train_used = {int(i) for e in _examples(built, "train")
                for i in e["objects"]["index"]}
  test_used = {int(i) for e in test_examples for i in e["objects"]["index"]}
  assert train_used <= set(pools["train"][2].tolist())
  assert test_used <= set(pools["test"][2].tolist())
  assert not train_used & test_used
  # Pixel-level: no test digit's 8×8 image equals a train digit's.
  train_images = {image.tobytes() for image in pools["train"][0]}
  assert not any(image.tobytes() in train_images for image in pools["test"][0])
