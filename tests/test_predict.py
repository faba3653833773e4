"""attention_lab.predict: files a benchmark server or an external tool takes, written from a
`:tiny` workdir's checkpoint, opened and checked."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from attention_lab import cli, predict
from attention_lab.evaluation import submission
from attention_lab.train import trainer as trainer_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def voc_palette_reference() -> np.ndarray:
  """The VOCdevkit colour map (VOClabelcolormap.m), written independently: bit j of the
  class index's three lowest-bit groups set bit 7−j of R, G, B."""
  colours = np.zeros((256, 3), np.uint8)
  for index in range(256):
    for j in range(8):
      for channel in range(3):
        if (index >> (3 * j + channel)) & 1:
          colours[index, channel] |= 1 << (7 - j)
  return colours


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """The embedded datasets these tests read, prepared on first use here, not in ~."""
  return str(tmp_path_factory.mktemp("tfds"))


def checkpointed(config, workdir: str):
  """A workdir holding a checkpoint as the loop writes it (of the initial state: predict
  does not care whether it learned, and compiling a train step would double the time)."""
  trainer = trainer_lib.Trainer(config, workdir)
  trainer.save(force=True)
  trainer.checkpoints.wait_until_finished()
  return trainer


def test_voc_palette_matches_the_devkit():
  reference = voc_palette_reference()
  np.testing.assert_array_equal(submission.voc_colour_map(), reference)
  assert tuple(reference[1]) == (128, 0, 0) and tuple(reference[15]) == (192, 128, 128)


@pytest.mark.parametrize("name,folder,value_range,mode", [
    ("voc_segmentation", "results/VOC2012/Segmentation/comp6_test_cls", (0, 20), "P"),
    ("ade20k_challenge", "", (1, 150), "L"),
    ("pascal_context", "", (1, 59), "P"),
])
def test_segmentation_layouts(tmp_path, name, folder, value_range, mode):
  """Each benchmark's folder, stored values and PNG mode, from predicted class indices."""
  from attention_lab.data import segmentation as seg_data
  classes = len(seg_data.facts(name).mask_classes)
  layout, encode, palette = submission.segmentation_layout(name)
  assert layout == folder
  labels = np.arange(classes).reshape(1, -1).repeat(3, 0)
  path = str(tmp_path / layout / "2008_000001.png")
  submission.palette_png(encode(labels), path, palette=palette)
  with Image.open(path) as image:
    assert image.mode == mode
    values = np.asarray(image)
    if mode == "P":
      np.testing.assert_array_equal(
          np.asarray(image.getpalette(), np.uint8).reshape(-1, 3)[:256],
          voc_palette_reference()[:len(image.getpalette()) // 3])
  assert (values.min(), values.max()) == value_range
  np.testing.assert_array_equal(values, labels + value_range[0])


def test_cityscapes_layout_writes_label_ids():
  _, encode, palette = submission.segmentation_layout("cityscapes/semantic_segmentation")
  assert not palette
  np.testing.assert_array_equal(encode(np.array([0, 1, 10, 18])), [7, 8, 23, 33])


@pytest.fixture(scope="module")
def segmentation_workdir(tmp_path_factory, data_dir):
  from configs.segmentation import default
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  config.eval.scales = (1.0, 1.5)
  config.eval.flip = True
  workdir = str(tmp_path_factory.mktemp("seg"))
  return config, workdir, checkpointed(config, workdir)


def test_segmentation_pngs_at_original_size(segmentation_workdir, tmp_path):
  """Digit scenes (64×64, predicted on the eval canvas with scales and flip): one palette PNG
  per image at 64×64, the argmax of the evaluation's probabilities (checked against the
  task's own predict on the same image)."""
  config, workdir, trainer = segmentation_workdir
  line = predict.run(config, workdir, str(tmp_path), split="test[:5]")
  assert "wrote 5 segmentation PNGs" in line and line.startswith("step 0")
  names = sorted(os.listdir(tmp_path))
  assert names == [f"{i:05d}.png" for i in range(5)]
  from attention_lab.data import segmentation as seg_data
  from attention_lab.data import sources
  example = sources.records(config.dataset, "test")[4]
  with Image.open(tmp_path / "00004.png") as image:
    assert image.mode == "P" and image.size == (64, 64)
    np.testing.assert_array_equal(np.asarray(image.getpalette(), np.uint8).reshape(-1, 3),
                                  voc_palette_reference())
    written = np.asarray(image)
  assert written.max() < 11
  canvas = seg_data.preprocess(config, example)["image"][None]
  x = seg_data.normalizer(config.dataset.name)({"image": canvas})["image"]
  probs = np.asarray(trainer.task.predict(trainer.state, x))[0]
  assert probs.shape[:2] == (64, 64)  # the canvas is the scene: nothing to resize back
  expected = np.argmax(probs, -1)
  assert len(np.unique(expected)) > 1  # a comparison that can fail
  assert np.mean(written == expected) > 0.999  # ties under a different summation order


@pytest.fixture(scope="module")
def detection_workdir(tmp_path_factory, data_dir):
  from configs.detection import default
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  config.eval.score_threshold = 0.0  # an untrained net still gives boxes
  workdir = str(tmp_path_factory.mktemp("det"))
  checkpointed(config, workdir)
  return config, workdir


def test_detection_json_loads_with_pycocotools(detection_workdir, tmp_path):
  from attention_lab.evaluation import coco
  from attention_lab.train.tasks import detection
  config, workdir = detection_workdir
  task, state, _ = predict.restore(config, workdir)
  line, path, out = task.export_results(state, "test[:6]", str(tmp_path))
  assert os.path.basename(path) == "detections_test-6_attention_lab_results.json"
  with open(path) as f:
    results = json.load(f)
  assert results and f"wrote {len(results)} detections of 6 images" in line
  assert set(results[0]) == {"image_id", "category_id", "bbox", "score"}
  assert {r["image_id"] for r in results} <= set(range(6))
  assert {r["category_id"] for r in results} <= set(range(1, 11))
  ground_truth = coco.coco_ground_truth(out["boxes"], out["labels"], out["box_mask"],
                                        image_mask=out["mask"], num_classes=10)
  loaded = ground_truth.loadRes(path)  # raises if an image id is not in the ground truth
  assert len(loaded.getAnnIds()) == len(results)
  # The same detections as the evaluation scores, boxes in original (64-pixel) coordinates.
  stats = coco.evaluate(ground_truth, coco.detections_array(
      out["det_boxes"], out["det_scores"], out["det_classes"], out["det_valid"],
      image_mask=out["mask"]))
  assert stats == detection.coco_map(out, 10)
  boxes = np.array([r["bbox"] for r in results])
  assert boxes[:, 0].min() >= -1 and (boxes[:, 0] + boxes[:, 2]).max() <= 65


def test_coco_category_ids():
  assert submission.result_set("test") == "test-dev2017"
  assert submission.result_set("validation") == "val2017"
  assert len(submission.COCO_CATEGORY_IDS) == 80 and len(set(submission.COCO_CATEGORY_IDS)) == 80
  missing = sorted(set(range(1, 91)) - set(submission.COCO_CATEGORY_IDS))
  assert missing == [12, 26, 29, 30, 45, 66, 68, 69, 71, 83]  # COCO's unused ids
  out = {"det_boxes": np.array([[[10.0, 20.0, 30.0, 60.0]]]), "det_scores": np.array([[0.5]]),
         "det_classes": np.array([[79]]), "det_valid": np.array([[True]]),
         "mask": np.array([True])}
  (result,) = submission.detection_results(out, np.array([139]), submission.COCO_CATEGORY_IDS)
  assert result == {"image_id": 139, "category_id": 90, "bbox": [20.0, 10.0, 40.0, 20.0],
                    "score": 0.5}


def test_gan_sample_folders(tmp_path):
  from configs.gan import default
  config = default.get_config("tiny")
  config.eval.features = "none"
  workdir = str(tmp_path / "gan")
  checkpointed(config, workdir)
  line = predict.run(config, workdir, str(tmp_path / "out"), num_samples=23)
  assert "wrote 23 samples" in line
  folders = sorted(os.listdir(tmp_path / "out"))
  assert folders == [f"{c:04d}" for c in range(10)]  # conditional on the 10 digits
  counts = [len(os.listdir(tmp_path / "out" / f)) for f in folders]
  assert sum(counts) == 23 and max(counts) - min(counts) <= 1
  first = tmp_path / "out" / "0000" / sorted(os.listdir(tmp_path / "out" / "0000"))[0]
  with Image.open(first) as image:
    assert image.mode == "RGB" and image.size == (config.dataset.image_size,) * 2


def test_restoration_tiffs(tmp_path, data_dir):
  import tifffile
  from attention_lab.data import restoration as res_data
  from configs.restoration import default
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  workdir = str(tmp_path / "res")
  trainer = checkpointed(config, workdir)
  line = predict.run(config, workdir, str(tmp_path / "out"), split="test[:1]")
  config.dataset.eval_split = "test[:1]"  # one whole photo: tile by tile, in many windows
  examples = list(res_data.eval_examples(config))
  assert f"wrote {len(examples)} restored TIFFs" in line
  image, target, name = examples[0]
  written = tifffile.imread(tmp_path / "out" / f"{name}.tif")
  assert written.dtype == np.float32 and written.shape == target.shape[:-1]
  np.testing.assert_allclose(written, trainer.task.predict(trainer.state, image)[..., 0],
                             rtol=1e-5, atol=1e-6)


def test_missing_checkpoint_is_one_line(tmp_path):
  from configs.segmentation import default
  with pytest.raises(cli.ConfigError, match="no checkpoint in"):
    predict.restore(default.get_config("tiny"), str(tmp_path))
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.predict",
       "--config=configs/segmentation/default.py:tiny", f"--workdir={tmp_path / 'none'}",
       f"--out={tmp_path / 'out'}"],
      cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
      timeout=300, check=False)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "no checkpoint in" in lines[0] and "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "none")
