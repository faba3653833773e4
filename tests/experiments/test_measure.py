"""experiments.measure: time on the device (trace reading, CUPTI fallback), the calibration
rows' arithmetic, and the commit each result records."""

import json
import subprocess
import types

import jax
import jax.numpy as jnp
import pytest

from experiments import measure

# An XSpace as a GPU profile writes it: a device plane whose stream lines hold kernels and
# copies, derived lines (XLA Ops) that repeat them, and a second GPU; the host plane.
_GPU_XSPACE = """
planes { id: 1 name: "/device:GPU:1"
  lines { id: 3 name: "Stream #3(Compute)" timestamp_ns: 0
    events { metadata_id: 1 offset_ps: 0 duration_ps: 7000000 } } }
planes { id: 2 name: "/device:GPU:0"
  lines { id: 7 name: "Stream #7(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 2000000 }
    events { metadata_id: 2 offset_ps: 3000000 duration_ps: 1000000 }
    events { metadata_id: 1 offset_ps: 9000000 duration_ps: 2500000 } }
  lines { id: 9 name: "Stream #9(MemcpyD2D)" timestamp_ns: 1000
    events { metadata_id: 3 offset_ps: 13000000 duration_ps: 1500000 } }
  lines { id: 8 name: "XLA Ops" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 99000000 } }
  lines { id: 10 name: "Launch Stats" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 99000000 } }
  event_metadata { key: 1 value { id: 1 name: "loop_fusion" } }
  event_metadata { key: 2 value { id: 2 name: "gemm" } }
  event_metadata { key: 3 value { id: 3 name: "MemcpyD2D" } } }
planes { id: 4 name: "/host:CPU"
  lines { id: 1 name: "python" timestamp_ns: 0
    events { metadata_id: 1 offset_ps: 0 duration_ps: 50000000 } }
  event_metadata { key: 1 value { id: 1 name: "PjitFunction(f)" } } }
"""


def _event(start, duration, **stats):
  return types.SimpleNamespace(start_ns=start, duration_ns=duration, stats=list(stats.items()))


def _plane(name, **lines):
  return types.SimpleNamespace(name=name, lines=[
      types.SimpleNamespace(name=line, events=events) for line, events in lines.items()])


def test_gpu_device_time_is_the_stream_lines_of_the_first_device_plane():
  planes = jax.profiler.ProfileData.from_text_proto(_GPU_XSPACE).planes
  events = measure.device_events(planes, "gpu")
  # GPU:0 before GPU:1; its kernels and the copy; not the derived XLA Ops / Launch Stats lines.
  assert sorted(events) == [(1000.0, 2000.0), (4000.0, 1000.0), (10000.0, 2500.0),
                            (14000.0, 1500.0)]
  # Two calls of two events each: [2 + 1, 2.5 + 1.5] µs.
  assert measure.per_call_seconds(events, 2) == pytest.approx([3e-6, 4e-6])
  assert measure.device_events(planes, "tpu") == []


def test_tpu_device_time_is_the_xla_modules_line():
  planes = [_plane("/host:CPU", python=[_event(0, 99)]),
            _plane("/device:TPU:0", **{"XLA Ops": [_event(0, 5), _event(10, 5)],
                                       "XLA Modules": [_event(0, 8), _event(10, 9)]})]
  events = measure.device_events(planes, "tpu")
  assert measure.per_call_seconds(events, 2) == pytest.approx([8e-9, 9e-9])


def test_cpu_trace_events_are_the_xla_thunks():
  planes = [_plane("/host:CPU", python=[_event(0, 500)],
                   pool=[_event(10, 40, hlo_module="jit_f"), _event(60, 0),
                         _event(70, 30, hlo_module="jit_f")])]
  assert measure.device_events(planes, "cpu") == [(10, 40), (70, 30)]


def test_per_call_seconds_splits_equal_groups_in_start_order_or_gives_the_mean():
  events = [(30, 4.0), (0, 1.0), (10, 2.0), (20, 3.0)]
  assert measure.per_call_seconds(events, 2) == pytest.approx([3e-9, 7e-9])
  assert measure.per_call_seconds(events, 4) == pytest.approx([1e-9, 2e-9, 3e-9, 4e-9])
  assert measure.per_call_seconds(events, 3) == pytest.approx([10e-9 / 3])
  with pytest.raises(ValueError, match="no device events"):
    measure.per_call_seconds([], 2)


def test_a_real_cpu_trace_gives_one_time_per_call():
  x = jnp.ones((128, 128))
  compiled = jax.jit(lambda x: jnp.tanh(x @ x) * 2).lower(x).compile()
  seconds = measure.trace_seconds(compiled, (x,), 3)
  assert len(seconds) == 3 and all(0 < s < 1 for s in seconds)


def _no_timing_cache(monkeypatch, value=None):
  measure.timing.cache_clear()
  if value is None:
    monkeypatch.delenv(measure.TIMING_ENV, raising=False)
  else:
    monkeypatch.setenv(measure.TIMING_ENV, value)


def test_timing_method_by_platform_and_forced(monkeypatch):
  try:
    _no_timing_cache(monkeypatch)
    t = measure.timing()
    assert t["method"] == "wall" and t["platform"] == "cpu" and t["l2_bytes"] is None
    _no_timing_cache(monkeypatch, "trace")
    assert measure.timing()["method"] == "trace"
    x = jnp.ones((64,))
    compiled = jax.jit(lambda x: x * 3).lower(x).compile()
    times = measure.time_side_by_side({"f": (compiled, (x,)), "py": (lambda: None, ())}, 4)
    assert times["f"]["method"] == "trace" and len(times["f"]["samples"]) == 4
    assert times["py"]["method"] == "wall"  # not a JAX program: wall time
    _no_timing_cache(monkeypatch, "nope")
    with pytest.raises(ValueError, match="EXPERIMENTS_TIMING"):
      measure.timing()
  finally:
    measure.timing.cache_clear()


def test_a_program_the_method_fails_on_is_timed_otherwise_and_listed(monkeypatch):
  def fails(compiled, args, calls):
    raise RuntimeError("Kernel names are not consistent across iterations")

  try:
    _no_timing_cache(monkeypatch, "trace")
    monkeypatch.setitem(measure.DEVICE_SECONDS, "trace", fails)
    monkeypatch.setattr(measure, "FALLBACKS", [])
    x = jnp.ones((8,))
    times = measure.time_side_by_side({"f": (jax.jit(lambda x: x - 1).lower(x).compile(),
                                             (x,))}, 3)
    assert times["f"]["method"] == "wall" and len(times["f"]["samples"]) == 3
    assert measure.FALLBACKS == ["f: trace failed (RuntimeError: Kernel names are not "
                                 "consistent across iterations)"]
    text = "\n".join(measure.timing_lines({"timing": measure.timing(), "rows": [],
                                           "fallbacks": measure.FALLBACKS}))
    assert "Timed otherwise: f: trace failed" in text
  finally:
    measure.timing.cache_clear()


def test_cupti_is_probed_and_its_absence_is_one_line():
  # No CUDA here: mosaic's CUPTI profiler refuses; the fallback says why.
  why = measure._probe("cupti")  # pylint: disable=protected-access
  assert why and "\n" not in why
  assert measure._probe("trace") is None  # pylint: disable=protected-access


def test_calibration_rows_compare_with_the_device_figures():
  rows = measure.calibration_rows(2e-4, 2**26, 1.5e-3, 8192, "NVIDIA H100 80GB HBM3")
  bandwidth, matmul = rows
  assert bandwidth["work"] == 8 * 2**26 and bandwidth["rate"] == pytest.approx(8 * 2**26 / 2e-4)
  assert bandwidth["fraction"] == pytest.approx(8 * 2**26 / 2e-4 / 3.35e12)
  assert matmul["rate"] == pytest.approx(2 * 8192**3 / 1.5e-3)
  assert matmul["fraction"] == pytest.approx(2 * 8192**3 / 1.5e-3 / 989.4e12)
  assert all(r["fraction"] is None for r in measure.calibration_rows(1, 8, 1, 2, "cpu"))


def test_calibration_and_its_markdown():
  calibrated = measure.calibration("tiny")
  assert [r["program"] for r in calibrated["rows"]] == ["elementwise pass x·2", "matmul"]
  text = "\n".join(measure.timing_lines(calibrated))
  assert "## Timing and calibration" in text and "host wall time" in text
  assert "| matmul | 64² bfloat16 |" in text
  h100 = {**calibrated, "timing": {**calibrated["timing"], "method": "trace",
                                   "why": "cupti not available (RuntimeError: x)",
                                   "l2_bytes": 50 * 2**20}}
  text = "\n".join(measure.timing_lines(h100))
  assert "jax.profiler" in text and "cupti not available" in text and "50 MiB L2" in text
  assert measure.timing_lines(None) == []


def test_results_record_the_commit(tmp_path, monkeypatch):
  measure.commit.cache_clear()
  try:
    sha = measure.commit()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=measure.REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert sha.removesuffix("+dirty") == head
    measure.write(tmp_path, "t", {"rows": []}, "# t\n")
    assert json.loads((tmp_path / "t.json").read_text())["commit"] == sha
    measure.write(tmp_path, "l", [1, 2], "# l\n")  # a list is written as it is
    assert json.loads((tmp_path / "l.json").read_text()) == [1, 2]
    assert measure.machine()["commit"] == sha
    assert measure.short_commit(f"{head}+dirty") == f"{head[:12]}+dirty"
    assert measure.short_commit(None) == "unknown"

    def no_git(*args, **kwargs):
      raise FileNotFoundError("git")

    monkeypatch.setattr(measure.subprocess, "run", no_git)
    measure.commit.cache_clear()
    monkeypatch.delenv(measure.COMMIT_ENV, raising=False)
    assert measure.commit() is None
    measure.commit.cache_clear()
    monkeypatch.setenv(measure.COMMIT_ENV, "abc123")
    assert measure.commit() == "abc123"
  finally:
    measure.commit.cache_clear()
