"""experiments.accelerator_report: its plan covers every part, and --smoke runs end to end."""

import json
import pathlib
import subprocess
import sys

from experiments import accelerator_report as report

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


def test_device_slug():
  assert report.device_slug("gpu", "NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
  assert report.device_slug("tpu", "TPU v5 lite") == "tpu_v5_lite"
  assert report.device_slug("cpu", "cpu") == "cpu"


def _command(*args):
  return subprocess.run([sys.executable, "-m", "experiments.accelerator_report", *args],
                        cwd=REPO, capture_output=True, text=True, check=False)


def test_a_cpu_without_smoke_is_refused_in_one_line():
  done = _command()
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1].startswith("accelerator_report: no GPU or TPU")
  assert "Traceback" not in done.stderr


def test_smoke_writes_the_summary_tables_and_run_speed(tmp_path):
  done = _command("--smoke", f"--out={tmp_path}", "--parts=aa_table9,default")
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  env = json.loads((tmp_path / "environment.json").read_text())
  assert env["platform"] == "cpu" and env["jax"] and env["jaxlib"]
  data = json.loads((tmp_path / "report.json").read_text())
  assert [p["name"] for p in data["parts"]] == ["aa_table9", "default"]
  assert (tmp_path / "tables" / "aa_table9.md").exists()
  run = data["runs"]["default"]
  # The run's perf/ scalars and its Final line are both read, and agree on the scale.
  assert run["examples_per_second"] > 0 and run["final_examples_per_second"] > 0
  assert run["tflops_per_device"] > 0 and run["mfu"] is None  # no MFU on a CPU
  assert run["batch"] and run["steps"]
  text = (tmp_path / "README.md").read_text()
  assert "| aa_table9 |" in text and "(tables/aa_table9.md)" in text
  assert "| default |" in text and "None on this device" in text


def test_read_perf_tolerates_a_run_without_perf_scalars(tmp_path):
  assert report.read_perf(tmp_path) == {}
  assert report.final_line(tmp_path / "missing.log") == {}
  log = tmp_path / "run.log"
  log.write_text("step 2/4 ...\nFinal: eval_top1=0.5000, examples_per_second=12.5000\n")
  assert report.final_line(log) == {"eval_top1": 0.5, "examples_per_second": 12.5}
