"""Trains every classification config's `:cpu` preset; tabulates eval top-1 and time.

  python -m experiments.cpu_presets [--presets=configs/sanet/imagenet.py:cpu,...]
      [--workdir_root=/tmp/cpu_presets]

Each run is `python -m attention_lab.main --config=<preset>` in a fresh
workdir, timed end to end (process start, data, compilation, training, the
final evaluation on the 300 digits test images): wall time and the CPU time
the process used (user + system, all threads; on a machine shared with other
jobs the wall time grows, the CPU time much less). The goal (issue 16): eval
top-1 ≥ 50% in about a minute or two on a 2-core CPU. Writes
experiments/results/cpu_presets.md (appends to the JSON of earlier runs, one
row per preset, the latest kept).
"""

import json
import os
import pathlib
import platform
import re
import resource
import subprocess
import sys
import time

from absl import app, flags

PRESETS = (
    "configs/sanet/imagenet.py:cpu",
    "configs/sanet/imagenet.py:mobilenet_v2,cpu",
    "configs/sanet/imagenet.py:attnnet,cpu",
    "configs/kanet/imagenet.py:cpu",
    "configs/kanet/imagenet.py:kanet_qkv,cpu",
    "configs/aa/wrn_cifar100.py:cpu",
    "configs/aa/wrn_cifar100.py:se_wide_resnet28_10,cpu",
    "configs/aa/resnet_imagenet.py:cpu",
    "configs/aa/resnet_imagenet.py:resnet50,cpu",
    "configs/aa/resnet_imagenet.py:aa_resnet34,cpu",
    "configs/aa/mnasnet_imagenet.py:cpu",
    "configs/aa/mnasnet_imagenet.py:mnasnet_a1,cpu",
)
_PRESETS = flags.DEFINE_string(
    "presets", ",".join(PRESETS),
    "Comma-separated config presets to train (a preset's own commas, as in "
    "'configs/aa/resnet_imagenet.py:resnet50,cpu', stay with it).")
_ROOT = flags.DEFINE_string("workdir_root", "/tmp/cpu_presets", "Parent of the workdirs.")
_NOTE = flags.DEFINE_string("note", "", "A line about the machine's load, written with the table.")

RESULTS = pathlib.Path(__file__).parent / "results"


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
  except (OSError, StopIteration):
    return platform.processor() or platform.machine()


def train(preset: str, root: str) -> dict:
  workdir = pathlib.Path(root) / re.sub(r"[^\w]+", "_", preset)
  subprocess.run(["rm", "-rf", str(workdir)], check=True)
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  result = subprocess.run([sys.executable, "-m", "attention_lab.main", f"--config={preset}",
                           f"--workdir={workdir}"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if result.returncode:
    raise RuntimeError(f"{preset} failed:\n{result.stderr[-3000:]}")
  final = dict(re.findall(r"(\w+)=([\d.]+)", result.stdout.split("Final:")[-1]))
  return {"preset": preset, "eval_top1": float(final["eval_top1"]),
          "eval_loss": float(final["eval_loss"]), "wall_s": wall,
          "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
          "load_before": os.getloadavg()[0]}


def markdown(rows: list, note: str) -> str:
  lines = ["# `:cpu` presets of the classification configs", "",
           f"Machine: {_cpu_model()}, {os.cpu_count()} cores. Command: `python -m "
           "experiments.cpu_presets`. Each preset trains from scratch in a fresh workdir "
           "(`python -m attention_lab.main --config=PRESET`); top-1 on the 300 digits test "
           "images after the last step; wall = end to end (start-up, data, compilation, "
           "training, evaluation); CPU = user + system time of the process (all threads). "
           "Goal: eval top-1 ≥ 50% in about a minute or two on a 2-core CPU.", ""]
  if note:
    lines += [note, ""]
  lines += ["| preset | eval top-1 | eval loss | wall s | CPU s | 1-min load when it started |",
            "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| `{r['preset']}` | {100 * r['eval_top1']:.1f}% | {r['eval_loss']:.3f} | "
                 f"{r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['load_before']:.1f} |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  RESULTS.mkdir(exist_ok=True)
  store = RESULTS / "cpu_presets.json"
  saved = json.loads(store.read_text()) if store.exists() else {"rows": [], "note": ""}
  by_preset = {r["preset"]: r for r in saved["rows"]}
  for preset in re.split(r",(?=configs/)", _PRESETS.value):
    row = train(preset, _ROOT.value)
    by_preset[preset] = row
    print(row, flush=True)
    order = [p for p in PRESETS if p in by_preset] + [p for p in by_preset if p not in PRESETS]
    saved = {"rows": [by_preset[p] for p in order], "note": _NOTE.value or saved["note"]}
    store.write_text(json.dumps(saved, indent=1))
    (RESULTS / "cpu_presets.md").write_text(markdown(saved["rows"], saved["note"]))
  print((RESULTS / "cpu_presets.md").read_text())


if __name__ == "__main__":
  app.run(main)
