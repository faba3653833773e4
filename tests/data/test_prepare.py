"""Preparing a config's datasets as ArrayRecord, converting a TFRecord one, and the one-line
error when a run finds one unprepared or unreadable by index."""

import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from attention_lab import cli
from attention_lab.data import availability, prepare, sources
from tests.data.test_pascal_context import write_fake_pascal_context
from tests.data.test_segmentation_data import _jpeg, _mask, _palette_png

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOC = "VOCdevkit/VOC2012"


def write_fake_voc(manual, train=("2007_000032", "2007_000039"), val=("2007_000033",),
                   sbd=("2008_000002",)):
  """A VOCdevkit with palette masks and ImageSets, plus SBD's SegmentationClassAug."""
  root = manual / VOC
  for folder in ("JPEGImages", "SegmentationClass", "SegmentationClassAug",
                 "ImageSets/Segmentation"):
    os.makedirs(root / folder, exist_ok=True)
  for k, image_id in enumerate((*train, *val, *sbd)):
    _jpeg(root / "JPEGImages" / f"{image_id}.jpg", 8, 10, k)
    folder = "SegmentationClassAug" if image_id in sbd else "SegmentationClass"
    _palette_png(root / folder / f"{image_id}.png", _mask(8, 10, k))
  for split, ids in (("train", train), ("val", val)):
    (root / f"ImageSets/Segmentation/{split}.txt").write_text("".join(f"{i}\n" for i in ids))


def _dataset(name, data_dir, manual_dir="", **splits):
  """A dataset config as prepare builds one (no splits: every split)."""
  return ml_collections.ConfigDict({"name": name, "data_dir": str(data_dir),
                                    "manual_dir": str(manual_dir), "image_dir": "",
                                    "train_split": "", "eval_split": "", **splits})


def _run(dataset):
  return ml_collections.ConfigDict({"dataset": dataset})


def _command(*args):
  """A command line as a person runs it: one CPU device, not the tests' eight."""
  env = {**os.environ, "XLA_FLAGS": ""}
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=300, check=False)


def test_a_run_on_unprepared_imagenet_prints_one_line_and_exits_2(tmp_path):
  data_dir = tmp_path / "tfds"
  result = _command("attention_lab.main", "--config=configs/sanet/imagenet.py",
                    f"--workdir={tmp_path / 'w'}", f"--config.dataset.data_dir={data_dir}")
  assert result.returncode == 2, result.stderr
  assert result.stderr.strip().splitlines() == [
      f"error: dataset 'imagenet2012' is not prepared in data_dir {data_dir} and its "
      f"manual_dir {data_dir}/downloads/manual lacks ILSVRC2012_img_train.tar and 1 more; "
      "prepare it with: python -m attention_lab.data.prepare "
      f"--config=configs/sanet/imagenet.py --config.dataset.data_dir={data_dir} "
      "(--debug shows the traceback)"], result.stderr
  assert not result.stdout


def test_prepare_command_without_the_files_says_what_to_download_and_exits_2(tmp_path):
  manual = tmp_path / "voc"
  result = _command("attention_lab.data.prepare", "--config=configs/kanet/voc_deeplab.py",
                    f"--config.dataset.data_dir={tmp_path}",
                    f"--config.dataset.manual_dir={manual}")
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert lines[0] == (f"error: dataset 'voc_segmentation' needs files that are not in its "
                      f"manual_dir {manual}:")
  assert lines[1] == "  missing: " + ", ".join(
      f"{VOC}/{f}" for f in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation/train.txt",
                             "ImageSets/Segmentation/val.txt", "SegmentationClassAug"))
  assert lines[2] == ("  - download http://host.robots.ox.ac.uk/pascal/VOC/voc2012/"
                      f"VOCtrainval_11-May-2012.tar (2 GB) and unpack it in {manual}/ (it "
                      f"holds {VOC}/)")
  assert "benchmark.tgz" in lines[3] and f"{manual}/{VOC}/SegmentationClassAug/" in lines[3]
  assert lines[4:] == ["then run this command again."]


@pytest.mark.parametrize("name, extra", [("coco/2017", {}), ("celeb_a", {"image_dir": ""}),
                                         ("cifar10", {})])
def test_downloadable_datasets_name_the_data_dir_and_command(tmp_path, name, extra):
  dataset = _dataset(name, tmp_path, **extra)
  with pytest.raises(cli.ConfigError) as error:
    availability.require_prepared(_run(dataset), config_spec="configs/x.py:cpu")
  assert str(error.value) == (
      f"dataset {name!r} is not prepared in data_dir {tmp_path}; prepare it with: python -m "
      f"attention_lab.data.prepare --config=configs/x.py:cpu "
      f"--config.dataset.data_dir={tmp_path}")


def test_what_passes_without_a_message(tmp_path):
  # Embedded (generated on first use), CelebA from a JPEG folder, a manual dataset whose
  # files are all there.
  for dataset in (_dataset("digit_scenes", tmp_path),
                  _dataset("celeb_a", tmp_path, image_dir=str(tmp_path))):
    availability.require_prepared(_run(dataset))
  write_fake_voc(tmp_path / "manual")
  availability.require_prepared(_run(_dataset("voc_segmentation", tmp_path / "data",
                                              tmp_path / "manual", train_split="train_aug")))


def test_messages_for_manual_datasets(tmp_path):
  # ImageNet without its archives; with them, the data layer prepares it on first use.
  manual = tmp_path / "manual"
  imagenet = _dataset("imagenet2012", tmp_path, manual)
  with pytest.raises(cli.ConfigError, match=r"^dataset 'imagenet2012' is not prepared in "
                     rf"data_dir {tmp_path} and its manual_dir {manual} lacks "
                     r"ILSVRC2012_img_train\.tar and 1 more; prepare it with: python -m "
                     r"attention_lab\.data\.prepare --config=c\.py "
                     rf"--config\.dataset\.data_dir={tmp_path} "
                     rf"--config\.dataset\.manual_dir={manual}$"):
    availability.require_prepared(_run(imagenet), "c.py")
  os.makedirs(manual)
  for name in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"):
    (manual / name).write_bytes(b"")
  availability.require_prepared(_run(imagenet), "c.py")
  # VOC without SBD: only a config that reads train_aug misses it.
  write_fake_voc(manual)
  os.rename(manual / VOC / "SegmentationClassAug", tmp_path / "aug")
  voc = _dataset("voc_segmentation", tmp_path, manual, train_split="train", eval_split="val")
  availability.require_prepared(_run(voc))
  voc.train_split = "train_aug"
  with pytest.raises(cli.ConfigError, match=f"lacks {VOC}/SegmentationClassAug; prepare it "
                     "with: python -m attention_lab.data.prepare --dataset=voc_segmentation "
                     f"--data_dir={tmp_path} --manual_dir={manual}$"):
    availability.require_prepared(_run(voc), config_spec="")
  # CARE (restoration) and the segmentation sets name their files; the config's own
  # manual_dir, else TFDS's default one.
  for name, first in (("care/flywing", "train_data/data_label.npz"),
                      ("ade20k_challenge", "ADEChallengeData2016/images/training"),
                      ("pascal_context", "VOCdevkit/VOC2010/JPEGImages")):
    with pytest.raises(cli.ConfigError, match=f"manual_dir {tmp_path}/downloads/manual lacks "
                       f"{first}"):
      availability.require_prepared(_run(_dataset(name, tmp_path)), config_spec="c.py")


def test_prepare_builds_voc_from_a_fake_manual_dir(tmp_path):
  write_fake_voc(tmp_path / "manual")
  dataset = _dataset("voc_segmentation", tmp_path / "data", tmp_path / "manual",
                     train_split="train_aug", eval_split="val")
  line = prepare.prepare(dataset)
  assert line == (f"voc_segmentation: prepared in {tmp_path}/data/voc_segmentation/1.0.0 "
                  "(train 2, train_aug 3, val 1)")
  # Prepared: the run reads it with no manual files left, and prepare leaves it as it is.
  os.rename(tmp_path / "manual", tmp_path / "gone")
  availability.require_prepared(_run(dataset))
  assert prepare.prepare(dataset) == line
  records = sources.records(dataset, "train_aug")
  ids = sorted(records[i]["image_id"].decode() for i in range(len(records)))
  assert ids == ["2007_000032", "2007_000039", "2008_000002"]
  # voc_hamnet.py:trainval trains on "train+val" (VOC2012 trainval): one sequence.
  assert len(sources.records(dataset, "train+val")) == 3


def test_prepare_builds_pascal_context_and_follows_init_from(tmp_path):
  write_fake_pascal_context(tmp_path / "manual", {"train": ["2008_000002"],
                                                  "val": ["2008_000008", "2008_000010"]})
  config = ml_collections.ConfigDict({
      "task": "segmentation",
      "dataset": _dataset("pascal_context", tmp_path / "data", tmp_path / "manual"),
      "init_from": "configs/segmentation/digits_backbone.py:tiny"})
  datasets = prepare.dataset_configs(config)
  assert [d.name for d in datasets] == ["pascal_context", "digits"]
  assert prepare.prepare(datasets[0]).endswith("(train 1, val 2)")


def test_prepare_says_what_to_download_and_where(tmp_path):
  dataset = _dataset("pascal_context", tmp_path, train_split="train", eval_split="val")
  with pytest.raises(prepare.MissingFiles) as error:
    prepare.prepare(dataset)
  message = str(error.value)
  manual = f"{tmp_path}/downloads/manual"
  assert message.splitlines()[0] == (
      f"dataset 'pascal_context' needs files that are not in its manual_dir {manual}:")
  assert "missing: VOCdevkit/VOC2010/JPEGImages, VOCdevkit/VOC2010/SegmentationClassContext" \
      in message
  assert (f"voc2010/VOCtrainval_03-May-2010.tar (1.3 GB) and unpack it in {manual}/"
          in message)
  assert "trainval_merged.json" in message and f"pascal_context.py {manual}/VOCdevkit" in message
  assert 4 <= len(message.splitlines()) <= 6
  with pytest.raises(prepare.MissingFiles, match="ILSVRC2012_img_train.tar, "
                     "ILSVRC2012_img_val.tar\n  - download .*image-net.org"):
    prepare.prepare(_dataset("imagenet2012", tmp_path))


def test_prepare_generates_embedded_datasets(tmp_path):
  line = prepare.prepare(_dataset("digits", tmp_path))
  assert line == f"digits: prepared in {tmp_path}/digits/1.0.0 (test 300, train 1,497)"
  assert availability.has_array_record(availability.find_prepared("digits", str(tmp_path)))
  np.testing.assert_equal(prepare.prepare(_dataset("digits", tmp_path)), line)


def test_a_tfrecord_dataset_is_named_then_converted(tmp_path):
  """A manual dataset prepared as TFRecord (tfds build's default): a run's one line names
  the command; the command converts it, and the records read by index are the TFRecord
  ones in order."""
  write_fake_voc(tmp_path / "manual")
  dataset = _dataset("voc_segmentation", tmp_path / "data", tmp_path / "manual")
  builder = availability.builder(dataset.name, dataset.data_dir)
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      manual_dir=str(tmp_path / "manual")))
  folder = builder.data_dir
  with pytest.raises(cli.ConfigError) as error:
    availability.require_prepared(_run(dataset), config_spec="configs/x.py")
  assert str(error.value) == (
      f"dataset 'voc_segmentation' in {folder} is stored as TFRecord, which is read only in "
      "order; convert it to ArrayRecord (random access) with: python -m "
      f"attention_lab.data.prepare --config=configs/x.py --config.dataset.data_dir="
      f"{tmp_path}/data --config.dataset.manual_dir={tmp_path}/manual")
  assert prepare.prepare(dataset) == (f"voc_segmentation: converted to ArrayRecord in {folder} "
                                      "(train 2, train_aug 3, val 1)")
  availability.require_prepared(_run(dataset))
  names = os.listdir(folder)
  records = sources.records(dataset, "train_aug")
  in_order = list(tfds.as_numpy(builder.as_dataset(split="train_aug")))
  assert len(records) == len(in_order) == 3
  for i, expected in enumerate(in_order):
    assert records[i]["image_id"] == expected["image_id"]
    np.testing.assert_array_equal(records[i]["segmentation_mask"],
                                  expected["segmentation_mask"])
  # A second process converting at once rewrites each file whole under its own name.
  prepare.convert_to_array_record(str(folder))
  assert sorted(os.listdir(folder)) == sorted(names), "temporary files left behind"
  assert sources.records(dataset, "train_aug")[2]["image_id"] == in_order[2]["image_id"]
