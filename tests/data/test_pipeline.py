import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from attention_lab.data import pipeline
from attention_lab.data.info import data_info
from attention_lab.data.builders.digits import Digits
from configs import default


@pytest.fixture(scope="module")
def config(tmp_path_factory):
  config = default.get_config("tiny")
  config.dataset.data_dir = str(tmp_path_factory.mktemp("tfds"))
  return config


def test_digits_builder_needs_no_download(config):
  builder = pipeline.get_builder("digits", config.dataset.data_dir)
  assert isinstance(builder, Digits)
  assert builder.info.splits["train"].num_examples == 1497
  assert builder.info.splits["test"].num_examples == 300
  examples = list(tfds.as_numpy(builder.as_dataset(split="test")))
  images = np.stack([e["image"] for e in examples])
  assert images.shape == (300, 32, 32, 1) and images.dtype == np.uint8 and images.max() > 200
  assert sorted({int(e["label"]) for e in examples}) == list(range(10))


def test_train_stream_is_deterministic_and_resumable(config):
  first = pipeline.train_iterator(config, local_batch_size=8)
  batches = [next(first) for _ in range(5)]
  assert batches[0]["image"].shape == (8, 32, 32, 1) and batches[0]["label"].dtype == np.int32
  again = pipeline.train_iterator(config, local_batch_size=8, start_step=3)
  for expected in batches[3:]:
    got = next(again)
    np.testing.assert_array_equal(got["image"], expected["image"])
    np.testing.assert_array_equal(got["label"], expected["label"])
  assert not np.array_equal(batches[0]["label"], batches[1]["label"])


def test_digits_as_rgb_at_another_size(config):
  """dataset.channels = 3: the grey digit replicated to RGB (the resize unchanged)."""
  rgb = config.copy_and_resolve_references()
  rgb.dataset.channels, rgb.dataset.image_size = 3, 48
  grey = config.copy_and_resolve_references()
  grey.dataset.image_size = 48
  a = next(pipeline.train_iterator(rgb, local_batch_size=4))["image"]
  b = next(pipeline.train_iterator(grey, local_batch_size=4))["image"]
  assert a.shape == (4, 48, 48, 3) and b.shape == (4, 48, 48, 1)
  np.testing.assert_array_equal(a, np.repeat(b, 3, axis=-1))
  assert data_info(grey).channels == 1  # rgb's 3 channels are the config's


def test_eval_batches_cover_the_split_once_with_a_mask(config):
  batches = list(pipeline.eval_batches(config, local_batch_size=64))
  assert all(b["image"].shape == (64, 32, 32, 1) for b in batches)
  assert sum(int(b["mask"].sum()) for b in batches) == 300


@pytest.mark.parametrize("name,size,crop", [
    ("cifar100", 32, "resize"), ("imagenet2012", 64, "resize"), ("imagenet2012", 64, "inception")])
def test_real_loaders_on_mock_data(config, name, size, crop):
  config = config.copy_and_resolve_references()
  config.dataset.name, config.dataset.image_size, config.dataset.crop = name, size, crop
  config.dataset.data_dir = ""
  config.dataset.train_split, config.dataset.eval_split = "train", (
      "validation" if name == "imagenet2012" else "test")
  with tfds.testing.mock_data(num_examples=12):
    builder = pipeline.get_builder(name)
    assert builder.info.features["label"].num_classes == (100 if name == "cifar100" else 1000)
    batch = next(pipeline.train_iterator(config, local_batch_size=4))
    assert batch["image"].shape == (4, size, size, 3) and np.all(np.isfinite(batch["image"]))
    eval_batch = next(pipeline.eval_batches(config, local_batch_size=4))
    assert eval_batch["image"].shape == (4, size, size, 3)


def test_resumable_batches_seeds_shuffles_groups_and_skips_before_augmenting():
  """The one training recipe: the repeated source shuffled, augment seeded by
  (seed·1,000,003 + process, stream index), rows of K consecutive examples, and a
  resumed stream that continues the fresh one without augmenting what it skips."""
  source = tf.data.Dataset.from_tensor_slices({"x": np.arange(12, dtype=np.int64)})
  augmented = []

  def augment(example, seed):
    record = lambda s: augmented.append(int(s[1])) or s  # the stream index augmented
    seed = tf.py_function(record, [seed], tf.int64)
    return {"x": example["x"], "seed": tf.ensure_shape(seed, [2])}

  def stream(start_step):
    return pipeline.resumable_batches(source, augment, seed=3, shuffle_buffer=12,
                                      batch_shape=(2, 3), start_step=start_step)

  first = stream(0)
  fresh = [next(first) for _ in range(6)]
  assert fresh[0]["x"].shape == fresh[0]["seed"].shape[:2] == (2, 3)
  xs = np.concatenate([b["x"].ravel() for b in fresh])
  seeds = np.concatenate([b["seed"].reshape(-1, 2) for b in fresh])
  np.testing.assert_array_equal(seeds[:, 0], 3 * 1_000_003)
  np.testing.assert_array_equal(seeds[:, 1] % 12, xs)  # the example's index in the repeated source
  assert len(set(seeds[:, 1])) == len(seeds)  # each drawn once: fresh augmentation every epoch
  assert not np.array_equal(xs[:12], np.arange(12))  # shuffled
  augmented.clear()
  resumed = stream(4)
  for expected in fresh[4:]:
    got = next(resumed)
    for key in expected:
      np.testing.assert_array_equal(got[key], expected[key])
  skipped = set(seeds[:4 * 6, 1])
  assert augmented and not skipped & set(augmented)


def test_padded_batches_pad_the_last_batch_and_mask_it():
  source = tf.data.Dataset.from_tensor_slices({"x": np.arange(5, dtype=np.int32)})
  double = lambda ex: {"x": ex["x"] * 2, "y": ex["x"] + 1}
  batches = list(pipeline.padded_batches(source, double, batch_size=2, pad_values={"y": 255}))
  np.testing.assert_array_equal(np.stack([b["x"] for b in batches]), [[0, 2], [4, 6], [8, 0]])
  np.testing.assert_array_equal(np.stack([b["y"] for b in batches]), [[1, 2], [3, 4], [5, 255]])
  np.testing.assert_array_equal(np.stack([b["mask"] for b in batches]),
                                [[True, True], [True, True], [True, False]])
  limited = list(pipeline.padded_batches(source, double, batch_size=2, limit=3))
  np.testing.assert_array_equal(np.stack([b["x"] for b in limited]), [[0, 2], [4, 0]])
  assert [b["mask"].sum() for b in limited] == [2, 1]
