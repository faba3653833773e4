"""experiments.accelerator_report: its plan, budget, deadline, summary and archive, and the
command itself as on the lent GPU image (TensorFlow unimportable, tests/no_tensorflow.py).

The report's logic runs against stand-ins for the parts' processes (what main's --json and the
efficiency tables write: tests/test_main.py, tests/experiments/test_efficiency.py). The
command runs for real twice, shared between tests: the whole `--smoke` report with an archive,
and `--budget_s=60 --smoke`."""

import ast
import json
import pathlib
import subprocess
import sys
import tarfile
import time

import pytest
from packaging.requirements import Requirement

from attention_lab import cli
from experiments import accelerator_report as report
from experiments import runs
from tests import no_tensorflow

REPO = pathlib.Path(__file__).resolve().parents[2]
TABLES = {"sao_table2", "sao_table2_bfloat16", "kao_table1", "kao_table1_bfloat16",
          "ham_table3", "isa_tables", "aa_table9", "sao_table5", "sao_table5_bfloat16",
          "performance_goals", "networks"}
# Synthetic batches (the speed runs' input) are a config field of the training runs.


def test_plan_orders_every_part_by_value_with_valid_commands(tmp_path):
  parts = report.plan(tmp_path, smoke=True, tests=True)
  names = [p.name for p in parts]
  # By value: the device-time operator tables with the calibration rows, then the networks
  # beside PyTorch (after the default run), the operator tests, the rest.
  assert names[:4] == ["sao_table2", "sao_table2_bfloat16", "kao_table1", "kao_table1_bfloat16"]
  assert names[4:8] == ["default", "networks", "tests", "ham_table3"]
  assert [p.tier for p in parts] == sorted(p.tier for p in parts)
  by_name = {p.name: p for p in parts}
  assert {n for n, p in by_name.items() if p.kind == "table"} == TABLES
  assert {n for n, p in by_name.items() if p.kind == "run"} == set(report.RUNS)
  assert set(report.EXPECTED_S) == set(names)
  # The goals table reads SAO / KAO's json; the GAN's FID the default run's classifier.
  assert names.index("performance_goals") > names.index("kao_table1_bfloat16")
  assert names.index("gan") > names.index("default")
  assert "tests" not in {p.name for p in report.plan(tmp_path, smoke=True)}
  assert all(p.config.endswith(":tiny") for p in parts if p.config)
  assert "--config.dtype=bfloat16" in by_name["sao_table5_bfloat16"].overrides
  assert "--config.resume=False" in by_name["networks"].overrides
  assert "--config.resume=True" in {p.name: p for p in report.plan(
      tmp_path, smoke=True, resume=True)}["networks"].overrides
  full = {p.name: p for p in report.plan(tmp_path, smoke=False)}
  assert not any(p.config.endswith(":tiny") for p in full.values() if p.config)
  assert f"--config.num_train_steps={report.RUN_STEPS}" in full["default"].overrides
  assert any(o.startswith("--config.eval.classifier_workdir=") for o in full["gan"].overrides)
  for p in [*by_name.values(), *full.values()]:
    if p.kind == "run":
      assert report.SYNTHETIC in p.overrides  # the speed runs time the step alone
    if p.kind == "tests":
      continue
    config = cli.load_config(p.config, root=str(REPO))
    cli._check_overrides(config, p.overrides)  # pylint: disable=protected-access


def test_device_slug():
  assert report.device_slug("gpu", "NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
  assert report.device_slug("tpu", "TPU v5 lite") == "tpu_v5_lite"
  assert report.device_slug("cpu", "cpu") == "cpu"


def test_an_untested_version_is_one_line_and_the_peak_entry_is_named():
  lines = report.untested({"python": "3.11.7", "jax": "0.12.0", "flax": "0.12.8"})
  assert len(lines) == 1 and lines[0].startswith("jax 0.12.0: not tested")
  assert report.untested({"jax": "0.10.9"}) == report.untested({"jax": "0.11.2"}) == []
  assert "'H100' of attention_lab/devices.py" in report.peak_entry("NVIDIA H100 80GB HBM3")
  assert "bfloat16 989.4 TFLOP/s" in report.peak_entry("NVIDIA H100 80GB HBM3")
  assert report.peak_entry("cpu").endswith("no MFU")


def test_setup_admits_the_tested_jax_releases_and_no_other():
  """setup.py's jax range (and its tpu / gpu extras') against the minors TESTED_WITH names."""
  tree = ast.parse((REPO / "setup.py").read_text())
  keywords = {k.arg: ast.literal_eval(k.value) for node in ast.walk(tree)
              if isinstance(node, ast.Call) for k in node.keywords
              if k.arg in ("install_requires", "extras_require")}
  extras = keywords["extras_require"]
  ranges = [r.specifier for r in map(Requirement, (*keywords["install_requires"],
                                                  *extras["tpu"], *extras["gpu"]))
            if r.name == "jax"]
  assert len(ranges) == 3
  for minor in ("0.9", "0.10", "0.11", "0.12", "0.13"):
    admitted = {spec.contains(f"{minor}.2") for spec in ranges}
    assert admitted == {minor in report.TESTED_WITH["jax"]}, minor


def test_budget_scales_the_estimates_by_the_measured_parts():
  budget = report.Budget(100.0, smoke=True, start=time.perf_counter())
  expected = report.EXPECTED_S["kao_table1"][1]
  assert budget.estimate("kao_table1") == expected and budget.fits("kao_table1")
  budget.done("sao_table2", 2 * report.EXPECTED_S["sao_table2"][1])  # twice as slow here
  assert budget.estimate("kao_table1") == pytest.approx(2 * expected)
  budget.done("sao_table2", 100 * report.EXPECTED_S["sao_table2"][1])
  assert budget.scale() == report.SCALE_LIMITS[1]
  late = report.Budget(100.0, smoke=False, start=time.perf_counter() - 100 + 20)
  assert not late.fits("default") and late.fits("aa_table9") is False  # 20 s left, 5 kept
  assert report.Budget(100.0, smoke=True, start=time.perf_counter() - 70).fits("sao_table2")


def test_a_part_past_the_deadline_is_stopped(tmp_path):
  # A process that would sleep 60 s, given 1 s: subprocess.run kills it at the deadline.
  part = report.Part("tests", "tests", "timeit", "",
                     ("-n", "1", "-r", "1", "import time; time.sleep(60)"), 1)
  start = time.perf_counter()
  status = report.run_part(part, tmp_path, seconds_left=1.0)
  assert time.perf_counter() - start < 10
  assert status["state"] == "stopped" and "budget's end" in status["error"]


def test_the_tests_part_runs_pytest_on_the_device_and_keeps_its_summary(tmp_path):
  part = report.Part("tests", "tests", "pytest", "",
                     ("tests/ops/test_boxes.py", "-p", "no:cacheprovider", "-k", "iou"), 1)
  status = report.run_part(part, tmp_path, seconds_left=120.0)
  assert status["state"] == "ok", status
  assert "passed" in status["summary"] and "deselected" in status["summary"]
  log = (tmp_path / status["log"]).read_text()
  assert "tests/ops: jax" in log and "precision 'highest'" in log  # tests/ops/conftest.py


def test_the_tests_part_spreads_over_processes_only_with_xdist(monkeypatch):
  monkeypatch.setattr(report.os, "cpu_count", lambda: 16)
  assert report.test_arguments()[-2:] == ("-n", str(report.TEST_WORKERS))
  assert report.test_arguments(workers=64)[-2:] == ("-n", "16")
  assert "-n" not in report.test_arguments(workers=1)
  monkeypatch.setattr(report.importlib.util, "find_spec",
                      lambda name, *a: None if name == "xdist" else object())
  assert report.test_arguments() == ("tests/ops", "-p", "no:cacheprovider")


def test_a_cpu_without_smoke_is_refused_in_one_line():
  done = subprocess.run([sys.executable, "-m", "experiments.accelerator_report"], cwd=REPO,
                        capture_output=True, text=True, check=False)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1].startswith("error: no GPU or TPU")
  assert "Traceback" not in done.stderr


def _fake_process(module, args, *, log=None, final=None, env=None):
  """What the part's command writes, without running it."""
  flags = dict(a[2:].split("=", 1) for a in args)
  if module == "attention_lab.main":
    workdir = pathlib.Path(flags["workdir"])
    workdir.mkdir(parents=True)
    (workdir / "config.json").write_text(json.dumps({"batch_size": 8, "num_train_steps": 4}))
    # As main's --json: the final metrics and the perf/ scalars' medians.
    pathlib.Path(flags["json"]).write_text(json.dumps({
        "eval_top1": 0.5, "examples_per_second": 12.0, "perf/examples_per_second": 12.0,
        "perf/examples_per_second_per_device": 1.5, "perf/step_seconds": 0.67,
        "perf/tflops_per_device": 1e-3}))
    output = "step 4/4\nFinal: eval_top1=0.5000, examples_per_second=12.0000\n"
  else:
    stem = pathlib.Path(flags["config"].split(":")[0]).stem
    stem += "_bfloat16" if flags.get("config.dtype") == "bfloat16" else ""
    tables = pathlib.Path(flags["config.out_dir"])
    tables.mkdir(parents=True, exist_ok=True)
    (tables / f"{stem}.md").write_text("| table |\n")
    (tables / f"{stem}.json").write_text("{}")
    output = "written\n"
  log.parent.mkdir(parents=True, exist_ok=True)
  log.write_text(output)
  return runs.Run([sys.executable, "-m", module, *args], 0, 1.0, 1.0, 0.0, 0.0,
                  json.loads(final.read_text()) if final else {}, output)


def test_a_report_writes_the_summary_tables_and_run_speed(tmp_path, monkeypatch):
  monkeypatch.setattr(runs, "run_module", _fake_process)
  env = report.environment()
  assert env["platform"] == "cpu" and env["versions"]["jax"] and "no MFU" in env["peak_flops"]
  assert env["commit"] == report.measure.commit()  # the commit the report was measured at
  parts = [p for p in report.plan(tmp_path, smoke=True) if p.name in ("aa_table9", "default")]
  statuses = report.report(env, tmp_path, parts, smoke=True)
  assert [s["state"] for s in statuses] == ["ok", "ok"]
  assert json.loads((tmp_path / "environment.json").read_text())["platform"] == "cpu"
  data = json.loads((tmp_path / "report.json").read_text())
  assert [p["name"] for p in data["parts"]] == ["default", "aa_table9"]
  run = data["runs"]["default"]
  # The medians of the run's perf/ scalars, from its --json.
  assert run["examples_per_second"] == 12.0
  assert run["tflops_per_device"] > 0 and run["mfu"] is None  # no MFU on a CPU
  assert run["batch"] == 8 and run["steps"] == 4
  text = (tmp_path / "README.md").read_text()
  assert "| aa_table9 | 4 | ok |" in text and "(tables/aa_table9.md)" in text
  assert "| default | 2 | ok |" in text and "None on this device" in text


def test_parts_that_do_not_fit_are_listed_with_their_estimate(tmp_path, monkeypatch):
  monkeypatch.setattr(runs, "run_module", _fake_process)
  env = report.environment()
  parts = report.plan(tmp_path, smoke=True)
  # 20 s left: the fake parts take 1 s each, which halves the estimates after the first
  # (SCALE_LIMITS); those still expected to take longer than the time left do not fit.
  budget = report.Budget(20.0, smoke=True, start=time.perf_counter())
  statuses = report.report(env, tmp_path, parts, smoke=True, budget=budget)
  ran = {s["name"] for s in statuses if s["state"] == "ok"}
  skipped = {s["name"]: s for s in statuses if s["state"] == "not run"}
  assert ran and skipped and ran | set(skipped) == {p.name for p in parts}
  assert report.EXPECTED_S["networks"][1] / 2 > 15 >= report.EXPECTED_S["sao_table2"][1]
  assert "networks" in skipped and "sao_table2" in ran
  assert "estimated" in skipped["networks"]["error"]
  assert "| networks | 2 | not run: `estimated" in (tmp_path / "README.md").read_text()


def test_a_second_command_resumes_the_report(tmp_path, monkeypatch):
  # Command 1 runs out of budget inside the networks part; command 2 (--resume) keeps the
  # finished parts, gives the networks part what is left, and it measures the rest.
  calls = []

  def fake(module, args, **kwargs):
    run = _fake_process(module, args, **kwargs)
    flags = dict(a[2:].split("=", 1) for a in args)
    calls.append({**flags, "env": kwargs["env"]})
    if "networks" in flags.get("config", ""):
      tables = pathlib.Path(flags["config.out_dir"])
      resumed = flags["config.resume"] == "True"
      (tables / "networks.json").write_text(json.dumps(
          {"not_run": [] if resumed else [{"label": "HamNet", "reason": "over the budget"}]}))
      (tables / "networks.md").write_text("# n\n\n## Goals\n\n- ResNet-50: met\n")
    return run

  monkeypatch.setattr(runs, "run_module", fake)
  env = report.environment()
  first = report.report(env, tmp_path, report.plan(tmp_path, smoke=True)[:6], smoke=True,
                        budget=report.Budget(1000.0, smoke=True))
  networks = next(s for s in first if s["name"] == "networks")
  assert networks["incomplete"] and "HamNet" in networks["summary"]
  budget_s = float(calls[-1]["config.budget_s"])
  assert 0 < budget_s <= 1000 - report.BUDGETED["networks"]
  text = (tmp_path / "README.md").read_text()
  assert "### Goals ([networks](tables/networks.md))" in text and "- ResNet-50: met" in text
  calls.clear()
  parts = report.plan(tmp_path, smoke=True, resume=True)[:6]
  second = report.report(env, tmp_path, parts, smoke=True, resume=True, networks_budget_s=100)
  assert [c["config"].split("/")[-1] for c in calls] == ["networks.py:tiny"]
  assert calls[0]["config.resume"] == "True"
  assert calls[0]["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # torch shares the GPU
  assert float(calls[0]["config.budget_s"]) == 100 - report.BUDGETED["networks"]
  assert [s.get("earlier", False) for s in second] == [True] * 5 + [False]
  assert not second[-1].get("incomplete")
  assert "| sao_table2 | 1 | ok (earlier command) |" in (tmp_path / "README.md").read_text()


def test_a_fresh_report_removes_an_earlier_ones_files_only(tmp_path, monkeypatch):
  monkeypatch.setattr(runs, "run_module", _fake_process)
  (tmp_path / "tables").mkdir()
  (tmp_path / "tables" / "ham_table3.md").write_text("old\n")
  (tmp_path / "notes.txt").write_text("mine\n")
  (tmp_path / "report.json").write_text(json.dumps({"parts": []}))
  parts = [p for p in report.plan(tmp_path, smoke=True) if p.name == "aa_table9"]
  report.report(report.environment(), tmp_path, parts, smoke=True)
  assert not (tmp_path / "tables" / "ham_table3.md").exists()
  assert (tmp_path / "notes.txt").exists() and (tmp_path / "tables" / "aa_table9.md").exists()


def test_the_archive_packs_the_report_and_lists_large_files(tmp_path, monkeypatch):
  out = tmp_path / "nvidia_h100"
  (out / "tables").mkdir(parents=True)
  (out / "README.md").write_text("# report\n")
  (out / "tables" / "t.md").write_text("| t |\n")
  (out / "runs").mkdir()
  (out / "runs" / "checkpoint").write_bytes(b"x" * 2048)
  monkeypatch.setattr(report, "ARCHIVE_MAX_FILE_BYTES", 1024)
  left_out = report.archive(out, tmp_path / "report.tar.gz")
  assert left_out == ["runs/checkpoint"]
  with tarfile.open(tmp_path / "report.tar.gz") as tar:
    assert sorted(tar.getnames()) == ["nvidia_h100/LEFT_OUT.txt", "nvidia_h100/README.md",
                                      "nvidia_h100/tables/t.md"]
    assert tar.extractfile("nvidia_h100/LEFT_OUT.txt").read() == b"runs/checkpoint\n"


def test_tensorflow_is_unimportable_in_the_process_and_its_children():
  child = ("import subprocess, sys; r = subprocess.run([sys.executable, '-c', "
           "'import tensorflow_datasets'], capture_output=True, text=True); "
           "print(r.stderr.strip().splitlines()[-1]); import tensorflow.compat.v2")
  done = no_tensorflow.run(["-c", child])
  assert done.stdout.startswith("ModuleNotFoundError: No module named 'tensorflow_datasets'")
  assert done.returncode == 1
  assert "ModuleNotFoundError: No module named 'tensorflow' (blocked" in done.stderr
  assert no_tensorflow.run(["-c", "import numpy, absl"]).returncode == 0


def test_check_prints_the_preflight_without_tensorflow():
  start = time.perf_counter()
  done = no_tensorflow.run(["-m", "experiments.accelerator_report", "--check", "--smoke"],
                           cwd=REPO, timeout=120)
  assert time.perf_counter() - start < 60 and done.returncode == 0, done.stderr
  text = done.stdout
  for line in ("versions: python", "device: ", "peak FLOP/s for MFU: none for 'cpu'",
               "tiny jit: ok", "cuDNN attention: not available on cpu", "sao_table2: ok",
               "relative_timm: ok", "networks: ok", "device time: wall"):
    assert line in text, line
  assert f"of {len(report.plan(REPO, smoke=True))} parts can run" in text


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  """The whole `--smoke` report with TensorFlow unimportable, archived; a budget that no part
  misses on a slow host (the budget's own logic is tested above and with 60 s below)."""
  out = tmp_path_factory.mktemp("smoke")
  done = no_tensorflow.run(["-m", "experiments.accelerator_report", "--smoke",
                            "--budget_s=3600", f"--out={out / 'report'}",
                            f"--archive={out / 'report.tar.gz'}"], cwd=REPO)
  return out, done


def test_every_smoke_part_passes_without_tensorflow(smoke):
  out, done = smoke
  data = json.loads((out / "report" / "report.json").read_text())
  failed = {p["name"]: p["error"] for p in data["parts"] if p["state"] != "ok"}
  assert not failed and done.returncode == 0, failed
  assert len(data["parts"]) == len(report.EXPECTED_S) - 1  # all but the tests part


def test_the_smoke_report_is_written_and_archived(smoke):
  out, done = smoke
  data = json.loads((out / "report" / "report.json").read_text())
  assert {p["name"] for p in data["parts"]} == set(report.EXPECTED_S) - {"tests"}
  readme = (out / "report" / "README.md").read_text()
  assert all(f"| {p['name']} | {p['tier']} |" in readme for p in data["parts"])
  with tarfile.open(out / "report.tar.gz") as tar:
    names = set(tar.getnames())
  assert {"report/README.md", "report/report.json", "report/environment.json",
          "report/tables/sao_table2.md", "report/logs/default.log"} <= names


def test_a_budget_of_60_s_stops_in_time_and_lists_the_parts_not_run(tmp_path):
  start = time.perf_counter()
  done = no_tensorflow.run(["-m", "experiments.accelerator_report", "--smoke", "--budget_s=60",
                            f"--out={tmp_path}"], cwd=REPO, timeout=180)
  wall = time.perf_counter() - start
  assert wall < 90, wall
  data = json.loads((tmp_path / "report.json").read_text())
  states = {p["name"]: p["state"] for p in data["parts"]}
  assert set(states) == set(report.EXPECTED_S) - {"tests"}  # every part listed
  assert "not run" in states.values() and states["sao_table2"] != "not run"
  assert f"not run: {', '.join(n for n, s in states.items() if s == 'not run')}" in done.stdout
