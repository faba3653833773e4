"""The segmentation task: `:tiny` through attention_lab.main, init_from an orbax classification
checkpoint or a classification config (trained first), the evaluation's windows / scales /
flips, the overlay pictures."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from attention_lab import models
from attention_lab.train import tasks
from attention_lab.train import trainer as trainer_lib
from attention_lab.train import dependencies, state as state_lib
from attention_lab.train.tasks import base
from attention_lab.train.tasks import segmentation as seg_task
from configs.segmentation import default
from tests.batches import first_batch_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tiny_preset_through_main(tmp_path):
  workdir = tmp_path / "workdir"
  env = {**os.environ, "PYTHONPATH": ROOT}
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.main",
       "--config=configs/segmentation/default.py:tiny", f"--workdir={workdir}",
       "--config.model.head=hamburger"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  final = dict(re.findall(r"([\w/]+)=([\d.na]+)", result.stdout.split("Final:")[-1]))
  assert 0.0 <= float(final["eval_miou"]) <= 1.0
  assert 0.0 <= float(final["eval_pixel_accuracy"]) <= 1.0
  assert "eval_iou/background" in final and "eval_mean_class_accuracy" in final
  images = os.listdir(workdir / "images")
  assert images and images[0].startswith("segmentation_")


def _task(tmp_path, **overrides):
  config = default.get_config("tiny")
  for key, value in overrides.items():
    config[key] = value
  mesh = state_lib.make_mesh(config)
  return tasks.create(config, base.Environment(mesh, str(tmp_path), config.batch_size))


@pytest.mark.parametrize("relative, saved_as", [(False, "non_params"), (True, "rest")])
def test_init_from_our_classification_checkpoint(tmp_path, monkeypatch, relative, saved_as):
  """A classification ResNet's backbone (our orbax checkpoint) initialises the segmenter's;
  the path may be relative (the README's workdirs are), and the checkpoint older than the
  state key "non_params" (its BatchNorm statistics under "rest")."""
  task = _task(tmp_path)
  m = task.config.model
  net = base.TrainableModel(lambda rngs: models.create(
      "resnet50", num_classes=10, depth=m.depth, width=m.width, rngs=rngs), optax.sgd(0.1), 3)
  source = {"step": jnp.zeros((), jnp.int32), **net.init()}
  # Non-default batch statistics, so copying them is visible.
  source["non_params"] = jax.tree.map(lambda x: x + 0.5, source["non_params"])
  saved = state_lib.as_saved(source)
  saved[saved_as] = saved.pop("non_params")
  with ocp.CheckpointManager(str(tmp_path / "cls" / "checkpoints")) as manager:
    manager.save(7, args=ocp.args.StandardSave(saved))
  task.config.init_from = str(tmp_path / "cls")
  if relative:
    monkeypatch.chdir(tmp_path)
    task.config.init_from = "cls"
  state = task.init_state()
  loaded = task.from_pretrained(state)
  from attention_lab.checkpoints import backbone_weights  # pylint: disable=g-import-not-at-top
  ours = backbone_weights.flatten({"params": loaded["params"], "non_params": loaded["non_params"]})
  theirs = backbone_weights.flatten({"params": source["params"],
                                     "non_params": source["non_params"]})
  backbone = [k for k in ours if k[1] == "backbone"]
  assert len(backbone) > 20
  for key in backbone:
    np.testing.assert_array_equal(ours[key], theirs[key])
  head = [k for k in ours if k[1] != "backbone" and k[0] == "params"]
  before = backbone_weights.flatten({"params": state["params"]})
  assert all(np.array_equal(ours[k], before[k]) for k in head)


def test_init_from_a_classification_config_trains_it_first(tmp_path):
  """init_from = a config file: that run is trained into <workdir>/pretrained (once; a second
  start restores it), and its backbone initialises the segmenter's."""
  config = default.get_config("tiny")
  config.init_from = "configs/segmentation/digits_backbone.py:tiny"
  resolved = dependencies.resolve(config, str(tmp_path))
  assert resolved == {"init_from": str(tmp_path / "pretrained")}
  task = tasks.create(config, base.Environment(state_lib.make_mesh(config), str(tmp_path),
                                               config.batch_size, resolved))
  loaded = task.from_pretrained(task.init_state())
  upstream = trainer_lib.Trainer(
      dependencies.load_config_file("configs/segmentation/digits_backbone.py:tiny"),
      str(tmp_path / "pretrained"))
  assert int(upstream.state["step"]) == upstream.total_steps == 2
  from attention_lab.checkpoints import backbone_weights  # pylint: disable=g-import-not-at-top
  ours = backbone_weights.flatten({"params": loaded["params"], "non_params": loaded["non_params"]})
  theirs = backbone_weights.flatten({"params": upstream.state["params"],
                                     "non_params": upstream.state["non_params"]})
  backbone = [k for k in ours if k[1] == "backbone"]
  assert len(backbone) > 20
  for key in backbone:
    np.testing.assert_array_equal(ours[key], theirs[key])
  again = task.from_pretrained(task.init_state())  # restored, not trained again
  assert os.listdir(tmp_path / "pretrained" / "checkpoints") == ["2"]
  again = backbone_weights.flatten({"params": again["params"], "non_params": again["non_params"]})
  for key in backbone:
    np.testing.assert_array_equal(again[key], ours[key])
  config.init_from = "configs/segmentation/default.py:tiny"
  with pytest.raises(ValueError, match="init_from .* must be a classification config"):
    dependencies.resolve(config, str(tmp_path))
  config.init_from = "configs/no_such_file.py"
  with pytest.raises(ValueError, match="init_from = 'configs/no_such_file.py': no such file"):
    dependencies.resolve(config, str(tmp_path))
  unresolved = tasks.create(config, base.Environment(state_lib.make_mesh(config), str(tmp_path),
                                                     config.batch_size))
  with pytest.raises(ValueError, match="a config file is trained first by the entry point"):
    unresolved.from_pretrained(unresolved.init_state())


def test_sliding_windows_scales_and_flips_of_a_pixelwise_model(tmp_path):
  """For a per-pixel model every evaluation mode gives the whole-canvas probabilities."""
  task = _task(tmp_path)
  w = jax.random.normal(jax.random.key(0), (3, task.num_classes))
  task.model = lambda state: (lambda x: x @ w)
  images = jax.random.normal(jax.random.key(1), (2, 13, 17, 3))
  whole = jax.nn.softmax(images @ w, -1)
  task.eval_window, task.eval_stride, task.eval_flip = 6, 4, True
  np.testing.assert_allclose(task.predict(None, images) / 2, whole, rtol=1e-5, atol=1e-6)
  task.eval_window, task.eval_scales, task.eval_flip = 0, (1.0, 2.0), False
  probs = task.predict(None, images) / 2
  assert probs.shape == whole.shape
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_loss_ignores_label_255_and_overlay():
  logits = jnp.array([[[[2.0, 0.0], [0.0, 5.0]]]])  # (1, 1, 2, 2)
  labels = jnp.array([[[0, 255]]])
  loss, per_example, count = seg_task.pixel_cross_entropy(logits, labels)
  assert float(loss) == pytest.approx(float(optax.softmax_cross_entropy_with_integer_labels(
      logits[0, 0, 0], jnp.array(0))))
  assert int(count[0]) == 1 and float(per_example[0]) == pytest.approx(float(loss))
  image = np.full((1, 2, 2, 3), 100.0)
  out = seg_task.overlay(image, np.array([[[0, 1], [255, 2]]]))
  assert out.dtype == np.uint8 and out.shape == (1, 2, 2, 3)
  assert (out[0, 0, 0] == 100).all() and (out[0, 1, 0] == 100).all()
  assert not (out[0, 0, 1] == 100).all()


def test_batch_spec_without_data_is_the_first_batch(tmp_path):
  """`attention_lab.aot` compiles from batch_spec() where VOC / ADE20K are not prepared."""
  task = _task(tmp_path)
  assert task.batch_spec() == first_batch_spec(task)
