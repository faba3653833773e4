"""The entry point: on the CPU, a step's freed temporaries stay in the process instead of
being unmapped and faulted in again at the next step; --until_step and --json; runs where
TensorFlow cannot be imported."""

import json
import pathlib
import re
import subprocess
import sys

from attention_lab import main
from attention_lab.train import run_summary

REPO = pathlib.Path(__file__).parents[1]

# A program with a 64 MB intermediate (above glibc's 32 MB mmap limit), run 10 times after 10
# warm-up runs; prints the fewest minor page faults of a run.
PROGRAM = """
import resource, sys
import jax, jax.numpy as jnp
if sys.argv[1] == "keep":  # as attention_lab.main does
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  from attention_lab import main
  assert main.keep_freed_host_memory()
f = jax.jit(lambda a, b: (a @ b) @ a)  # (4096, 4096) float32 in between
a, b = jnp.ones((4096, 16)), jnp.ones((16, 4096))
for _ in range(10):  # the heap grows to its working size
  f(a, b).block_until_ready()
faults = []
for _ in range(10):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(a, b).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(faults))
"""


def _fewest_faults_of_a_run(mode: str) -> int:
  result = subprocess.run([sys.executable, "-c", PROGRAM, mode], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return int(result.stdout.split()[-1])


def test_cpu_steps_reuse_their_freed_temporaries():
  """Without the set-up every run faults its 64 MB in again (16k pages of 4 KiB); with it,
  a run can fault none."""
  assert _fewest_faults_of_a_run("default") > 8000
  assert _fewest_faults_of_a_run("keep") < 100


def test_until_step_0_evaluates_the_initial_model_and_writes_the_final_line_as_json(tmp_path):
  """The start of a learning curve: no step, the evaluation of the initial weights, and the
  JSON holds the Final: line's metrics at full precision."""
  done = subprocess.run(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={tmp_path / 'w'}", "--until_step=0", f"--json={tmp_path / 'final.json'}"],
      cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  line = [l for l in done.stdout.splitlines() if l.startswith("Final: ")][-1]
  printed = dict(item.split("=") for item in line[len("Final: "):].split(", "))
  final = json.loads((tmp_path / "final.json").read_text())
  assert set(final) == set(printed) and "eval_top1" in final
  assert "examples_per_second" not in final  # no step was timed
  for key, value in final.items():
    assert f"{value:.4f}" == printed[key]
  assert not list((tmp_path / "w" / "checkpoints").glob("[0-9]*"))


def test_the_json_adds_the_median_of_each_perf_scalar(tmp_path):
  record = run_summary.RunSummary(str(tmp_path))
  for step, speed in ((2, 10.0), (4, 30.0), (6, 14.0)):
    record.add_perf(step, {"perf/examples_per_second": speed})
  record.save()
  resumed = run_summary.RunSummary(str(tmp_path), start_step=6)  # as a re-run reads it back
  main.write_final(str(tmp_path / "final.json"), {"eval_top1": 0.5}, resumed)
  assert json.loads((tmp_path / "final.json").read_text()) == {
      "eval_top1": 0.5, "perf/examples_per_second": 14.0}


def test_a_synthetic_run_without_tensorflow(tmp_path):
  """The default experiment's speed run where TensorFlow cannot be imported (as on the lent
  GPU image): random batches on the devices, the train step's speed, no evaluation."""
  from tests import no_tensorflow  # pylint: disable=g-import-not-at-top
  result = no_tensorflow.run(
      ["-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={tmp_path}", "--config.dataset.synthetic=True",
       f"--json={tmp_path / 'final.json'}"], cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  final = json.loads((tmp_path / "final.json").read_text())
  assert final["train_loss"] > 0 and final["perf/examples_per_second"] > 0
  assert not any(k.startswith("eval_") for k in final)
  assert (tmp_path / "checkpoints" / "4").is_dir() and list(tmp_path.glob("events.out.*"))


def test_train_evaluate_and_resume_from_prepared_data_without_tensorflow(tmp_path):
  """The default experiment from digits prepared beforehand (ArrayRecord), where TensorFlow
  cannot be imported (TFDS can: it reads the prepared folder's metadata): trained to step
  2, resumed to the end and evaluated, with the Final: line of a run that has TensorFlow;
  decoding in a worker process, which is blocked from TensorFlow too."""
  from attention_lab.data import prepare  # pylint: disable=g-import-not-at-top
  from tests import no_tensorflow  # pylint: disable=g-import-not-at-top
  data_dir = tmp_path / "tfds"
  prepare.prepare(prepare.dataset_config("digits", data_dir))
  args = ["-m", "attention_lab.main", "--config=configs/default.py:tiny",
          f"--config.dataset.data_dir={data_dir}", "--config.dataset.workers=1"]
  with_tf = subprocess.Popen([sys.executable, *args, f"--workdir={tmp_path / 'tf'}"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  workdir = tmp_path / "no_tf"
  first = no_tensorflow.run([*args, f"--workdir={workdir}", "--until_step=2"], cwd=REPO,
                            timeout=300, blocked=no_tensorflow.TENSORFLOW_ONLY)
  assert first.returncode == 0, first.stderr[-3000:]
  assert (workdir / "checkpoints" / "2").is_dir() and not (workdir / "checkpoints" / "4").exists()
  second = no_tensorflow.run([*args, f"--workdir={workdir}"], cwd=REPO, timeout=300,
                             blocked=no_tensorflow.TENSORFLOW_ONLY)
  assert second.returncode == 0, second.stderr[-3000:]
  assert f"Resumed from {workdir}/checkpoints at step 2" in second.stdout
  expected, err = with_tf.communicate(timeout=300)
  assert with_tf.returncode == 0, err[-3000:]
  final = [[l for l in out.splitlines() if l.startswith("Final: ")][-1] for out in
           (second.stdout, expected)]
  final = [re.sub(r", examples_per_second=[\d.]+", "", line) for line in final]
  assert final[0] == final[1] and "eval_top1=" in final[0]
