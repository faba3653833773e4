import os
import pathlib
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from attention_lab.data import pipeline
from tests.events import written_points
from attention_lab.train.signals import PREEMPTION
from attention_lab.train.trainer import NonFiniteError, Trainer
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
  lines = result.stdout.splitlines()
  assert "TensorBoard logs" in result.stdout
  assert re.search(r"^Parameters: [\d,]+ \(table: .*parameters.txt\)$", result.stdout, re.M)
  progress = [line for line in lines if line.startswith("step ")]
  assert len(progress) == 2  # one line per log step (tiny: every 2 of 4 steps)
  assert re.fullmatch(r"step 2/4  loss \d+\.\d{4}  top1 \d\.\d{4}  [\d.]+ steps/s  "
                      r"[\d.]+ examples/s  ETA \d+:\d\d:\d\d", progress[0]), progress[0]
  assert re.search(r"^eval step 4/4  top1 \d\.\d{4}  loss ", result.stdout, re.M)
  assert lines[-1].startswith("Final: ") and "eval_top1=" in lines[-1]
  assert re.search(r"examples_per_second=\d+\.\d{4}", lines[-1])  # the median
  assert not re.search(r"^[IW]\d{4} |INFO", result.stderr, re.M), result.stderr  # no chatter
  assert (tmp_path / "parameters.txt").read_text().splitlines()[-1].startswith("Total: ")
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
  finished = Trainer(config, str(tmp_path / "b")).run()  # a re-run evaluates again
  assert finished == expected
  for a, b in zip(jax.tree.leaves(nnx.to_pure_dict(resumed.state["params"])),
                  jax.tree.leaves(nnx.to_pure_dict(straight.state["params"]))):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("overrides,match", [
    ({"model.name": "no_such_net"}, "unknown model name"),
    ({"model.attention": "no_such_op"}, "attention must be one of"),
    ({"batch_size": 12}, "batch_size = 12: must be divisible by the number of devices"),
    ({"batch_size": 0}, "batch_size = 0: must be > 0"),
    ({"optimizer.learning_rate": -0.1}, r"optimizer.learning_rate = -0.1: must be > 0"),
    ({"num_train_steps": -1}, "num_train_steps = -1: must be >= 0"),
    ({"num_train_steps": 0, "num_epochs": 0}, "give 0 train steps"),
    ({"log_every_steps": 0}, "log_every_steps = 0: must be > 0"),
    ({"optimizer.schedule": "linear"}, "optimizer.schedule"),
    ({"dataset.name": "mnist_in_a_box"}, "dataset.name"),
    ({"model.dtype": "float16"}, "model.dtype"),
])
def test_bad_configs_fail_fast(tmp_path, data_dir, overrides, match):
  with pytest.raises(ValueError, match=match):
    Trainer(tiny_config(data_dir, **overrides), str(tmp_path))


def test_batch_not_divisible_by_the_process_count(tmp_path, data_dir, monkeypatch):
  monkeypatch.setattr(jax, "process_count", lambda: 3)
  with pytest.raises(ValueError, match="batch_size = 16: must be divisible by the process count"):
    Trainer(tiny_config(data_dir), str(tmp_path))


def test_unwritable_workdir_fails_fast(tmp_path, data_dir):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  with pytest.raises(ValueError, match="cannot be written"):
    Trainer(tiny_config(data_dir), str(blocker / "workdir"))


def test_sigterm_in_data_loading_or_evaluation_saves_the_step_reached(tmp_path, data_dir):
  """The signal lands while the loop waits for a batch (step 2 done), then, after a resume,
  inside an evaluation (step 4 done): each time the finished step is saved at once and
  the rest of the evaluation is abandoned."""
  config = tiny_config(data_dir, **{"num_train_steps": 6, "checkpoint_every_steps": 100,
                                    "eval_every_steps": 4})
  trainer = Trainer(config, str(tmp_path))
  batches, handler_before = trainer.task.train_batches, signal.getsignal(signal.SIGTERM)

  def preempted_batches(start):
    for i, batch in enumerate(batches(start)):
      if i == 2:  # fetching the batch of step 3
        os.kill(os.getpid(), signal.SIGTERM)
      yield batch

  trainer.task.train_batches = preempted_batches
  trainer.run()
  assert trainer.preempted and trainer.checkpoints.latest_step() == 2
  assert signal.getsignal(signal.SIGTERM) is handler_before  # the trainer's handler is removed
  assert Trainer(config, str(tmp_path)).run() == {} and PREEMPTION.stopped  # a stop stays

  PREEMPTION.reset()
  resumed = Trainer(config, str(tmp_path))
  assert int(resumed.state["step"]) == 2
  evaluate, finished = resumed.task.evaluate, []

  def preempted_evaluate(state):
    os.kill(os.getpid(), signal.SIGTERM)
    finished.append(evaluate(state))

  resumed.task.evaluate = preempted_evaluate
  resumed.run()
  assert resumed.preempted and not finished
  assert resumed.checkpoints.latest_step() == 4


def test_sigterm_in_the_last_evaluation_then_a_rerun_ends_as_an_uninterrupted_run(
    tmp_path, data_dir):
  """The signal lands in the last step's evaluation: the step is saved without it, and the
  re-run (nothing left to train) evaluates it once and returns the uninterrupted summary."""
  config = tiny_config(data_dir, **{"num_train_steps": 4, "eval_every_steps": 100})
  expected = Trainer(config, str(tmp_path / "straight")).run()
  assert {"train_loss", "learning_rate", "eval_loss"} <= set(expected)
  trainer = Trainer(config, str(tmp_path / "cut"))
  evaluate = trainer.task.evaluate

  def preempted_evaluate(state):
    os.kill(os.getpid(), signal.SIGTERM)
    return evaluate(state)

  trainer.task.evaluate = preempted_evaluate
  trainer.run()
  assert trainer.preempted and trainer.checkpoints.latest_step() == 4
  assert "eval_loss" not in written_points(str(tmp_path / "cut"))
  PREEMPTION.reset()
  for _ in range(2):  # the owed evaluation, then a plain re-run
    rerun = Trainer(config, str(tmp_path / "cut"))
    assert rerun.run() == expected and not rerun.preempted
    points = written_points(str(tmp_path / "cut"))
    assert list(points["eval_loss"]) == [4]
    assert points["eval_loss"][4] == pytest.approx(expected["eval_loss"], abs=1e-6)


def test_non_finite_loss_stops_at_its_step_and_keeps_the_last_finite_checkpoint(
    tmp_path, data_dir):
  config = tiny_config(data_dir, **{"num_train_steps": 6, "checkpoint_every_steps": 2})
  trainer = Trainer(config, str(tmp_path))
  step_fn, calls = trainer.train_step, []

  def poisoned_step(state, batch):
    calls.append(1)
    if len(calls) == 3:  # NaN weights going into step 3
      state = {**state, "params": jax.tree.map(lambda x: x * np.nan, state["params"])}
    return step_fn(state, batch)

  trainer.train_step = poisoned_step
  with pytest.raises(NonFiniteError, match=r"in steps 3-4 \(loss=nan.*latest checkpoint \(step 2\)"):
    trainer.run()
  assert trainer.checkpoints.latest_step() == 2
  restored = Trainer(config, str(tmp_path)).state
  assert int(restored["step"]) == 2
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(restored["params"]))


def test_evaluation_does_not_depend_on_the_device_count(tmp_path, data_dir):
  """The same checkpoint evaluated on 8 devices and on 1 (300 test digits: 18 full batches
  of 16 and one padded one)."""
  eight = Trainer(tiny_config(data_dir), str(tmp_path))
  eight.run()
  one = Trainer(tiny_config(data_dir, **{"mesh.num_devices": 1}), str(tmp_path))
  assert int(one.state["step"]) == 4
  a, b = eight.evaluate(), one.evaluate()
  assert a.keys() == b.keys() and a["eval_top1"] == b["eval_top1"]
  np.testing.assert_allclose([a[k] for k in sorted(a)], [b[k] for k in sorted(b)], atol=1e-6)


def _matmul_operands(step, state, batch):
  """The operand element types of each convolution and dot in the lowered step."""
  text = step.lower(state, batch).as_text()
  found = re.findall(r"= stablehlo\.(convolution|dot_general)\b.*: \(tensor<[^>]*x(\w+)>, "
                     r"tensor<[^>]*x(\w+)>\)", text)
  return [(op, (a, b)) for op, a, b in found]


def test_bfloat16_compute(tmp_path, data_dir):
  """model.dtype=bfloat16: every convolution and most matmuls take bfloat16 operands (the
  attention logits accumulate in float32, so their backward runs in float32), the
  parameters stay float32, and the losses follow float32's within bfloat16's rounding
  without equalling them."""
  losses, operands = {}, {}
  for dtype in ("float32", "bfloat16"):
    config = tiny_config(data_dir, **{"mesh.num_devices": 1, "model.dtype": dtype})
    trainer = Trainer(config, str(tmp_path / dtype))
    data = pipeline.train_iterator(config, local_batch_size=trainer.local_batch)
    batches = [trainer.global_batch(next(data)) for _ in range(3)]
    operands[dtype] = _matmul_operands(trainer.train_step, trainer.state, batches[0])
    losses[dtype] = []
    for batch in batches:
      trainer.state, values = trainer.train_step(trainer.state, batch)
      losses[dtype].append(float(values.compute()["loss"]))
    assert {p.dtype for p in jax.tree.leaves(trainer.state["params"])} == {np.dtype("float32")}
  assert {types for _, types in operands["float32"]} == {("f32", "f32")}
  convolutions = [types for op, types in operands["bfloat16"] if op == "convolution"]
  dots = [types for op, types in operands["bfloat16"] if op == "dot_general"]
  assert convolutions and all(types == ("bf16", "bf16") for types in convolutions)
  assert sum(types == ("bf16", "bf16") for types in dots) > len(dots) / 2
  np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=5e-3)
  assert losses["bfloat16"] != losses["float32"]


def test_unknown_task(tmp_path, data_dir):
  config = tiny_config(data_dir)
  config.task = "no_such_task"
  with pytest.raises(ValueError, match="task must be one of"):
    Trainer(config, str(tmp_path))


def test_microbatches_and_batchnorm_groups_train_and_check_their_sizes(tmp_path, data_dir):
  """A synthetic speed run in 2 micro-batches with BatchNorm statistics per 4 examples; sizes
  that would split a group across devices or micro-batches are one-line errors."""
  two = {"mesh.num_devices": 2}
  config = tiny_config(data_dir, **two, **{"microbatches": 2, "bn_group_size": 4,
                                           "dataset.synthetic": True})
  summary = Trainer(config, str(tmp_path / "run")).run()
  assert np.isfinite(summary["train_loss"]) and "eval_top1" not in summary  # no evaluation
  for overrides, match in (({"microbatches": 3}, r"divisible by microbatches \(3\)"),
                           ({"bn_group_size": 3}, r"bn_group_size = 3: .* devices = 8\)"),
                           ({"microbatches": 2, "bn_group_size": 8}, r"devices = 4\)")):
    with pytest.raises(ValueError, match=match):
      Trainer(tiny_config(data_dir, **two, **overrides), str(tmp_path / "bad"))
