"""Restoration configs: every `:cpu` preset trains two steps; the default `:tiny` runs via main."""

import os
import subprocess
import sys

import jax
import pytest
from flax import nnx

from attention_lab.train import tasks
from attention_lab.train.tasks import base
from attention_lab.train.state import make_mesh
from attention_lab.train.trainer import Trainer
from configs.restoration import default
from configs.sanet import care_flywing, care_planaria, care_tribolium
from tests.batches import first_batch_spec

CONFIGS = {"default": default, "planaria": care_planaria, "tribolium": care_tribolium,
           "flywing": care_flywing}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cpu_preset_trains_two_steps(tmp_path, tfds_dir, name):
  config = CONFIGS[name].get_config("cpu")
  config.dataset.data_dir = tfds_dir
  config.num_train_steps = 2
  config.model.features = 4  # the preset's data, model and pipeline at test-sized cost
  config.eval.max_examples = 1
  summary = Trainer(config, str(tmp_path / "workdir")).run()
  for key in ("eval_psnr", "eval_input_psnr", "eval_ssim", "eval_nrmse"):
    assert summary[key] == summary[key], key  # finite, not NaN
  assert -1.0 <= summary["eval_ssim"] <= 1.0
  assert os.listdir(tmp_path / "workdir" / "images")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_table7_columns_by_override(name):
  counts = {}
  for attention in ("none", "softmax", "siamese"):  # U-Net, U-Net+Attn, U-Net+SAO
    config = CONFIGS[name].get_config()
    config.model.attention = attention
    model = nnx.eval_shape(lambda: base.create_model(  # pylint: disable=cell-var-from-loop
        config.model, in_channels=1, rngs=nnx.Rngs(0)))
    counts[attention] = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
  # attention adds q, k, v maps in the bottom and decoder blocks; SAO adds w on top
  assert counts["none"] < counts["softmax"] < counts["siamese"]
  config = CONFIGS[name].get_config()
  if name != "default":
    assert (config.batch_size, config.optimizer.learning_rate) == (16, 4e-4)
    assert config.num_epochs == (100 if name == "flywing" else 200)
    assert config.eval.protocol == "care"
    assert config.dataset.patch_size == ((50, 64, 64) if name == "flywing" else (16, 64, 64))


def test_default_tiny_through_main(tmp_path, tfds_dir):
  env = dict(os.environ, PYTHONPATH=ROOT)
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.main",
       "--config=configs/restoration/default.py:tiny", f"--workdir={tmp_path / 'work'}",
       f"--config.dataset.data_dir={tfds_dir}", "--config.model.attention=siamese"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "eval_psnr=" in result.stdout


def test_unknown_preset():
  with pytest.raises(ValueError, match="preset"):
    default.get_config("gpu")
  with pytest.raises(ValueError, match="preset"):
    care_planaria.get_config("gpu")


@pytest.mark.parametrize("name,preset", [("default", "tiny"), ("flywing", "tiny")])
def test_batch_spec_without_data_is_the_first_batch(tmp_path, tfds_dir, name, preset):
  """`attention_lab.aot` compiles from batch_spec() where the CARE data are not unpacked
  (2D photos; flywing's tiny preset: 3D input, 2D projection target)."""
  config = CONFIGS[name].get_config(preset)
  config.dataset.data_dir = tfds_dir
  task = tasks.create(config, tasks.Environment(make_mesh(config), str(tmp_path),
                                                config.batch_size))
  assert task.batch_spec() == first_batch_spec(task)
