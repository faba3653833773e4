"""experiments.accelerator_report: its plan covers every part with valid commands, and a
report writes the summary, the tables' links and the runs' speed.

The parts' processes are stood in for by what those commands write (main's --json and
config.json: tests/test_main.py, tests/train/test_perf.py; the efficiency tables' md / json:
tests/experiments/test_efficiency.py), so the report itself runs in about a second."""

import json
import pathlib
import subprocess
import sys

from attention_lab import cli
from experiments import accelerator_report as report
from experiments import runs

REPO = pathlib.Path(__file__).resolve().parents[2]
TABLES = {"sao_table2", "sao_table2_bfloat16", "kao_table1", "kao_table1_bfloat16",
          "ham_table3", "isa_tables", "aa_table9", "sao_table5", "sao_table5_bfloat16",
          "performance_goals"}


def test_plan_covers_every_table_the_relative_comparison_and_the_default_runs(tmp_path):
  parts = {p.name: p for p in report.plan(tmp_path, smoke=True)}
  assert {n for n, p in parts.items() if p.kind == "table"} == TABLES
  assert {n for n, p in parts.items() if p.kind == "run"} == set(report.RUNS)
  assert parts["relative_timm"].module == "experiments.relative_timm"
  for p in parts.values():
    assert p.config.endswith(":tiny") and (REPO / p.config.split(":")[0]).exists()
  assert "--config.dtype=bfloat16" in parts["sao_table5_bfloat16"].overrides
  names = list(parts)
  # The goals table reads SAO / KAO's json, so it comes after them.
  assert names.index("performance_goals") > max(names.index("sao_table2"),
                                                names.index("kao_table1"))
  full = {p.name: p for p in report.plan(tmp_path, smoke=False)}
  assert not any(p.config.endswith(":tiny") for p in full.values())
  assert f"--config.num_train_steps={report.RUN_STEPS}" in full["default"].overrides
  assert any(o.startswith("--config.eval.classifier_workdir=") for o in full["gan"].overrides)
  for p in [*parts.values(), *full.values()]:  # every command's config and fields exist
    cli._check_overrides(cli.load_config(p.config, root=str(REPO)), p.overrides)  # pylint: disable=protected-access


def test_device_slug():
  assert report.device_slug("gpu", "NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
  assert report.device_slug("tpu", "TPU v5 lite") == "tpu_v5_lite"
  assert report.device_slug("cpu", "cpu") == "cpu"


def test_a_cpu_without_smoke_is_refused_in_one_line():
  done = subprocess.run([sys.executable, "-m", "experiments.accelerator_report"], cwd=REPO,
                        capture_output=True, text=True, check=False)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1].startswith("error: no GPU or TPU")
  assert "Traceback" not in done.stderr


def _fake_process(module, args, *, log=None, final=None):
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
  assert env["platform"] == "cpu" and env["jax"] and env["jaxlib"]
  parts = [p for p in report.plan(tmp_path, smoke=True) if p.name in ("aa_table9", "default")]
  statuses = report.report(env, tmp_path, parts, smoke=True)
  assert [s["returncode"] for s in statuses] == [0, 0]
  assert json.loads((tmp_path / "environment.json").read_text())["platform"] == "cpu"
  data = json.loads((tmp_path / "report.json").read_text())
  assert [p["name"] for p in data["parts"]] == ["aa_table9", "default"]
  run = data["runs"]["default"]
  # The medians of the run's perf/ scalars, from its --json.
  assert run["examples_per_second"] == 12.0
  assert run["tflops_per_device"] > 0 and run["mfu"] is None  # no MFU on a CPU
  assert run["batch"] == 8 and run["steps"] == 4
  text = (tmp_path / "README.md").read_text()
  assert "| aa_table9 |" in text and "(tables/aa_table9.md)" in text
  assert "| default |" in text and "None on this device" in text
