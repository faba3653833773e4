"""The train system under real conditions, through `python -m attention_lab.main`:
two processes on 127.0.0.1, SIGKILL and SIGTERM at random moments, resumption.

Each subprocess sees one CPU device (the suite's 8-device XLA_FLAGS are overridden)
and trains the tiny default config, so a process costs a few seconds.
"""

import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import tensorflow as tf

from attention_lab.data import pipeline, prepare
from attention_lab.train.trainer import Trainer
from configs import default

REPO = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("tfds"))
  prepare.prepare(prepare.dataset_config("digits", path))  # once, before processes race for it
  return path


def _env(devices: int = 1) -> dict[str, str]:
  """The suite's XLA flags with `devices` CPU devices instead of 8."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
  return env


def _main(workdir, data_dir, *args, **popen):
  return subprocess.Popen(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={workdir}", f"--config.dataset.data_dir={data_dir}", *args],
      cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(process, timeout=300):
  out, err = process.communicate(timeout=timeout)
  return process.returncode, out, err


def _scalars(workdir) -> dict[str, list[tuple[int, float]]]:
  """Every (step, value) point of every tag in the workdir's TensorBoard files."""
  points = {}
  for path in sorted(pathlib.Path(workdir).glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.HasField("tensor") and not value.tensor.string_val:
          points.setdefault(value.tag, []).append(
              (event.step, float(tf.make_ndarray(value.tensor))))
  return points


def _tiny(data_dir, **overrides):
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  for key, value in overrides.items():
    node = config
    *path, leaf = key.split(".")
    for name in path:
      node = node[name]
    node[leaf] = value
  return config


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_equal_one_process_with_two_devices(tmp_path, data_dir):
  """2 processes × 1 CPU device on 127.0.0.1 == 1 process × 2 devices: the global batches do
  not depend on the process count (each process reads its rows of them), so the two runs
  take the same steps; then one process resumes the two's checkpoint and ends where they
  ended."""
  overrides = {"model.dropout": 0.0, "log_every_steps": 1, "checkpoint_every_steps": 2,
               "keep_checkpoints": 3}
  args = [f"--config.{k}={v}" for k, v in overrides.items()]
  workdir, port = tmp_path / "two", _free_port()
  processes = [_main(workdir, data_dir, *args, f"--coordinator_address=127.0.0.1:{port}",
                     "--num_processes=2", f"--process_id={i}") for i in range(2)]

  # Meanwhile, in this process: 2 devices, fed the one-process stream.
  config = _tiny(data_dir, **overrides, **{"mesh.num_devices": 2})
  reference = Trainer(config, str(tmp_path / "one"))
  stream = pipeline.train_iterator(config, local_batch_size=config.batch_size)
  losses = []
  for _ in range(4):
    reference.state, values = reference.train_step(reference.state,
                                                   reference.global_batch(next(stream)))
    losses.append(float(values.compute()["loss"]))
  params_at_4 = [np.asarray(x) for x in jax.tree.leaves(reference.state["params"])]
  expected_eval = reference.evaluate()

  results = [_finish(p) for p in processes]
  for code, out, err in results:
    assert code == 0, err[-3000:]
  assert "Final:" in results[0][1]
  assert "step" not in results[1][1] and "Final" not in results[1][1]  # only process 0 prints
  assert "2 process(es), 2 cpu device(s)" in results[0][1]
  points = _scalars(workdir)
  got = [v for _, v in sorted(points["train_loss"])]
  np.testing.assert_allclose(got, losses, rtol=0, atol=1e-5)
  assert losses[0] != losses[-1]
  np.testing.assert_allclose(points["eval_loss"][-1][1], expected_eval["eval_loss"], atol=1e-5)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2", "4"]

  # One process with two devices resumes the two-process checkpoint of step 2: the same
  # global batches 3 and 4, so the same weights at step 4.
  resumed_dir = tmp_path / "resumed"
  shutil.copytree(workdir / "checkpoints", resumed_dir / "checkpoints")
  shutil.rmtree(resumed_dir / "checkpoints" / "4")
  resumed = Trainer(config, str(resumed_dir))
  assert int(resumed.state["step"]) == 2
  resumed.run()
  assert int(resumed.state["step"]) == 4
  for a, b in zip(jax.tree.leaves(resumed.state["params"]), params_at_4):
    np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=1e-5)


def test_sigkill_then_sigterm_at_random_moments_lose_nothing(tmp_path, data_dir):
  """SIGKILL at a random moment, rerun, SIGTERM at a random moment (saves the step it
  reached, exit 0), rerun to the end: the same final metrics as an uninterrupted run, and
  no TensorBoard point written twice.

  A moment is a random step (the run prints one line per step) plus up to 0.1 s: the 40
  steps take under 2 s here, so a random delay from the start would often miss them. Step
  40 reaches the end: the last evaluation, the last save, the process's shut-down."""
  seed = random.randrange(10**6)
  rng = random.Random(seed)
  args = ["--config.num_train_steps=40", "--config.log_every_steps=1",
          "--config.eval_every_steps=10", "--config.checkpoint_every_steps=5",
          "--config.keep_checkpoints=20"]
  straight = _main(tmp_path / "straight", data_dir, *args)
  workdir = tmp_path / "interrupted"

  def reached(process, step):  # reads until progress line `step` or later, or the end
    lines = []
    while not any(int(s) >= step for s in re.findall(r"^step (\d+)/", "".join(lines), re.M)):
      line = process.stdout.readline()
      if not line:
        break
      lines.append(line)
    time.sleep(rng.uniform(0.0, 0.1))
    return lines

  killed = _main(workdir, data_dir, *args)
  reached(killed, rng.randint(1, 40))
  killed.kill()
  killed.wait()

  preempted = _main(workdir, data_dir, *args)
  lines = reached(preempted, rng.randint(1, 40))
  preempted.send_signal(signal.SIGTERM)
  code, out, err = _finish(preempted)
  out = "".join(lines) + out
  assert code == 0, f"seed {seed}: {err[-3000:]}"
  saved = re.search(r"SIGTERM: saved step (\d+)", out)
  if saved is None:  # the run ended before the signal arrived
    assert "Final:" in out, f"seed {seed}: {out}"
  else:
    steps = [int(s) for s in re.findall(r"^step (\d+)/", out, re.M)]
    if steps:  # else the killed run had finished: this one only evaluated
      assert int(saved.group(1)) == max(steps), f"seed {seed}: {out}"
    assert (workdir / "checkpoints" / saved.group(1)).is_dir()

  code, out, err = _finish(_main(workdir, data_dir, *args))
  assert code == 0, err[-3000:]
  if saved is not None:
    assert f"at step {saved.group(1)}" in out  # "Resumed from ... at step N"
  code, expected_out, err = _finish(straight)
  assert code == 0, err[-3000:]
  final = [re.sub(r", examples_per_second=[\d.]+", "", o.splitlines()[-1])  # less the timing
           for o in (out, expected_out)]
  assert final[0] == final[1], f"seed {seed}"  # Final:
  interrupted, uninterrupted = _scalars(workdir), _scalars(tmp_path / "straight")
  for tag in ("train_loss", "eval_loss", "eval_top1"):
    steps = [s for s, _ in interrupted[tag]]
    assert len(steps) == len(set(steps)), f"seed {seed}: {tag} written twice: {steps}"
    np.testing.assert_allclose(sorted(interrupted[tag]), sorted(uninterrupted[tag]),
                               rtol=0, atol=1e-6, err_msg=f"seed {seed}")


def test_sigterm_while_a_finished_run_shuts_down_exits_0(tmp_path, data_dir):
  """Python restores SIGTERM's default action while it shuts down (about a second after
  the Final: line here); a signal then must not turn a finished run into status -15."""
  process = _main(tmp_path, data_dir)
  for line in process.stdout:
    if line.startswith("Final:"):
      break
  time.sleep(0.3)
  process.send_signal(signal.SIGTERM)
  code, _, err = _finish(process)
  assert code == 0, err[-3000:]
