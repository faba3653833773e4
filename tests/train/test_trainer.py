import os
import pathlib
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from attention_lab.data import pipeline
from attention_lab.train.trainer import Trainer
from configs import default

REPO = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


def tiny_config(data_dir, **overrides):
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  config.model.dropout = 0.0
  for key, value in overrides.items():
    node = config
    *path, leaf = key.split(".")
    for name in path:
      node = node[name]
    node[leaf] = value
  return config


def test_main_trains_the_default_config_end_to_end(tmp_path, data_dir):
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={tmp_path}", f"--config.dataset.data_dir={data_dir}",
       "--config.model.attention=kronecker_qkv"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "TensorBoard logs" in result.stdout and "eval_top1=" in result.stdout
  assert "ETA" in result.stderr  # clu ReportProgress
  assert list(tmp_path.glob("events.out.tfevents.*"))  # TensorBoard scalars
  assert (tmp_path / "checkpoints" / "4").is_dir()


def _losses(config, workdir, steps):
  trainer = Trainer(config, str(workdir))
  data = pipeline.train_iterator(config, local_batch_size=trainer.local_batch)
  losses = []
  for _ in range(steps):
    trainer.state, values = trainer.train_step(trainer.state, trainer.global_batch(next(data)))
    losses.append(float(values.compute()["loss"]))
  return losses


def test_eight_devices_and_one_device_give_the_same_losses(tmp_path, data_dir):
  assert jax.device_count() == 8
  eight = _losses(tiny_config(data_dir, **{"mesh.num_devices": -1}), tmp_path / "8", 3)
  one = _losses(tiny_config(data_dir, **{"mesh.num_devices": 1}), tmp_path / "1", 3)
  np.testing.assert_allclose(eight, one, rtol=0, atol=1e-5)
  assert eight[0] != eight[2]  # it trains


def test_fsdp_parameter_sharding_gives_the_same_losses(tmp_path, data_dir):
  replicated = _losses(tiny_config(data_dir), tmp_path / "r", 2)
  sharded = _losses(tiny_config(data_dir, **{"mesh.param_sharding": "fsdp"}), tmp_path / "s", 2)
  np.testing.assert_allclose(sharded, replicated, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attention", ["hamburger", "softmax"])
def test_resume_is_exact(tmp_path, data_dir, attention):
  """6 steps straight == 3 steps, stop, new process state, resume to 6 (dropout on)."""
  config = tiny_config(data_dir, **{"num_train_steps": 6, "log_every_steps": 1,
                                    "model.attention": attention, "model.dropout": 0.3})
  straight = Trainer(config, str(tmp_path / "a"))
  expected = straight.run()
  first = Trainer(config, str(tmp_path / "b"))
  first.run(until_step=3)
  resumed = Trainer(config, str(tmp_path / "b"))
  assert int(resumed.state["step"]) == 3
  got = resumed.run()
  assert got == expected
  finished = Trainer(config, str(tmp_path / "b")).run()  # a re-run only evaluates
  assert finished == {k: v for k, v in expected.items() if k.startswith("eval_")}
  for a, b in zip(jax.tree.leaves(nnx.to_pure_dict(resumed.state["params"])),
                  jax.tree.leaves(nnx.to_pure_dict(straight.state["params"]))):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("overrides,match", [
    ({"model.name": "no_such_net"}, "unknown model name"),
    ({"model.attention": "no_such_op"}, "attention must be one of"),
    ({"batch_size": 12}, "divisible by the number of devices"),
    ({"optimizer.schedule": "linear"}, "optimizer.schedule"),
    ({"dataset.name": "mnist_in_a_box"}, "dataset name"),
    ({"model.dtype": "float16"}, "model.dtype"),
])
def test_bad_configs_fail_fast(tmp_path, data_dir, overrides, match):
  with pytest.raises(ValueError, match=match):
    Trainer(tiny_config(data_dir, **overrides), str(tmp_path))


def test_unwritable_workdir_fails_fast(tmp_path, data_dir):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  with pytest.raises(ValueError, match="cannot be written"):
    Trainer(tiny_config(data_dir), str(blocker / "workdir"))


def test_sigterm_saves_and_stops(tmp_path, data_dir):
  config = tiny_config(data_dir, **{"num_train_steps": 6, "checkpoint_every_steps": 100})
  trainer = Trainer(config, str(tmp_path))
  step_fn, calls = trainer.train_step, []

  def preempted_step(state, batch):
    calls.append(1)
    if len(calls) == 2:
      os.kill(os.getpid(), signal.SIGTERM)  # a preemption notice during step 2
    return step_fn(state, batch)

  trainer.train_step = preempted_step
  handler_before = signal.getsignal(signal.SIGTERM)
  trainer.run()
  assert len(calls) == 2 and trainer.checkpoints.latest_step() == 2
  assert signal.getsignal(signal.SIGTERM) is handler_before  # the trainer's handler is removed
  assert int(Trainer(config, str(tmp_path)).state["step"]) == 2  # resumes there


def test_bfloat16_compute(tmp_path, data_dir):
  config = tiny_config(data_dir, **{"num_train_steps": 2, "model.dtype": "bfloat16"})
  summary = Trainer(config, str(tmp_path)).run()
  assert np.isfinite(summary["train_loss"])


def test_unknown_task(tmp_path, data_dir):
  config = tiny_config(data_dir)
  config.task = "no_such_task"
  with pytest.raises(ValueError, match="task must be one of"):
    Trainer(config, str(tmp_path))
