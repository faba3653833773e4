"""experiments.runs (a config as a process, its final metrics), experiments.sweep (one row per
combination, results merged) and experiments.paper_presets (start / end per preset)."""

import json
import math
import pathlib
import subprocess
import sys

import pytest

from experiments import (default_detection, default_operators, default_restoration,
                         default_segmentation, measure, paper_presets, runs, sweep)

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_a_run_reads_its_final_json_and_names_its_failure(tmp_path):
  final = tmp_path / "final.json"
  final.write_text(json.dumps({"eval_fid": float("nan"), "perf/examples_per_second": 12.5}))
  run = runs.run_module("json.tool", [final], final=final)  # a process that succeeds
  assert run.returncode == 0 and run.error is None and run.wall_s > 0
  assert math.isnan(run.final["eval_fid"]) and run.final["perf/examples_per_second"] == 12.5
  run = runs.Run(["python", "-m", "attention_lab.main", "--config=x"], 2, 1.0, 0.5, 0.0, 0.0,
                 {}, "start\nerror: model.attention = 'x': must be one of ...\n\n")
  assert run.error == "error: model.attention = 'x': must be one of ..."
  assert "output" not in run.record()


def _fake_train(finals):
  def train(spec, overrides, *, workdir, fresh=True, log=None):
    del spec, fresh, log
    workdir = pathlib.Path(workdir)
    (workdir / "images").mkdir(parents=True)
    (workdir / "config.json").write_text(json.dumps({"num_train_steps": 4}))
    value = finals[overrides[0]]
    if value is None:
      return runs.Run(["python", "-m", "m"], 2, 3.0, 1.0, 0.5, 0.7, {}, "error: bad value\n")
    return runs.Run(["python", "-m", "m"], 0, 3.0, 1.0, 0.5, 0.7, {"eval_top1": value}, "")
  return train


TABLE = sweep.Table(name="t", title="T", config="configs/default.py",
                    vary={"model.attention": ("none", "softmax", "mean")},
                    columns=(("top-1", "eval_top1", "{:.2f}"), ("steps", "steps", "{}")),
                    goal=lambda r: r["final"]["eval_top1"] >= 0.5)


def test_a_sweep_merges_rows_keeps_notes_and_marks_goals_and_failures(tmp_path, monkeypatch):
  monkeypatch.setattr(sweep, "RESULTS", tmp_path)
  monkeypatch.setattr(runs, "train", _fake_train({"model.attention=none": 0.25,
                                                  "model.attention=softmax": 0.75,
                                                  "model.attention=mean": None}))
  sweep.sweep(TABLE, {"model.attention": ("softmax",)}, [], tmp_path / "w")
  md = tmp_path / "t.md"
  md.write_text(md.read_text() + f"\n{measure.NOTES}\nBy hand.\n")
  rows = sweep.sweep(TABLE, {"model.attention": ("mean", "none")}, ["num_train_steps=4"],
                     tmp_path / "w")
  assert [r["values"]["model.attention"] for r in rows] == ["softmax", "mean", "none"]
  data = json.loads((tmp_path / "t.json").read_text())
  assert [r["values"]["model.attention"] for r in data["rows"]] == ["none", "softmax", "mean"]
  assert data["machine"]
  text = md.read_text()
  assert "| none (`num_train_steps=4`) | 0.25 | 4 | 3 | 1 | 0.5 → 0.7 | **no** |" in text
  assert "| softmax | 0.75 | 4 | 3 | 1 | 0.5 → 0.7 | yes |" in text
  assert "| mean (`num_train_steps=4`) | **failed**: `error: bad value` | — |" in text
  assert text.endswith(f"{measure.NOTES}\nBy hand.\n")


def test_the_default_tables_keep_their_goals():
  tables = {m.TABLE.name: m.TABLE for m in (default_operators, default_segmentation,
                                            default_restoration, default_detection)}
  assert set(tables) == {"default_operators", "default_segmentation", "default_restoration",
                         "default_detection"}
  restoration = tables["default_restoration"].goal
  assert restoration({"final": {"eval_psnr_gain": 5.0}, "wall_s": 600})
  assert not restoration({"final": {"eval_psnr_gain": 4.9}, "wall_s": 10})
  assert not tables["default_detection"].goal({"final": {"eval_map": 0.6}, "wall_s": 901})
  for table in tables.values():
    assert (REPO / table.config).exists()


@pytest.mark.parametrize("args, message", [
    (["-m", "experiments.sweep", "--vary=x"], "error: --vary='x': expected FIELD=VALUE"),
    (["-m", "experiments.sweep", "--config=configs/default.py", "--vary=model.atention=a"],
     "error: --config.model.atention: unknown field 'atention'"),
    (["-m", "experiments.default_operators", "--vary=model.attention=bogus"],
     "error: --vary=model.attention=bogus: table default_operators varies"),
    (["-m", "experiments.paper_presets", "--presets=configs/default.py"],
     "error: --presets: 'configs/default.py' is not a ':cpu'"),
])
def test_bad_flags_are_one_line(args, message):
  done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                        check=False)
  assert done.returncode == 2 and "Traceback" not in done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith(message), done.stderr


@pytest.mark.parametrize("family, start, end, learned", [
    ("classification", 0.1, 0.5, True), ("classification", 0.1, 0.45, False),
    ("segmentation", 0.05, 0.16, True), ("segmentation", 0.05, 0.14, False),
    ("restoration", 0.2, 1.0, True), ("restoration", 1.5, 1.2, False),
    ("gan", 300.0, 150.0, True), ("gan", 300.0, 151.0, False),
    ("detection", 0.0, 0.01, True), ("detection", 0.0, 0.0, False),
])
def test_thresholds_per_family(family, start, end, learned):
  assert paper_presets.FAMILIES[family][2](start, end) == learned


def test_a_preset_is_measured_before_and_after(tmp_path, monkeypatch):
  calls = []

  def fake(name, value):
    def run(spec, overrides, *, workdir, **kwargs):
      calls.append((name, spec, tuple(overrides), pathlib.Path(workdir).name))
      return runs.Run([], 0, 2.0, 1.0, 0.1, 0.2, {"eval_fid": value}, "")
    return run

  monkeypatch.setattr(sweep, "RESULTS", tmp_path)
  monkeypatch.setattr(runs, "untrained", fake("untrained", 300.0))
  monkeypatch.setattr(runs, "train", fake("train", 60.0))
  [entry] = sweep.sweep(paper_presets.TABLE, {"config": ("configs/isa/cifar10.py:cpu",)}, [],
                        tmp_path)
  assert {k: entry[k] for k in ("family", "metric", "start", "end", "learned")} == {
      "family": "gan", "metric": "fid", "start": 300.0, "end": 60.0, "learned": True}
  assert [c[0] for c in calls] == ["untrained", "train"] and calls[0][1:] == calls[1][1:]
  assert calls[0][2] == (f"eval.classifier_workdir={tmp_path / 'digits_classifier'}",)
  assert ("| configs/isa/cifar10.py:cpu | gan | fid | 300.0000 | 60.0000 | 2 | 1 | 0.1 → 0.2 | "
          "yes |") in (tmp_path / "paper_presets.md").read_text()
  assert paper_presets.family_of("configs/kanet/voc_deeplab.py:cpu") == "segmentation"
  assert paper_presets.family_of("configs/aa/resnet_imagenet.py:resnet50,cpu") == (
      "classification")
