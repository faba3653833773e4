"""The numpy transforms (data/transforms) against today's TF functions, and their randomness.

TF is the reference where it is deterministic, and where its random draws can be fixed:
tests patch TF's random ops to return scripted values and give the numpy side a
`Scripted` generator holding the same values. Tolerances: `bilinear` and `nearest`
are TF's arithmetic (float32 rounding only); `antialiased` resizes with Pillow on uint8
pixels, whose two passes each round to a pixel level: at most 1 level from TF's float
result, about 0.3 on average (checked in pixel levels, 255 = white).
"""

import pathlib

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from attention_lab.data import info
from attention_lab.data import pipeline
from attention_lab.data import segmentation as segmentation_data
from attention_lab.data.transforms import classification
from attention_lab.data.transforms import detection
from attention_lab.data.transforms import gan
from attention_lab.data.transforms import image as image_ops
from attention_lab.data.transforms import restoration
from attention_lab.data.transforms import segmentation
from experiments import input_throughput as tf_baseline  # the TF maps the ports replace
from tests import no_tensorflow

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SHAPES = [((7, 9), (13, 5)), ((40, 31), (17, 29)), ((16, 16), (32, 32)), ((37, 53), (24, 35))]


def _pixels(shape, seed=0):
  return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _config(**dataset):
  return ml_collections.ConfigDict({"dataset": dataset})


def _assert_levels(got, expected, scale=1.0, mean_at_most=0.4, max_at_most=1.01):
  """`got` within Pillow's uint8 rounding of `expected`; both in units of `scale` levels."""
  diff = np.abs(np.asarray(got, np.float64) - np.asarray(expected, np.float64)) * scale
  assert diff.mean() <= mean_at_most and diff.max() <= max_at_most, (diff.mean(), diff.max())


class Scripted:
  """A stand-in np.random.Generator that returns scripted draws, checking their ranges."""

  def __init__(self, *values):
    self.values = list(values)

  def _draw(self, size, low, high):
    values = np.asarray(self.values.pop(0))
    assert values.shape == (() if size is None else (size,)), (values, size)
    assert np.all(values >= low) and np.all(values < high), (values, low, high)
    return values if size else values.item()

  def random(self, size=None, dtype=np.float64):
    return np.asarray(self._draw(size, 0, 1), dtype) if size else self._draw(size, 0, 1)

  def uniform(self, low, high):
    return self._draw(None, low, high + 1e-9)

  def integers(self, low, high, size=None):
    return self._draw(size, low, high)


@pytest.fixture
def tf_random(monkeypatch):
  """Scripts TF's random ops: returns a function that queues values for them."""
  queue = []

  def uniform(shape, seed, minval=0, maxval=None, **_):
    del seed, minval, maxval
    return tf.constant(queue.pop(0), tf.float32, shape=shape)

  def crop(value, size, seed, **_):
    del seed
    return tf.slice(value, list(queue.pop(0)) + [0] * (len(size) - 2), size)

  def flip(image, seed):
    del seed
    return tf.reverse(image, [1]) if queue.pop(0) else image

  def box(image_size, bounding_boxes, seed, **_):
    del image_size, bounding_boxes, seed
    top, left, height, width = queue.pop(0)
    return tf.constant([top, left, 0]), tf.constant([height, width, -1]), None

  monkeypatch.setattr(tf.random, "stateless_uniform", uniform)
  monkeypatch.setattr(tf.image, "stateless_random_crop", crop)
  monkeypatch.setattr(tf.image, "stateless_random_flip_left_right", flip)
  monkeypatch.setattr(tf.image, "stateless_sample_distorted_bounding_box", box)
  return queue.extend


SEED = tf.constant([1, 2], tf.int64)


def test_transforms_import_and_run_without_tensorflow():
  code = """
import numpy as np
from attention_lab.data.transforms import classification, detection, gan, restoration, segmentation
rng, image = np.random.default_rng(0), np.zeros((20, 24, 3), np.uint8)
classification.train(image, 1, rng, dataset="imagenet2012", size=8, mean=(0,) * 3, std=(1,) * 3)
segmentation.train(image, image[..., :1], rng, crop=9, mean=(0,) * 3, std=(1,) * 3)
detection.train(image, np.zeros((1, 4)), [1], rng, size=8, scale_range=(1, 2), flip=True,
                max_boxes=2, min_box_size=0, mean=(0,) * 3, std=(1,) * 3)
restoration.train(image, image, rng, patch=(4, 4), augment=True)
gan.preprocess(image, dataset="celeb_a", size=8)
print("ok")
"""
  done = no_tensorflow.run(["-c", code], cwd=pathlib.Path(__file__).parents[2])
  assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# ---------------------------------------------------------------------------- resizing

@pytest.mark.parametrize("shape,size", SHAPES)
def test_bilinear_and_nearest_are_tfs(shape, size):
  image, label = _pixels((*shape, 3)), _pixels((*shape, 1))
  expected = tf.image.resize(tf.cast(image, tf.float32), size).numpy()
  np.testing.assert_allclose(image_ops.bilinear(image, size), expected, atol=1e-4)
  window = (size[0] // 3, size[1] // 4, size[0] - size[0] // 3 - 1, size[1] // 2)
  top, left, height, width = window
  np.testing.assert_allclose(image_ops.bilinear(image.astype(np.float32), size, window),
                             expected[top:top + height, left:left + width], atol=1e-4)
  expected = tf.image.resize(label, size, "nearest").numpy()
  np.testing.assert_array_equal(image_ops.nearest(label, size), expected)
  np.testing.assert_array_equal(image_ops.nearest(label[..., 0], size, window),
                                expected[top:top + height, left:left + width, 0])


@pytest.mark.parametrize("shape,size", SHAPES)
@pytest.mark.parametrize("channels", [1, 3])
def test_antialiased_is_tfs_within_a_level(shape, size, channels):
  image = _pixels((*shape, channels))
  expected = tf.image.resize(tf.cast(image, tf.float32), size, antialias=True).numpy()
  got = image_ops.antialiased(image, size)
  assert got.dtype == np.uint8 and got.shape == (*size, channels)
  _assert_levels(got, expected)
  top, left, height, width = window = (size[0] // 2, 1, size[0] - size[0] // 2, size[1] - 2)
  _assert_levels(image_ops.antialiased(image, size, window),
                 expected[top:top + height, left:left + width])


def test_normalize_one_image_or_a_batch():
  batch = _pixels((2, 3, 4, 3))
  expected = (batch.astype(np.float32) / 255.0 - MEAN) / STD
  np.testing.assert_allclose(image_ops.normalize(batch, MEAN, STD), expected, atol=1e-5)
  np.testing.assert_allclose(image_ops.normalize(batch[1], MEAN, STD), expected[1], atol=1e-5)
  assert image_ops.normalize(batch, MEAN, STD).dtype == np.float32


# ----------------------------------------------------------------------- classification

def _tf_classification(image, config, train):
  example = {"image": tf.constant(image), "label": tf.constant(7, tf.int64)}
  out = tf_baseline.classification_preprocess(config, example, train=train, seed=SEED)
  return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("dataset,shape,size,channels", [
    ("digits", (32, 32, 1), 32, 1), ("digits", (32, 32, 1), 48, 3), ("digits", (32, 32, 1), 20, 1),
    ("cifar10", (32, 32, 3), 32, None), ("cifar100", (32, 32, 3), 40, None),
    ("imagenet2012", (37, 53, 3), 24, None), ("imagenet2012", (64, 41, 3), 21, None)])
def test_classification_eval_is_tfs(dataset, shape, size, channels):
  image = _pixels(shape)
  mean, std = pipeline.normalization(dataset)
  config = _config(name=dataset, image_size=size, channels=channels)
  expected = _tf_classification(image, config, train=False)
  got = classification.evaluate(image, 7, dataset=dataset, size=size, channels=channels,
                                mean=mean, std=std)
  assert got["label"].dtype == np.int32 and got["label"] == 7
  assert got["image"].dtype == np.float32 and got["image"].shape == expected["image"].shape
  if dataset == "imagenet2012":
    _assert_levels(got["image"], expected["image"], 255 * np.asarray(std))
  else:
    np.testing.assert_allclose(got["image"], expected["image"], atol=1e-5)


@pytest.mark.parametrize("dataset,crop,size,draws", [
    ("cifar10", "resize", 32, [(0, 8), 0.7]), ("cifar100", "resize", 40, [(5, 2), 0.2]),
    ("imagenet2012", "resize", 24, [(3, 0), 0.1]),
    ("imagenet2012", "inception", 20, [(4, 9, 30, 17), 0.9])])
def test_classification_train_is_tfs_at_fixed_draws(tf_random, monkeypatch, dataset, crop,
                                                    size, draws):
  image = _pixels((37, 53, 3) if dataset == "imagenet2012" else (32, 32, 3))
  mean, std = pipeline.normalization(dataset)
  where, flip = draws
  tf_random([where, flip < 0.5])
  expected = _tf_classification(image, _config(name=dataset, image_size=size, crop=crop), True)
  if crop == "inception":
    monkeypatch.setattr(classification, "inception_box", lambda *_: where)
    rng = Scripted(flip)
  else:
    rng = Scripted(*(where if dataset == "imagenet2012" else [where]), flip)
  got = classification.train(image, 7, rng, dataset=dataset, size=size, crop=crop,
                             mean=mean, std=std)
  assert not rng.values and got["image"].shape == expected["image"].shape
  if dataset == "imagenet2012":
    _assert_levels(got["image"], expected["image"], 255 * np.asarray(std))
  else:
    np.testing.assert_allclose(got["image"], expected["image"], atol=1e-5)


def test_unnormalised_classification_is_uint8_where_not_resized():
  image, mean, std = _pixels((32, 32, 3)), *pipeline.normalization("cifar10")
  kwargs = dict(dataset="cifar10", size=32, mean=mean, std=std)
  raw = classification.train(image, 1, np.random.default_rng(3), normalize=False, **kwargs)
  assert raw["image"].dtype == np.uint8
  np.testing.assert_allclose(image_ops.normalize(raw["image"], mean, std),
                             classification.train(image, 1, np.random.default_rng(3),
                                                  **kwargs)["image"], atol=1e-6)


def test_inception_box_draws_as_tf_does():
  """Over 600 seeds each: the same crop statistics as TF's sampler on a 20×30 image."""
  shape = (20, 30, 3)
  ours = np.array([classification.inception_box(shape, np.random.default_rng(s))
                   for s in range(600)])
  theirs = []
  for s in range(600):
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, tf.zeros([0, 0, 4]), seed=[s, 0], area_range=(0.08, 1.0),
        aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.0,
        use_image_if_no_bounding_boxes=True)
    theirs.append([*begin.numpy()[:2], *size.numpy()[:2]])
  theirs = np.array(theirs)
  for boxes in (ours, theirs):
    top, left, height, width = boxes.T
    area = height * width / 600
    assert np.all(area >= 0.08) and np.all(area <= 1)
    assert np.all((top + height < 20) | (height == 20))  # TF's: never the bottom edge
    assert np.all((left + width < 30) | (width == 30))
  for k in range(4):  # means within 4 standard errors, CDFs within a KS bound (α ≈ 1e-3)
    a, b = ours[:, k], theirs[:, k]
    assert abs(a.mean() - b.mean()) < 4 * np.sqrt((a.var() + b.var()) / 600)
    grid = np.arange(31)
    cdf = lambda v: np.searchsorted(np.sort(v), grid, side="right") / 600
    assert np.abs(cdf(a) - cdf(b)).max() < 0.12


def test_classification_crops_are_random_inside_and_flip_half_the_time():
  image = np.zeros((32, 32, 3), np.uint8)
  image[:, 16:] = 255  # dark left half, bright right half
  flips, bright = 0, set()
  for seed in range(400):
    out = classification.train(image, 0, np.random.default_rng(seed), dataset="cifar10",
                               size=32, mean=(0,) * 3, std=(1,) * 3, normalize=False)["image"]
    flips += out[:, :8].mean() > out[:, -8:].mean()
    again = classification.train(image, 0, np.random.default_rng(seed), dataset="cifar10",
                                 size=32, mean=(0,) * 3, std=(1,) * 3, normalize=False)
    np.testing.assert_array_equal(again["image"], out)
    bright.add(int((out[0] == 255).all(-1).sum()))  # moves with the crop
  assert 160 < flips < 240 and len(bright) >= 5
  big = _pixels((40, 50, 3))
  for seed in range(50):
    rng = np.random.default_rng(seed)
    top, left, height, width = classification.inception_box(big.shape, rng)
    assert 0 <= top and top + height <= 40 and 0 <= left and left + width <= 50
    assert 3 / 4 - 0.1 < width / height < 4 / 3 + 0.1


# ------------------------------------------------------------------------- segmentation

def _seg_example(name, shape, seed=0):
  image, label = _pixels((*shape, 3), seed), _pixels((*shape, 1), seed + 1)
  if name == "digit_scenes":
    return image, label % 11, {"image": tf.constant(image), "mask": tf.constant(label % 11)}
  return image, label % 34, {"image_left": tf.constant(image),
                             "segmentation_label": tf.constant(label % 34)}


def _seg_kwargs(name, resize):
  table = (segmentation.train_id_table(segmentation_data.CITYSCAPES_TRAIN_IDS)
           if name.startswith("cityscapes") else None)
  mean, std = info.lookup(name).stats
  return dict(mean=mean, std=std, resize=resize, label_table=table)


@pytest.mark.parametrize("name,shape,size,resize", [
    ("digit_scenes", (23, 37), 40, 0), ("cityscapes/semantic_segmentation", (61, 45), 32, 0),
    ("digit_scenes", (20, 20), 48, 30), ("digit_scenes", (33, 17), 33, 0)])
def test_segmentation_eval_is_tfs(name, shape, size, resize):
  image, label, example = _seg_example(name, shape)
  config = _config(name=name, resize=resize)
  expected = tf_baseline.segmentation_eval(*tf_baseline.segmentation_decode(config, example),
                                           size=size)
  kwargs = _seg_kwargs(name, resize)
  got = segmentation.evaluate(image, label, size=size, **kwargs)
  np.testing.assert_allclose(got["image"], expected[0].numpy(), atol=1e-4)
  np.testing.assert_array_equal(got["label"], expected[1].numpy())
  assert got["label"].dtype == np.int32 and got["image"].dtype == np.float32
  raw = segmentation.evaluate(image, label, size=size, normalize=False, **kwargs)
  np.testing.assert_allclose(image_ops.normalize(raw["image"], kwargs["mean"], kwargs["std"]),
                             got["image"], atol=1e-5)


@pytest.mark.parametrize("name,shape,crop,resize,draws", [
    ("digit_scenes", (23, 37), 16, 0, [1.6, (7, 30), True]),
    ("digit_scenes", (23, 37), 16, 0, [0.55, (0, 4), False]),
    ("cityscapes/semantic_segmentation", (31, 29), 40, 0, [1.05, (0, 0), True]),
    ("digit_scenes", (20, 20), 24, 30, [0.9, (3, 1), True])])
def test_segmentation_train_is_tfs_at_fixed_draws(tf_random, name, shape, crop, resize, draws):
  image, label, example = _seg_example(name, shape)
  scale, where, flip = draws
  tf_random([scale, where, flip])
  config = _config(name=name, resize=resize)
  expected = tf_baseline.segmentation_train(*tf_baseline.segmentation_decode(config, example),
                                            crop=crop, scale_range=(0.5, 2.0), seed=SEED)
  rng = Scripted(scale, *where, 0.2 if flip else 0.8)
  got = segmentation.train(image, label, rng, crop=crop, **_seg_kwargs(name, resize))
  assert not rng.values
  np.testing.assert_allclose(got["image"], expected[0].numpy(), atol=1e-4)
  np.testing.assert_array_equal(got["label"], expected[1].numpy())
  assert got["label"].shape == (crop, crop) and got["label"].dtype == np.int32


def _coordinate_scene(height, width):
  """An image whose channels are 20·row and 20·column, labels the pixel's index."""
  rows, cols = np.mgrid[:height, :width]
  image = np.stack([20 * rows, 20 * cols, np.zeros_like(rows)], -1).astype(np.uint8)
  return image, (rows * width + cols).astype(np.uint8)


def test_segmentation_labels_stay_on_their_pixels():
  """Each output pixel's label names the input pixel its image value was sampled in."""
  height, width = 11, 13
  image, label = _coordinate_scene(height, width)
  widths, flips = [], []
  for seed in range(200):
    out = segmentation.train(image, label, np.random.default_rng(seed), crop=20,
                             scale_range=(0.5, 2.0), mean=(0,) * 3, std=(1 / 255,) * 3)
    valid = out["label"] != segmentation.IGNORE
    source_row, source_col = np.divmod(out["label"][valid], width)
    at_row, at_col = out["image"][valid][:, 0] / 20 + 0.5, out["image"][valid][:, 1] / 20 + 0.5
    assert np.all((source_row - 1e-3 <= at_row) & (at_row <= source_row + 1 + 1e-3))
    assert np.all((source_col - 1e-3 <= at_col) & (at_col <= source_col + 1 + 1e-3))
    assert np.all(out["image"][~valid] == 0)  # the mean pixel, normalised
    columns = valid.any(0)
    widths.append(columns.sum())
    if not columns.all():  # padded at the right, or at the left when flipped
      flips.append(not columns[0])
  widths = np.array(widths)  # round(13·s) for s ~ U[0.5, 2], cut at the crop of 20
  assert widths.min() <= 8 and widths.max() == 20 and 0.2 < np.mean(widths == 20) < 0.47
  assert 0.35 < np.mean(flips) < 0.65
  again = segmentation.train(image, label, np.random.default_rng(7), crop=20, mean=(0,) * 3,
                             std=(1,) * 3)
  first = segmentation.train(image, label, np.random.default_rng(7), crop=20, mean=(0,) * 3,
                             std=(1,) * 3)
  for key in ("image", "label"):
    np.testing.assert_array_equal(again[key], first[key])


# ---------------------------------------------------------------------------- detection

def _det_example(shape, seed=0):
  rng = np.random.default_rng(seed)
  ys, xs = np.sort(rng.uniform(0, 1, (2, 6, 2)), axis=-1)
  boxes = np.stack([ys[:, 0], xs[:, 0], ys[:, 1], xs[:, 1]], 1).astype(np.float32)
  labels = rng.integers(0, 80, 6)
  crowd = np.array([False, True, False, False, True, False])
  area = np.array([0, 5, 9, 0, 0, 3], np.int64)
  image = _pixels((*shape, 3), seed)
  example = {"image": tf.constant(image), "objects": {
      "bbox": tf.constant(boxes), "label": tf.constant(labels), "is_crowd": tf.constant(crowd),
      "area": tf.constant(area)}}
  return image, boxes, labels, crowd, area, example


@pytest.mark.parametrize("shape,size", [((48, 64), 32), ((30, 21), 40), ((32, 32), 32)])
def test_detection_eval_is_tfs(shape, size):
  image, boxes, labels, crowd, area, example = _det_example(shape)
  expected = {k: v.numpy() for k, v in
              tf_baseline.detection_eval(example, size=size, max_boxes=5).items()}
  got = detection.evaluate(image, boxes, labels, size=size, max_boxes=5, is_crowd=crowd,
                           area=area, mean=MEAN, std=STD)
  assert got.keys() == expected.keys()
  for key, value in expected.items():
    assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
    if key == "image":
      _assert_levels(got[key], value, 255 * np.asarray(STD))
    else:
      np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=key)


@pytest.mark.parametrize("shape,size,draws", [
    ((48, 64), 32, [1.7, (0.3, 0.9), 0.2]), ((48, 64), 32, [0.6, (0.5, 0.5), 0.7]),
    ((30, 21), 40, [1.2, (0.99, 0.0), 0.4])])
def test_detection_train_is_tfs_at_fixed_draws(tf_random, shape, size, draws):
  image, boxes, labels, crowd, _, example = _det_example(shape)
  scale, offsets, flip = draws
  tf_random([scale, offsets, flip])
  kwargs = dict(size=size, scale_range=(0.5, 2.0), flip=True, max_boxes=3, min_box_size=2.0)
  expected = {k: v.numpy() for k, v in
              tf_baseline.detection_train(example, seed=SEED, **kwargs).items()}
  rng = Scripted(scale, offsets, flip)
  got = detection.train(image, boxes, labels, rng, is_crowd=crowd, mean=MEAN, std=STD, **kwargs)
  assert not rng.values and got.keys() == expected.keys()
  for key, value in expected.items():
    assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
    if key == "image":
      _assert_levels(got[key], value, 255 * np.asarray(STD))
    else:
      np.testing.assert_allclose(got[key], value, atol=1e-4, err_msg=key)


def test_detection_boxes_cover_their_painted_pixels():
  image = np.zeros((40, 60, 3), np.uint8)
  image[10:30, 20:35] = 255
  box = np.array([[10 / 40, 20 / 60, 30 / 40, 35 / 60]], np.float32)
  kept = 0
  for seed in range(100):
    out = detection.train(image, box, [3], np.random.default_rng(seed), size=32,
                          scale_range=(0.5, 2.0), flip=True, max_boxes=2, min_box_size=1.0,
                          mean=MEAN, std=STD, normalize=False)
    painted = out["image"][..., 0] > 128
    assert not out["box_mask"][1]
    if not out["box_mask"][0]:  # cut to a sliver by the crop
      assert painted.sum() <= 64
      continue
    kept += 1
    ymin, xmin, ymax, xmax = out["boxes"][0]
    rows, cols = np.nonzero(painted)
    assert ymin - 1 <= rows.min() and rows.max() + 1 <= ymax + 1
    assert xmin - 1 <= cols.min() and cols.max() + 1 <= xmax + 1
    assert painted[int(ymin) + 2:int(ymax) - 1, int(xmin) + 2:int(xmax) - 1].all()
    assert out["labels"][0] == 3
  assert kept > 60


def test_detection_flips_half_the_time_and_repeats():
  image = np.zeros((32, 32, 3), np.uint8)
  box = np.array([[0.25, 0.125, 0.5, 0.25]], np.float32)  # in the left half
  kwargs = dict(size=32, scale_range=(1.0, 1.0), flip=True, max_boxes=1, min_box_size=0,
                mean=MEAN, std=STD)
  flips = 0
  for seed in range(200):
    out = detection.train(image, box, [1], np.random.default_rng(seed), **kwargs)
    again = detection.train(image, box, [1], np.random.default_rng(seed), **kwargs)
    np.testing.assert_array_equal(out["boxes"], again["boxes"])
    mirrored = out["boxes"][0, 1] >= 16
    np.testing.assert_allclose(out["boxes"][0], [8, 24, 16, 28] if mirrored else [8, 4, 16, 8])
    flips += mirrored
  assert 70 < flips < 130


# -------------------------------------------------------------------------- restoration

@pytest.mark.parametrize("x_shape,y_shape,patch,draws", [
    ((9, 11, 1), (9, 11, 1), (4, 4), [(0.3, 0.99), (0.2, 0.7, 0.1)]),
    ((9, 11, 2), (9, 11, 1), (5, 3), [(0.0, 0.5), (0.9, 0.2, 0.3)]),
    ((6, 8, 7, 1), (8, 7, 1), (3, 5, 5), [(0.5, 0.1, 0.8), (0.6, 0.4, 0.4)]),
    ((6, 8, 7, 1), (6, 8, 7, 1), (6, 4, 4), [(0.1, 0.6, 0.2), (0.7, 0.7, 0.9)])])
def test_restoration_crops_are_tfs_at_fixed_draws(tf_random, x_shape, y_shape, patch, draws):
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=x_shape).astype(np.float32), rng.normal(size=y_shape).astype(np.float32)
  tf_random(draws)
  example = {"input": tf.constant(x), "target": tf.constant(y)}
  ex, ey = tf_baseline.restoration_augment(
      *tf_baseline.restoration_crop(example, patch, SEED), SEED)
  got = restoration.train(x, y, Scripted(*draws), patch=patch, augment=True)
  np.testing.assert_array_equal(got["input"], ex.numpy())
  np.testing.assert_array_equal(got["target"], ey.numpy())


@pytest.mark.parametrize("projection", [False, True])
def test_restoration_target_moves_with_the_input(projection):
  """A 3D input and an equal target, or (projection) a target equal to every Z slice."""
  x = np.arange(5 * 9 * 9, dtype=np.float32).reshape(5, 9, 9, 1) % (81 if projection else 405)
  y = x[0] if projection else x
  starts, flips = set(), 0
  for seed in range(100):
    out = restoration.train(x, y, np.random.default_rng(seed), patch=(3, 4, 4), augment=True)
    np.testing.assert_array_equal(out["target"], out["input"][0] if projection else out["input"])
    starts.add(int(out["input"].min()))
    flips += out["input"][0, 0, 0, 0] > out["input"][0, -1, 0, 0]
  assert len(starts) > (20 if projection else 40) and 30 < flips < 70
  with pytest.raises(ValueError, match="patch"):
    restoration.train(x, y, np.random.default_rng(0), patch=(3, 10, 4), augment=False)


# ---------------------------------------------------------------------------------- GAN

@pytest.mark.parametrize("dataset,shape,size", [
    ("digits", (32, 32, 1), 32), ("digits", (32, 32, 1), 24), ("cifar10", (32, 32, 3), 32),
    ("celeb_a", (50, 41, 3), 16), ("celeb_a", (218, 178, 3), 64),
    ("imagenet2012", (37, 53, 3), 24)])
def test_gan_images_are_tfs(dataset, shape, size):
  image = _pixels(shape)
  example = {"image": tf.constant(image), "label": tf.constant(4, tf.int64)}
  expected = tf_baseline.gan_preprocess(_config(name=dataset, image_size=size), example)
  got = gan.preprocess(image, 4, dataset=dataset, size=size)
  assert got["image"].shape == (size, size, 3) and got["image"].dtype == np.float32
  assert got["label"].dtype == np.int32 and got["label"] == 4
  if image.shape[:2] == (size, size):
    np.testing.assert_allclose(got["image"], expected["image"].numpy(), atol=1e-6)
  else:
    _assert_levels(got["image"], expected["image"].numpy(), 127.5)
  raw = gan.preprocess(image, dataset=dataset, size=size, normalize=False)
  assert raw["image"].dtype == np.uint8 and raw["label"] == 0
  np.testing.assert_allclose(gan.to_signed_range(raw["image"]), got["image"], atol=1e-6)
