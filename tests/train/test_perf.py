"""Speed accounting (perf/ scalars, MFU), the persistent compilation cache and the profiler."""

import pathlib
import stat
import subprocess
import sys

import jax
import numpy as np
import pytest

from attention_lab import cost, devices
from attention_lab.train import compilation_cache, microbatch, perf, profiling
from attention_lab.train.validation import validate_config
from tests.events import written_points
from attention_lab.train import trainer as trainer_lib
from configs import default
from tests.train.test_system import _env

REPO = pathlib.Path(__file__).parents[2]
PERF_TAGS = ("perf/examples_per_second", "perf/examples_per_second_per_device",
             "perf/step_seconds", "perf/tflops_per_device")


def tiny_config(data_dir, **overrides):
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  config.model.dropout = 0.0
  config.update(overrides)
  return config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_dir):
  """One tiny default run on the 8-device CPU mesh, tracing steps 1 → 3."""
  workdir = str(tmp_path_factory.mktemp("run"))
  trainer = trainer_lib.Trainer(tiny_config(data_dir, profile_steps=(1, 3)), workdir)
  trainer.run()
  return trainer, workdir


def test_mfu_arithmetic_against_a_hand_computation():
  peak = devices.peak_flops("NVIDIA H100 80GB HBM3", "bfloat16")
  speed = perf.Speed(global_batch=256, num_devices=8, flops_per_device=3e12, peak_flops=peak)
  out = speed.scalars(steps=10, seconds=4.0)
  # 10 steps in 4 s: 0.4 s a step, 256 / 0.4 = 640 examples/s, 80 per device;
  # 3e12 FLOPs / 0.4 s = 7.5 TFLOP/s per device; H100 SXM bf16 dense peak 989.4 TFLOP/s.
  assert out["perf/step_seconds"] == pytest.approx(0.4)
  assert out["perf/examples_per_second"] == pytest.approx(640.0)
  assert out["perf/examples_per_second_per_device"] == pytest.approx(80.0)
  assert out["perf/tflops_per_device"] == pytest.approx(7.5)
  assert out["perf/mfu"] == pytest.approx(7.5 / 989.4)
  assert perf.console(256, 2.5, out) == "640.0 examples/s  MFU 0.8%"


def test_no_mfu_without_a_peak_or_a_flop_count():
  cpu = perf.Speed(64, 1, 1e9, devices.peak_flops("cpu", "float32"))
  assert set(cpu.scalars(2, 1.0)) == set(PERF_TAGS)
  uncounted = perf.Speed(64, 1, None, 1e12)
  assert "perf/tflops_per_device" not in uncounted.scalars(2, 1.0)
  assert perf.console(64, 1.0, cpu.scalars(2, 1.0)) == "64.0 examples/s"


def test_a_short_default_run_writes_every_perf_tag(finished_run):
  trainer, workdir = finished_run
  points = written_points(workdir)
  for tag in PERF_TAGS:
    assert sorted(points.get(tag, {})) == [2, 4], tag  # every log step (tiny: 2 and 4)
  assert "perf/mfu" not in points  # no peak for a CPU
  batch, num_devices = trainer.config.batch_size, trainer.mesh.size
  assert num_devices == 8
  for step in (2, 4):
    value = {tag: points[tag][step] for tag in PERF_TAGS + ("steps_per_sec",)}
    per_second = value["perf/examples_per_second"]
    assert per_second == pytest.approx(batch * value["steps_per_sec"], rel=1e-5)
    assert value["perf/examples_per_second_per_device"] == pytest.approx(
        per_second / num_devices, rel=1e-5)
    assert value["perf/step_seconds"] == pytest.approx(batch / per_second, rel=1e-5)
    assert value["perf/tflops_per_device"] > 0
  assert trainer.median_examples_per_second() == pytest.approx(
      np.median([points["perf/examples_per_second"][s] for s in (2, 4)]), rel=1e-5)


def _speed(data_dir, workdir, **overrides):
  trainer = trainer_lib.Trainer(tiny_config(data_dir, **overrides), str(workdir))
  batch = trainer.global_batch(next(trainer.task.train_batches(0)))
  return trainer, batch, perf.Speed.of_step(trainer.task, trainer.train_step, trainer.state,
                                            batch, trainer.mesh, trainer.config)


def test_flops_are_per_device_and_the_cpu_count_stands_in(data_dir, tmp_path, monkeypatch):
  _, _, one = _speed(data_dir, tmp_path / "one", mesh={"num_devices": 1})
  eight_trainer, batch, eight = _speed(data_dir, tmp_path / "eight", mesh={"num_devices": 8})
  assert eight.flops_per_device == pytest.approx(one.flops_per_device / 8, rel=0.02)
  # A backend without a count (GPU): one CPU device's count of the whole step, over 8.
  real = cost.xla_cost
  monkeypatch.setattr(cost, "xla_cost", lambda stage: (
      {} if isinstance(stage, jax.stages.Compiled) else real(stage)))
  stand_in = perf.Speed.of_step(eight_trainer.task, eight_trainer.train_step,
                                eight_trainer.state, batch, eight_trainer.mesh,
                                eight_trainer.config)
  # The unoptimised program's count: the same dots and convolutions, elementwise work before
  # XLA's simplifications (2% fewer FLOPs on this tiny network, 0.7% on the default one).
  assert stand_in.flops_per_device == pytest.approx(one.flops_per_device / 8, rel=0.03)


def test_microbatches_do_the_flops_of_one_pass(data_dir, tmp_path, monkeypatch):
  """TFLOP/s per example with k = 4 micro-batches is k = 1's: the same FLOPs per step, so the
  same rate at the same step time; unrolled (the CPU) and as a scan (accelerators), where
  XLA alone counts one micro-batch."""
  _, _, whole = _speed(data_dir, tmp_path / "k1", mesh={"num_devices": 1})
  _, _, unrolled = _speed(data_dir, tmp_path / "k4", mesh={"num_devices": 1}, microbatches=4)
  monkeypatch.setattr(microbatch, "UNROLLED_ON_CPU", 0)
  _, _, scanned = _speed(data_dir, tmp_path / "k4s", mesh={"num_devices": 1}, microbatches=4)
  for speed in (whole, unrolled, scanned):  # 10 steps in 2 s
    scalars = speed.scalars(10, 2.0)
    speed.per_example = (scalars["perf/tflops_per_device"] * scalars["perf/step_seconds"]
                         / speed.global_batch)
  assert unrolled.per_example == pytest.approx(whole.per_example, rel=0.01)
  assert scanned.per_example == pytest.approx(whole.per_example, rel=0.01)


def test_profile_steps_writes_a_trace(finished_run):
  _, workdir = finished_run
  traces = list(pathlib.Path(workdir, "profile").rglob("*.xplane.pb"))
  assert traces and traces[0].stat().st_size > 0


@pytest.mark.parametrize("value", [(3,), (0, 2), (3, 3), (4, 2), (1.0, 2), ("a", "b"), (True, 2)])
def test_profile_steps_rejects(value):
  config = default.get_config("tiny")
  config.profile_steps = value
  with pytest.raises(ValueError, match=r"^profile_steps = .*: must be two ints \(start, end\) "
                     r"with 0 < start < end"):
    validate_config(config)


@pytest.mark.parametrize("value", [(), ("",), None, (2, 5)])
def test_profile_steps_accepts(value):
  config = default.get_config("tiny")
  config.profile_steps = value
  assert profiling.steps(config) == (None if value != (2, 5) else (2, 5))


@pytest.fixture
def restore_jax_cache_config():
  names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
           "jax_persistent_cache_min_compile_time_secs")
  saved = {n: getattr(jax.config, n) for n in names}
  yield
  for name, value in saved.items():
    jax.config.update(name, value)


def test_cache_directory_is_private(tmp_path, monkeypatch, restore_jax_cache_config):
  del restore_jax_cache_config
  monkeypatch.delenv(compilation_cache.ENV, raising=False)
  path = tmp_path / "a" / "cache"
  assert compilation_cache.enable(str(path)) == str(path)
  assert stat.S_IMODE(path.stat().st_mode) == 0o700
  assert jax.config.jax_compilation_cache_dir == str(path)
  assert jax.config.jax_enable_compilation_cache
  shared = tmp_path / "shared"
  shared.mkdir()
  shared.chmod(0o777)
  with pytest.raises(ValueError, match=r"^compilation_cache_dir = .*shared': writable by "
                     r"other users \(mode 777\)"):
    compilation_cache.enable(str(shared))


def test_cache_off_with_an_empty_string_and_the_env_variable_overrides(
    tmp_path, monkeypatch, restore_jax_cache_config):
  del restore_jax_cache_config
  monkeypatch.delenv(compilation_cache.ENV, raising=False)
  assert compilation_cache.enable("") is None
  assert not jax.config.jax_enable_compilation_cache
  monkeypatch.setenv(compilation_cache.ENV, str(tmp_path / "env"))
  assert compilation_cache.enable(str(tmp_path / "config")) == str(tmp_path / "env")
  assert not (tmp_path / "config").exists()
  monkeypatch.setenv(compilation_cache.ENV, "")
  assert compilation_cache.enable(str(tmp_path / "config")) is None
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert compilation_cache.default_dir() == str(
      tmp_path / "xdg" / "attention_lab" / "jax_compilation_cache")


# `python -m attention_lab.main`, counting the persistent cache's hits (printed at exit).
COUNTING_MAIN = """
import atexit, runpy, sys
from jax import monitoring
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
atexit.register(lambda: print("cache hits:", len(hits)))
sys.argv = ["attention_lab.main"] + sys.argv[1:]
runpy.run_module("attention_lab.main", run_name="__main__")
"""


def test_a_second_run_in_a_fresh_process_hits_the_cache(tmp_path, data_dir):
  cache = tmp_path / "cache"
  # One CPU device per process (a smaller program to compile than the suite's 8).
  env = {k: v for k, v in _env().items() if k != compilation_cache.ENV}

  def run(name, cache_dir):
    result = subprocess.run(
        [sys.executable, "-c", COUNTING_MAIN, "--config=configs/default.py:tiny",
         f"--workdir={tmp_path / name}", f"--config.dataset.data_dir={data_dir}",
         f"--config.compilation_cache_dir={cache_dir}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return int(result.stdout.rsplit("cache hits:", 1)[1])

  assert run("cold", cache) == 0
  entries = sorted(p.name for p in cache.iterdir())
  assert any(name.startswith("jit_train_step-") for name in entries), entries
  # Every program the first run wrote is read, not compiled, by the second (which may
  # write a few more: a compile time near the threshold varies on a busy machine).
  assert run("warm", cache) >= len(entries)
