"""Runs the default experiment once per global-context operator; tabulates accuracy and time.

  python -m experiments.default_operators [--workdir_root=/tmp/default_operators]

Each run is `python -m attention_lab.main --config=configs/default.py
--config.model.attention=<op>` in a fresh workdir, timed end to end (process
start, data, compilation, training and evaluation). Writes
experiments/results/default_operators.md.
"""

import pathlib
import platform
import re
import subprocess
import sys
import time

from absl import app, flags

import jax

from attention_lab.models.attention_cnn import ATTENTIONS

_ROOT = flags.DEFINE_string("workdir_root", "/tmp/default_operators", "Parent of the workdirs.")


def main(argv):
  del argv
  rows = ["| attention | test top-1 | test loss | wall time (s) |", "|---|---|---|---|"]
  for attention in ATTENTIONS:
    workdir = pathlib.Path(_ROOT.value) / attention
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py",
         f"--workdir={workdir}", f"--config.model.attention={attention}"],
        capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    final = dict(re.findall(r"(\w+)=([\d.]+)", result.stdout.split("Final:")[-1]))
    rows.append(f"| {attention} | {float(final['eval_top1']):.4f} | "
                f"{float(final['eval_loss']):.4f} | {seconds:.0f} |")
    print(rows[-1], flush=True)
  header = (f"# Default experiment (digits, attention_cnn) per operator\n\n"
            f"Machine: {platform.processor() or platform.machine()}, "
            f"{jax.device_count()} JAX CPU device(s), jax {jax.__version__}.\n\n")
  out = pathlib.Path(__file__).parent / "results" / "default_operators.md"
  out.write_text(header + "\n".join(rows) + "\n")
  print(out.read_text())


if __name__ == "__main__":
  app.run(main)
