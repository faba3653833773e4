"""Detection configs: the default `:tiny` through attention_lab.main, every `:cpu` preset
for two steps, and the COCO config's recipe."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from attention_lab.train.trainer import Trainer
from configs.aa import coco_retinanet
from configs.detection import default

REPO = pathlib.Path(__file__).parents[2]


def test_default_tiny_through_main(tmp_path, digit_scenes_dir):
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/detection/default.py:tiny",
       f"--workdir={tmp_path}", f"--config.dataset.data_dir={digit_scenes_dir}"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "eval_map=" in result.stdout and "eval_ap50=" in result.stdout
  assert (tmp_path / "checkpoints" / "2").is_dir()
  assert list((tmp_path / "images").glob("detections_*.png"))  # boxes drawn on eval images


@pytest.mark.parametrize("module,backbone", [(default, "aa_resnet"), (coco_retinanet, "resnet")])
def test_cpu_preset_trains_two_steps(tmp_path, digit_scenes_dir, module, backbone):
  config = module.get_config("cpu")
  config.dataset.data_dir = digit_scenes_dir
  config.model.backbone = backbone
  trainer = Trainer(config, str(tmp_path))
  summary = trainer.run(until_step=2)
  assert int(trainer.state["step"]) == 2
  assert np.isfinite(summary.get("train_loss", 0.0))


def test_coco_config_is_the_paper_setup():
  config = coco_retinanet.get_config()
  assert config.dataset.name == "coco/2017" and config.dataset.image_size == 640
  assert config.model.backbone == "resnet50" and config.model.features == 256
  assert (config.model.min_level, config.model.max_level) == (3, 7)
  assert (config.loss.alpha, config.loss.gamma) == (0.25, 2.0)
  assert config.num_epochs == 150 and config.eval.max_detections == 100
  with pytest.raises(ValueError, match="preset"):
    coco_retinanet.get_config("gpu")
  with pytest.raises(ValueError, match="preset"):
    default.get_config("gpu")
