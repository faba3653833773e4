"""Segmentation data: builders on fake files in the real layouts, aligned crops, eval padding."""

import os

import ml_collections
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from attention_lab.data import pipeline
from attention_lab.data import segmentation as seg
from configs.segmentation import default


def _palette_png(path, indices):
  image = Image.fromarray(indices.astype(np.uint8), mode="P")
  image.putpalette(list(np.random.default_rng(0).integers(0, 256, 768)))
  image.save(path)


def _jpeg(path, h, w, seed):
  Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)).save(path)


def _mask(h, w, seed, classes=21):
  m = np.random.default_rng(seed).integers(0, classes, (h, w))
  m[0, :] = m[:, -1] = 255  # the "void" border
  return m.astype(np.uint8)


def _config(name, data_dir, manual_dir, **dataset):
  return ml_collections.ConfigDict({"seed": 0, "dataset": {
      "name": name, "data_dir": str(data_dir), "manual_dir": str(manual_dir), "resize": 0,
      **dataset}})


def _builder(config):
  d = config.dataset
  return pipeline.get_builder(d.name, d.data_dir, d.manual_dir)


def test_voc_builder_reads_palette_indices_and_the_sbd_split(tmp_path):
  root = tmp_path / "manual" / "VOCdevkit" / "VOC2012"
  for folder in ("JPEGImages", "SegmentationClass", "SegmentationClassAug",
                 "ImageSets/Segmentation"):
    os.makedirs(root / folder)
  masks = {}
  for k, image_id in enumerate(["2007_000001", "2007_000002", "2008_000003", "2011_000004"]):
    h, w = 7 + k, 9 + 2 * k
    _jpeg(root / "JPEGImages" / f"{image_id}.jpg", h, w, k)
    masks[image_id] = _mask(h, w, k)
    _palette_png(root / "SegmentationClass" / f"{image_id}.png", masks[image_id])
  (root / "ImageSets/Segmentation/train.txt").write_text("2007_000001\n2007_000002\n")
  (root / "ImageSets/Segmentation/val.txt").write_text("2008_000003\n")
  aug = _mask(10, 15, 9)  # SBD: grey PNG; one id only there, one overriding VOC's mask
  for image_id in ("2011_000004", "2007_000002"):
    Image.fromarray(aug[:masks[image_id].shape[0], :masks[image_id].shape[1]]).save(
        root / "SegmentationClassAug" / f"{image_id}.png")
  config = _config("voc_segmentation", tmp_path / "data", tmp_path / "manual")
  builder = _builder(config)
  splits = {s: {ex["image_id"].decode(): ex for ex in tfds.as_numpy(builder.as_dataset(split=s))}
            for s in ("train", "val", "train_aug")}
  assert sorted(splits["train"]) == ["2007_000001", "2007_000002"]
  assert sorted(splits["val"]) == ["2008_000003"]
  assert sorted(splits["train_aug"]) == ["2007_000001", "2007_000002", "2011_000004"]
  for image_id, ex in splits["train"].items():
    np.testing.assert_array_equal(ex["segmentation_mask"][..., 0], masks[image_id])
    assert ex["image"].shape == (*masks[image_id].shape, 3)
  h, w = masks["2007_000002"].shape
  np.testing.assert_array_equal(splits["train_aug"]["2007_000002"]["segmentation_mask"][..., 0],
                                aug[:h, :w])
  np.testing.assert_array_equal(splits["train_aug"]["2007_000001"]["segmentation_mask"][..., 0],
                                masks["2007_000001"])
  assert 255 in splits["val"]["2008_000003"]["segmentation_mask"]


def test_ade20k_builder_shifts_zero_to_ignore(tmp_path):
  root = tmp_path / "manual" / "ADEChallengeData2016"
  masks = {}
  for folder, count in (("training", 2), ("validation", 1)):
    os.makedirs(root / "images" / folder)
    os.makedirs(root / "annotations" / folder)
    for k in range(count):
      name = f"ADE_{folder[:5]}_{k:08d}"
      _jpeg(root / "images" / folder / f"{name}.jpg", 6 + k, 11, k)
      masks[name] = np.random.default_rng(k).integers(0, 151, (6 + k, 11)).astype(np.uint8)
      masks[name][0, 0], masks[name][0, 1] = 0, 150
      Image.fromarray(masks[name]).save(root / "annotations" / folder / f"{name}.png")
  builder = _builder(_config("ade20k_challenge", tmp_path / "data", tmp_path / "manual"))
  assert builder.info.splits["train"].num_examples == 2
  for ex in tfds.as_numpy(builder.as_dataset(split="validation")):
    raw = masks[ex["image_id"].decode()]
    expected = np.where(raw == 0, 255, raw.astype(int) - 1)
    np.testing.assert_array_equal(ex["segmentation_mask"][..., 0], expected)
    assert ex["segmentation_mask"][0, 1, 0] == 149


def test_cityscapes_label_ids_map_to_train_ids():
  config = _config("cityscapes/semantic_segmentation", "", "")
  label_ids = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
  example = {"image_left": np.zeros((16, 16, 3), np.uint8), "segmentation_label": label_ids}
  _, label = seg.decode(config, example)
  label = label.numpy()[..., 0].ravel()
  for label_id in range(256):
    assert label[label_id] == seg.CITYSCAPES_TRAIN_IDS.get(label_id, 255)
  assert sorted(seg.CITYSCAPES_TRAIN_IDS.values()) == list(range(19))


def test_train_stream_resumes_exactly():
  """start_step = 2 gives the batches a fresh stream gives from its third on."""
  config = default.get_config("tiny")  # digit scenes
  fresh = seg.train_iterator(config, local_batch_size=4)
  batches = [next(fresh) for _ in range(4)]
  resumed = seg.train_iterator(config, local_batch_size=4, start_step=2)
  for expected in batches[2:]:
    got = next(resumed)
    np.testing.assert_array_equal(got["image"], expected["image"])
    np.testing.assert_array_equal(got["label"], expected["label"])
  assert not np.array_equal(batches[0]["label"], batches[1]["label"])


@pytest.mark.parametrize("shape,crop", [((37, 23), 32), ((20, 50), 24)])
def test_train_crops_keep_image_and_mask_aligned(shape, crop):
  """The mask is a function of the pixels (class = first channel); after pad / crop / flip it
  still is, and padding is mean (0) in the image and 255 in the mask."""
  rng = np.random.default_rng(1)
  classes = rng.integers(0, 21, shape)
  image = np.stack([classes, rng.integers(0, 5, shape), classes * 2], -1).astype(np.float32)
  label = classes[..., None].astype(np.int32)
  seen_flip = set()
  for s in range(6):
    out_image, out_label = seg.train_preprocess(
        tf.constant(image), tf.constant(label), crop=crop, scale_range=(1.0, 1.0),
        seed=tf.constant([3, s], tf.int64))
    out_image, out_label = out_image.numpy(), out_label.numpy()
    assert out_image.shape == (crop, crop, 3) and out_label.shape == (crop, crop)
    labelled = out_label != 255
    np.testing.assert_array_equal(out_label[labelled], out_image[..., 0][labelled])
    np.testing.assert_array_equal(out_image[..., 2][labelled], 2 * out_label[labelled])
    np.testing.assert_array_equal(out_image[~labelled], 0.0)
    assert labelled.sum() == min(crop, shape[0]) * min(crop, shape[1])
    # Flipped or not: a row of the output is a contiguous run of an input row, either way.
    row = out_label[np.argmax(labelled.any(1))]
    row = row[row != 255]
    for r in classes:
      for start in range(len(r) - len(row) + 1):
        if np.array_equal(r[start:start + len(row)], row):
          seen_flip.add(False)
        if np.array_equal(r[::-1][start:start + len(row)], row):
          seen_flip.add(True)
  assert seen_flip == {False, True}


def test_random_scale_resizes_mask_by_nearest():
  image = np.zeros((20, 30, 3), np.float32)
  label = np.random.default_rng(0).integers(0, 4, (20, 30, 1)).astype(np.int32)
  _, out = seg.train_preprocess(tf.constant(image), tf.constant(label), crop=80,
                                scale_range=(2.0, 2.0), flip=False,
                                seed=tf.constant([0, 0], tf.int64))
  out = out.numpy()
  assert set(np.unique(out)) <= {0, 1, 2, 3, 255}
  assert (out != 255).sum() == 40 * 60


def test_eval_pads_with_mean_and_ignore_and_fits_large_images():
  image = tf.ones((5, 7, 3))
  label = tf.fill((5, 7, 1), 3)
  out_image, out_label = seg.eval_preprocess(image, label, size=8)
  assert out_image.shape == (8, 8, 3) and out_label.shape == (8, 8)
  np.testing.assert_array_equal(out_label.numpy()[:5, :7], 3)
  assert (out_label.numpy() == 255).sum() == 64 - 35 and out_image.numpy()[5:].max() == 0
  big_image, big_label = seg.eval_preprocess(tf.ones((16, 10, 3)), tf.fill((16, 10, 1), 2),
                                             size=8)
  assert (big_label.numpy() == 2).sum() == 8 * 5


def test_cityscapes_tfds_builder_on_fake_zips_gives_train_ids(tmp_path):
  """TFDS's own cityscapes builder over zips in the real layout; our pipeline maps labelIds."""
  import zipfile  # pylint: disable=g-import-not-at-top
  manual = tmp_path / "manual"
  os.makedirs(manual)
  label_ids = np.zeros((1024, 2048), np.uint8)
  label_ids[:, :256] = np.arange(256, dtype=np.uint8)[None, :]  # every id in one row block
  images = {}
  for name, suffix, root in (("leftImg8bit_trainvaltest.zip", "leftImg8bit", "leftImg8bit"),
                             ("gtFine_trainvaltest.zip", "gtFine_labelIds", "gtFine")):
    with zipfile.ZipFile(manual / name, "w") as archive:
      for split in ("train", "val", "test"):
        path = tmp_path / f"{root}_{split}.png"
        if root == "gtFine":
          Image.fromarray(label_ids).save(path)
        else:
          images[split] = np.zeros((1024, 2048, 3), np.uint8)
          Image.fromarray(images[split]).save(path)
        archive.write(path, f"{root}/{split}/aachen/aachen_000000_000019_{suffix}.png")
  config = _config("cityscapes/semantic_segmentation", tmp_path / "data", manual)
  builder = _builder(config)
  example = next(iter(builder.as_dataset(split="validation")))
  _, label = seg.decode(config, example)
  row = label.numpy()[0, :256, 0]
  expected = [seg.CITYSCAPES_TRAIN_IDS.get(i, 255) for i in range(256)]
  np.testing.assert_array_equal(row, expected)
