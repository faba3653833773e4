"""PASCAL-Context 59: the builder on fake files in the mmseg / Detail-API layout."""

import os

import numpy as np
from PIL import Image

from attention_lab.data import segmentation as seg
from attention_lab.data.builders import pascal_context
from tests.data.test_segmentation_data import _config, _jpeg, _split


def write_fake_pascal_context(manual, splits):
  """VOCdevkit/VOC2010 with grey label PNGs (0 background, 1-59 classes) and the split
  lists, as mmseg's converter writes them; returns {image_id: raw label map}."""
  layout = pascal_context.LAYOUT
  root = manual / layout.root
  for folder in (layout.images, layout.labels, layout.lists):
    os.makedirs(root / folder, exist_ok=True)
  raw = {}
  k = 0
  for split, ids in splits.items():
    for image_id in ids:
      h, w = 6 + k, 9 + k
      _jpeg(root / layout.images / f"{image_id}.jpg", h, w, k)
      raw[image_id] = np.random.default_rng(k).integers(0, 60, (h, w)).astype(np.uint8)
      raw[image_id][0, :3] = (0, 1, 59)  # background and both ends of the class range
      Image.fromarray(raw[image_id]).save(root / layout.labels / f"{image_id}.png")
      k += 1
    (manual / layout.list_path(split)).write_text("".join(f"{i}\n" for i in ids))
  return raw


def test_builder_reads_the_lists_and_reduces_the_zero_label(tmp_path):
  splits = {"train": ["2008_000002", "2008_000003"], "val": ["2008_000008"]}
  raw = write_fake_pascal_context(tmp_path / "manual", splits)
  # An image without a list entry (VOC2010 holds more images than the benchmark uses).
  _jpeg(tmp_path / "manual" / pascal_context.LAYOUT.root / "JPEGImages" / "2010_009999.jpg",
        5, 5, 9)
  config = _config("pascal_context", tmp_path / "data", tmp_path / "manual")
  assert len(seg.facts("pascal_context").mask_classes) == 59 == len(pascal_context.CLASSES)
  for split, ids in splits.items():
    examples = _split(config, split)
    assert sorted(examples) == sorted(ids)
    for image_id, ex in examples.items():
      mask = ex["segmentation_mask"][..., 0]
      expected = np.where(raw[image_id] == 0, 255, raw[image_id].astype(int) - 1)
      np.testing.assert_array_equal(mask, expected)
      assert tuple(mask[0, :3]) == (255, 0, 58)
      assert ex["image"].shape == (*raw[image_id].shape, 3)
