"""Segmentation data: builders on fake files in the real layouts, read back as records;
the train stream's resume; evaluation canvases padded with the ignore label. (The numpy
augmentations themselves: tests/data/test_transforms.py.)"""

import os

import ml_collections
import numpy as np
import pytest
from PIL import Image

from attention_lab.data import availability, prepare, sources
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
      "train_split": "train", "eval_split": "val", "workers": 0, **dataset}})


def _split(config, split):
  """{image_id: example} of a split, prepared on first use from the manual_dir."""
  records = sources.records(config.dataset, split)
  return {records[i]["image_id"].decode(): records[i] for i in range(len(records))}


def prepared(name, data_dir, manual_dir=""):
  """The read-only builder of `name` prepared (as ArrayRecord) under `data_dir`."""
  prepare.prepare(prepare.dataset_config(name, data_dir, manual_dir))
  return availability.find_prepared(name, str(data_dir))


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
  splits = {s: _split(config, s) for s in ("train", "val", "train_aug")}
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
  config = _config("ade20k_challenge", tmp_path / "data", tmp_path / "manual")
  assert len(sources.records(config.dataset, "train")) == 2
  for image_id, ex in _split(config, "validation").items():
    raw = masks[image_id]
    expected = np.where(raw == 0, 255, raw.astype(int) - 1)
    np.testing.assert_array_equal(ex["segmentation_mask"][..., 0], expected)
    assert ex["segmentation_mask"][0, 1, 0] == 149


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """The tiny segmentation config (digit scenes) on a data_dir of its own."""
  config = default.get_config("tiny")
  config.dataset.data_dir = str(tmp_path_factory.mktemp("tfds"))
  return config


def test_train_stream_resumes_exactly(tiny):
  """start_step = 2 gives the batches a fresh stream gives from its third on."""
  config = tiny
  fresh = seg.train_iterator(config, local_batch_size=4)
  batches = [next(fresh) for _ in range(4)]
  assert batches[0]["image"].shape == (4, config.dataset.crop_size, config.dataset.crop_size, 3)
  assert batches[0]["image"].dtype == np.float32 and batches[0]["label"].dtype == np.int32
  resumed = seg.train_iterator(config, local_batch_size=4, start_step=2)
  for expected in batches[2:]:
    got = next(resumed)
    np.testing.assert_array_equal(got["image"], expected["image"])
    np.testing.assert_array_equal(got["label"], expected["label"])
  assert not np.array_equal(batches[0]["label"], batches[1]["label"])


def test_eval_batches_pad_with_the_mean_and_ignore(tiny):
  """Every test scene once, on an eval_size canvas: outside the scene the image is 0 (the
  mean, once normalised) and the label 255; padded rows are all 255."""
  config = tiny.copy_and_resolve_references()
  scene = config.dataset.resize or 64
  config.dataset.eval_size = scene + 16
  batches = list(seg.eval_batches(config, local_batch_size=64))
  assert sum(int(b["mask"].sum()) for b in batches) == 500
  last = batches[-1]
  assert (last["label"][~last["mask"]] == 255).all()
  real = last["label"][last["mask"]]
  assert (real[:, scene:] == 255).all() and (real[:, :scene, :scene] != 255).all()
  assert not last["image"][last["mask"]][:, scene:].any()


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
  config = _config("cityscapes/semantic_segmentation", tmp_path / "data", manual,
                   eval_split="validation", eval_size=2048)
  batch = next(seg.eval_batches(config, local_batch_size=1))
  row = batch["label"][0, 0, :256]
  expected = [seg.CITYSCAPES_TRAIN_IDS.get(i, 255) for i in range(256)]
  np.testing.assert_array_equal(row, expected)
