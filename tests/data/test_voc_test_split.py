"""VOC2012 `test` (images only, for the evaluation server): the builder's split on fake files
in the devkit layout, predict's comp6 PNGs for it, and the one line when it was not prepared."""

import numpy as np
import pytest
from PIL import Image

from attention_lab import cli, predict
from attention_lab.data import availability, sources
from attention_lab.data.builders import voc_segmentation
from tests.data.test_prepare import _dataset, write_fake_voc
from tests.data.test_segmentation_data import _jpeg, prepared
from tests.test_predict import checkpointed, voc_palette_reference

TEST_SIZES = {"2008_000001": (7, 11), "2008_000004": (9, 6), "2008_000005": (12, 12)}


def write_fake_voc_test(manual):
  """VOC2012test.tar unpacked over the trainval devkit: JPEGs and test.txt, no masks."""
  root = manual / voc_segmentation.LAYOUT.root
  for k, (image_id, (h, w)) in enumerate(TEST_SIZES.items()):
    _jpeg(root / "JPEGImages" / f"{image_id}.jpg", h, w, 20 + k)
  (manual / voc_segmentation.TEST_LIST).write_text("".join(f"{i}\n" for i in TEST_SIZES))


def test_test_split_has_the_listed_images_and_all_ignore_masks(tmp_path):
  write_fake_voc(tmp_path / "manual")
  write_fake_voc_test(tmp_path / "manual")
  builder = prepared("voc_segmentation", tmp_path / "data", tmp_path / "manual")
  assert builder.info.splits["test"].num_examples == len(TEST_SIZES)
  assert builder.info.splits["val"].num_examples == 1  # the other splits as without it
  seen = {}
  records = sources.Records(builder.data_dir, "test")
  for ex in (records[i] for i in range(len(records))):
    image_id = ex["image_id"].decode()
    assert ex["image"].shape == (*TEST_SIZES[image_id], 3)
    assert ex["segmentation_mask"].shape == (*TEST_SIZES[image_id], 1)
    seen[image_id] = np.unique(ex["segmentation_mask"]).tolist()
  assert seen == {image_id: [255] for image_id in TEST_SIZES}


def test_a_dataset_prepared_without_the_test_images_names_what_adds_them(tmp_path):
  write_fake_voc(tmp_path / "manual")
  dataset = _dataset("voc_segmentation", tmp_path / "data", tmp_path / "manual")
  builder = prepared(dataset.name, dataset.data_dir, dataset.manual_dir)
  availability.require_split(dataset, builder, "train+val[:1]")  # there: passes
  with pytest.raises(cli.ConfigError, match="split = 'val\\+test\\[:2\\]': .* no split 'test' "):
    availability.require_split(dataset, builder, "val+test[:2]")
  with pytest.raises(cli.ConfigError) as error:
    availability.require_split(dataset, builder, "test")
  message = str(error.value)
  assert len(message.splitlines()) == 1
  assert message.startswith(f"split = 'test': dataset 'voc_segmentation' as prepared in "
                            f"{builder.data_dir} has no split 'test' (it has train, train_aug, "
                            "val); it is added when VOCdevkit/VOC2012/ImageSets/Segmentation/"
                            "test.txt is in the manual_dir at preparation: download "
                            "VOC2012test.tar")
  assert f"delete {builder.data_dir} and run python -m attention_lab.data.prepare" in message


def test_predict_writes_the_server_layout_for_the_test_split(tmp_path):
  from configs.hamburger import voc_hamnet
  write_fake_voc(tmp_path / "manual")
  write_fake_voc_test(tmp_path / "manual")
  config = voc_hamnet.get_config("tiny")
  d = config.dataset
  d.name, d.data_dir, d.manual_dir = "voc_segmentation", str(tmp_path / "data"), str(
      tmp_path / "manual")
  d.train_split, d.eval_split = "train", "val"
  d.resize, d.crop_size, d.eval_size = 0, 8, 16
  workdir = str(tmp_path / "w")
  checkpointed(config, workdir)
  out = tmp_path / "out"
  line = predict.run(config, workdir, str(out), split="test")
  folder = out / "results" / "VOC2012" / "Segmentation" / "comp6_test_cls"
  assert line == f"step 0, split test: wrote 3 segmentation PNGs to {folder}"
  assert sorted(p.name for p in folder.iterdir()) == [f"{i}.png" for i in sorted(TEST_SIZES)]
  for image_id, (h, w) in TEST_SIZES.items():
    with Image.open(folder / f"{image_id}.png") as image:
      assert image.mode == "P" and image.size == (w, h)
      np.testing.assert_array_equal(np.asarray(image.getpalette(), np.uint8).reshape(-1, 3),
                                    voc_palette_reference())
      assert np.asarray(image).max() <= 20
