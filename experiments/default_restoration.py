"""The default restoration experiment once per attention; PSNR / SSIM gain and wall time.

  python -m experiments.default_restoration [--workdir_root=/tmp/default_restoration]
      [--steps=N] [--attentions=none,softmax,siamese]

Each run is `python -m attention_lab.main --config=configs/restoration/default.py
--config.model.attention=<attention>` (2D denoising of scikit-image's bundled
photographs, U-Net / U-Net+Attn / U-Net+SAO) in a fresh workdir, timed end to
end (process start, data, compilation, training and the whole-image evaluation
of the three held-out photos). Writes experiments/results/default_restoration.{md,json}
and the input | prediction | target picture of each run as
experiments/results/default_restoration_<attention>.png.
Goal (issue 13): every variant ≥ 5 dB PSNR over its noisy input in ≤ 10 minutes
on a 2-core CPU.
"""

import json
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import time

import jax
from absl import app, flags

_ROOT = flags.DEFINE_string("workdir_root", "/tmp/default_restoration", "Parent of the workdirs.")
_STEPS = flags.DEFINE_integer("steps", 0, "Training steps (0: the config's).")
_ATTENTIONS = flags.DEFINE_list("attentions", ["none", "softmax", "siamese"], "Variants.")
_NOTE = flags.DEFINE_string("note", "", "A line about the machine's load, for the results.")
RESULTS = pathlib.Path(__file__).parent / "results"
KEYS = ("eval_input_psnr", "eval_psnr", "eval_psnr_gain", "eval_input_ssim", "eval_ssim",
        "eval_input_nrmse", "eval_nrmse")


def main(argv):
  del argv
  runs = {}
  load_start = open("/proc/loadavg").read().split()[:3]
  for attention in _ATTENTIONS.value:
    workdir = pathlib.Path(_ROOT.value) / attention
    shutil.rmtree(workdir, ignore_errors=True)
    command = [sys.executable, "-m", "attention_lab.main",
               "--config=configs/restoration/default.py", f"--workdir={workdir}",
               f"--config.model.attention={attention}"]
    if _STEPS.value:
      command.append(f"--config.num_train_steps={_STEPS.value}")
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
      raise RuntimeError(f"{attention} failed:\n{result.stderr[-3000:]}")
    final = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)",
                                                  result.stdout.split("Final:")[-1])}
    runs[attention] = {**{k: final[k] for k in KEYS}, "wall_s": seconds,
                       "goal_met": final["eval_psnr_gain"] >= 5.0 and seconds <= 600}
    pictures = sorted((workdir / "images").glob("*.png"))
    if pictures:
      shutil.copy(pictures[-1], RESULTS / f"default_restoration_{attention}.png")
    print(attention, runs[attention], flush=True)
  rows = ["| attention | input PSNR | output PSNR | gain (dB) | input SSIM | output SSIM | "
          "output NRMSE | wall time (s) | goal met |", "|---|---|---|---|---|---|---|---|---|"]
  for attention, r in runs.items():
    rows.append(f"| {attention} | {r['eval_input_psnr']:.2f} | {r['eval_psnr']:.2f} | "
                f"{r['eval_psnr_gain']:+.2f} | {r['eval_input_ssim']:.4f} | "
                f"{r['eval_ssim']:.4f} | {r['eval_nrmse']:.4f} | {r['wall_s']:.0f} | "
                f"{'yes' if r['goal_met'] else 'no'} |")
  header = (
      "# Default restoration experiment (scikit-image photos, Poisson-Gaussian noise) per "
      "attention\n\n"
      "`python -m experiments.default_restoration`: configs/restoration/default.py, U-Net "
      "(none) / U-Net+Attn (softmax) / U-Net+SAO (siamese); metrics are means over the 3 "
      "held-out photos (camera, coins, chelsea), predicted whole in 64×64 tiles, "
      "'plain' protocol (data_range 1). Wall time: the whole `attention_lab.main` process. "
      f"Goal: gain ≥ 5 dB in ≤ 600 s.\n\nMachine: {platform.processor() or platform.machine()}, "
      f"{jax.device_count()} JAX CPU device(s), jax {jax.__version__}. Load average (1/5/15 "
      f"min) at the start {'/'.join(load_start)}, at the end "
      f"{'/'.join(open('/proc/loadavg').read().split()[:3])} (2 cores; a load above 2 means "
      f"the machine was shared with other jobs and wall times are inflated). {_NOTE.value}\n\n")
  (RESULTS / "default_restoration.md").write_text(header + "\n".join(rows) + "\n")
  (RESULTS / "default_restoration.json").write_text(json.dumps(runs, indent=1))
  print((RESULTS / "default_restoration.md").read_text())


if __name__ == "__main__":
  app.run(main)
