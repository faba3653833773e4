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

from attention_lab.checkpoints import backbone_weights
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


def _main(workdir, data_dir, *args, module="attention_lab.main", env=None, **popen):
  return subprocess.Popen(
      [sys.executable, "-m", module, "--config=configs/default.py:tiny",
       f"--workdir={workdir}", f"--config.dataset.data_dir={data_dir}", *args],
      cwd=REPO, env={**_env(), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, **popen)


def _two_processes(workdir, data_dir, *args, **kwargs):
  """Processes 0 and 1 of one run on 127.0.0.1."""
  port = _free_port()
  return [_main(workdir, data_dir, *args, f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2", f"--process_id={i}", **kwargs) for i in range(2)]


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
  workdir = tmp_path / "two"
  processes = _two_processes(workdir, data_dir, *args)

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


def test_two_processes_make_no_collective_on_a_plain_step(tmp_path, data_dir):
  """Every cross-host collective of a two-process run falls before its first step, at a
  log, evaluation or checkpoint step, or at its end; jax's preemption sync point is asked
  before every step (a local check: the coordination service acts only on a notice), by
  the loop alone, with counts 1, 2, 3, ..."""
  steps, log, evaluate, save = 24, 8, 12, 12
  args = [f"--config.num_train_steps={steps}", f"--config.log_every_steps={log}",
          f"--config.eval_every_steps={evaluate}", f"--config.checkpoint_every_steps={save}"]
  logs = tmp_path / "collectives"
  processes = _two_processes(tmp_path / "run", data_dir, *args,
                             module="tests.train.logged_collectives",
                             env={"COLLECTIVES_LOG": str(logs)})
  for code, _, err in [_finish(p) for p in processes]:
    assert code == 0, err[-3000:]
  boundaries = {0, steps} | {s for s in range(1, steps) if not (s % log and s % evaluate
                                                                 and s % save)}
  for process in range(2):
    calls = [line.split() for line in (tmp_path / f"collectives.{process}").read_text()
             .splitlines()]
    at = sorted({int(c[1]) for c in calls if c[0] != "reached_preemption_sync_point"})
    assert set(at) <= boundaries, f"process {process}: collectives after steps {at}"
    asked = [int(c[2]) for c in calls if c[0] == "reached_preemption_sync_point"]
    assert asked == list(range(1, steps + 1)), asked  # before each step, counted


def test_sigterm_to_one_of_two_processes_stops_both_at_one_step(tmp_path, data_dir):
  """A preemption notice (SIGTERM) reaches process 1 only: both processes stop after the
  same step, save it and exit 0. Resumed for two more steps, the run is bit-exact with one
  that was never interrupted."""
  args = ["--config.num_train_steps=1000", "--config.log_every_steps=1",  # stops long before
          "--config.eval_every_steps=1000", "--config.checkpoint_every_steps=1000"]
  workdir = tmp_path / "interrupted"
  preempted = _two_processes(workdir, data_dir, *args)
  seen = []
  for line in preempted[0].stdout:  # process 0's progress lines
    seen.append(line)
    if line.startswith("step 5/"):
      break
  preempted[1].send_signal(signal.SIGTERM)
  results = [_finish(p) for p in preempted]
  for code, _, err in results:
    assert code == 0, err[-3000:]
  out = "".join(seen) + results[0][1]
  saved = re.search(r"SIGTERM: saved step (\d+)", out)
  assert saved, out[-2000:]
  step = int(saved.group(1))
  assert [p.name for p in (workdir / "checkpoints").iterdir()] == [str(step)]
  # Process 0 stopped where process 1 did: its last progress line is of the saved step.
  assert re.findall(r"^step (\d+)/", out, re.M)[-1] == str(step)

  until = f"--until_step={step + 2}"
  runs = [_two_processes(w, data_dir, *args, until) for w in (workdir, tmp_path / "straight")]
  results = [[_finish(p) for p in run] for run in runs]
  for code, _, err in results[0] + results[1]:
    assert code == 0, err[-3000:]
  resumed, straight = (r[0][1] for r in results)
  assert f"at step {step}" in resumed
  final = [re.sub(r"examples_per_second=[\d.]+(, )?", "", o.splitlines()[-1])  # less timing
           for o in (resumed, straight)]
  assert final[0] == final[1] and final[0].startswith("Final: learning_rate=")
  assert (sorted(_scalars(workdir)["train_loss"])
          == sorted(_scalars(tmp_path / "straight")["train_loss"]))
  ours, theirs = (backbone_weights.read(str(w / "checkpoints" / str(step + 2)), scope="model")
                  for w in (workdir, tmp_path / "straight"))
  assert ours.keys() == theirs.keys() and len(ours) > 10
  for key, value in ours.items():  # every parameter and BatchNorm statistic
    np.testing.assert_array_equal(value, theirs[key], err_msg=str(key))


def _catches_sigterm(pid: int) -> bool:
  """Whether process `pid` has a handler for SIGTERM (Linux: /proc/PID/status SigCgt)."""
  status = pathlib.Path(f"/proc/{pid}/status").read_text()
  caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M).group(1), 16)
  return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_sigterm_to_one_of_two_processes_during_its_imports(tmp_path, data_dir):
  """The signal reaches process 1 while it imports, before jax's notifier exists: main's
  early handler keeps it and hands it on, and both processes stop at one step and exit 0
  (a disagreement would leave one waiting for the other's next step)."""
  args = ["--config.num_train_steps=1000", "--config.eval_every_steps=1000",
          "--config.checkpoint_every_steps=1000"]
  processes = _two_processes(tmp_path, data_dir, *args)
  deadline = time.monotonic() + 60
  while not _catches_sigterm(processes[1].pid) and time.monotonic() < deadline:
    time.sleep(0.01)
  processes[1].send_signal(signal.SIGTERM)
  results = [_finish(p) for p in processes]
  for code, _, err in results:
    assert code == 0, err[-3000:]
  saved = re.search(r"SIGTERM: saved step (\d+)|SIGTERM before the first step", results[0][1])
  assert saved, results[0][1][-2000:]
  assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [saved.group(1)] * bool(
      saved.group(1))


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
