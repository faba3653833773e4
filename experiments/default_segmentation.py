"""Runs the default segmentation experiment once per head; tabulates test mIoU and wall time.

  flock /tmp/bench.lock python -m experiments.default_segmentation \\
      [--workdir_root=/tmp/default_segmentation] [--heads=aspp,hamburger] [--num_train_steps=N]

Each run is `python -m attention_lab.main --config=configs/segmentation/default.py
--config.model.head=<head>` in a fresh workdir, timed end to end (process
start, data, the digits-pretrained backbone trained first in that workdir,
compilation, training and evaluation). The goal (issue 12):
every head ≥ 0.80 mIoU on the digit-scenes test split in ≤ 10 minutes on a
2-core CPU. The load average before and after each run is recorded, because
a shared machine slows every number here. Writes
experiments/results/default_segmentation.md: the rows of the heads run replace
theirs; other heads' rows and the text below the table are kept.
"""

import os
import pathlib
import platform
import re
import subprocess
import sys
import time

from absl import app, flags

from attention_lab.models.segmentation import SEGMENTER_HEADS
from configs.segmentation import default

_ROOT = flags.DEFINE_string("workdir_root", "/tmp/default_segmentation", "Parent of the workdirs.")
_HEADS = flags.DEFINE_list("heads", list(SEGMENTER_HEADS), "Heads to run.")
_STEPS = flags.DEFINE_integer("num_train_steps", 0, "0: the config's number of steps.")


TABLE = ["| head | test mIoU | pixel acc. | mean class acc. | steps | wall time (s) | "
         "load avg. before → after |", "|---|---|---|---|---|---|---|"]


def previous_results(path: pathlib.Path) -> tuple[dict[str, str], str]:
  """(table row per head, the text after the table) of an existing results file."""
  if not path.exists():
    return {}, ""
  lines = path.read_text().splitlines()
  start = next((i for i, line in enumerate(lines) if line.startswith("| head ")), len(lines))
  end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
  table = {line.split("|")[1].strip(): line for line in lines[start + 2:end]}
  return table, "\n".join(lines[end:])


def main(argv):
  del argv
  out = pathlib.Path(__file__).parent / "results" / "default_segmentation.md"
  table, analysis = previous_results(out)
  for head in _HEADS.value:
    workdir = pathlib.Path(_ROOT.value) / head
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    extra = [f"--config.num_train_steps={_STEPS.value}"] if _STEPS.value else []
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "attention_lab.main", "--config=configs/segmentation/default.py",
         f"--workdir={workdir}", f"--config.model.head={head}", *extra],
        capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode:
      print(result.stderr[-3000:], file=sys.stderr)
      table[head] = f"| {head} | failed (exit {result.returncode}) | | | | {seconds:.0f} | |"
      continue
    final = dict(re.findall(r"([\w/]+)=([\d.]+)", result.stdout.split("Final:")[-1]))
    steps = _STEPS.value or default.get_config().num_train_steps
    table[head] = (f"| {head} | {float(final['eval_miou']):.4f} | "
                  f"{float(final['eval_pixel_accuracy']):.4f} | "
                  f"{float(final['eval_mean_class_accuracy']):.4f} | {steps} | {seconds:.0f} | "
                  f"{load_before:.1f} → {os.getloadavg()[0]:.1f} |")
    print(table[head], flush=True)
    header = (f"# Default segmentation experiment (digit scenes, segmenter) per head\n\n"
              f"Machine: {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPU cores; the 1-minute load average before and after each "
              f"run is in the table (a quiet 2-core machine has load ≤ 2). Command: "
              f"`flock /tmp/bench.lock python -m experiments.default_segmentation"
              f"{' --num_train_steps=' + str(_STEPS.value) if _STEPS.value else ''}`.\n\n")
    rows = [table[h] for h in SEGMENTER_HEADS if h in table]
    out.write_text(header + "\n".join(TABLE + rows) + "\n" + analysis + "\n")
  print(out.read_text())


if __name__ == "__main__":
  app.run(main)
