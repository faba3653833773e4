"""The default detector (configs/detection/default.py) with a plain and an AA backbone:
COCO mAP on the digit-scenes test split and wall time; RetinaNet-50 counts beside AA Table 5.

  flock /tmp/bench.lock python -m experiments.default_detection [--workdir_root=/tmp/det_bench]
  python -m experiments.default_detection --stats_only   # only the RetinaNet-50 counts

Each run is `python -m attention_lab.main --config=configs/detection/default.py
--config.model.backbone=<resnet|aa_resnet>` in a fresh workdir, timed end to
end (process start, data, compilation, training, evaluation); the load average
during the run is recorded, since the machine may be shared. Goal (issue 15):
mAP@[.5:.95] ≥ 0.50 for both in ≤ 15 minutes each on a 2-core CPU.

Counts: parameters (every trainable array, as the AA paper counts) and forward
MAdd from the jaxpr (experiments/model_stats.py; GFlops = 2 × GMAdd, the AA
paper's convention) of RetinaNet-ResNet-50 / AA-ResNet-50 at 640×640 with 80
classes, for both P6 inputs (C5: Lin et al.; P5: the TPU codebase the AA paper
used), beside the paper's 33.4M / 33.1M parameters and 182 GFlops.

Writes experiments/results/default_detection.{md,json} and the last detection
picture of each run (default_detection_<backbone>.png).
"""

import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import time

import jax
from absl import app, flags

_ROOT = flags.DEFINE_string("workdir_root", "/tmp/det_bench", "Parent of the workdirs.")
_STATS_ONLY = flags.DEFINE_bool("stats_only", False, "Only the RetinaNet-50 counts.")
_BACKBONES = flags.DEFINE_list("backbones", ["resnet", "aa_resnet"], "Backbones to train.")
_OVERRIDES = flags.DEFINE_list("overrides", [], "Extra --config.<key>=<value> overrides.")
_CONCURRENT = flags.DEFINE_bool("concurrent", False,
                                "Train the backbones at the same time (times then include "
                                "their contention with each other).")

RESULTS = pathlib.Path(__file__).parent / "results"
PAPER = {"resnet50": (33.4e6, 182.0, 36.8), "aa_resnet50": (33.1e6, 182.0, 38.2)}


def start(backbone: str):
  workdir = pathlib.Path(_ROOT.value) / backbone
  shutil.rmtree(workdir, ignore_errors=True)
  workdir.mkdir(parents=True)
  log = open(workdir.parent / f"{backbone}.log", "w")  # pylint: disable=consider-using-with
  process = subprocess.Popen(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/detection/default.py",
       f"--workdir={workdir}", f"--config.model.backbone={backbone}"]
      + [f"--config.{o}" for o in _OVERRIDES.value],
      stdout=subprocess.PIPE, stderr=log, text=True)
  return process, workdir, os.getloadavg()[0], time.perf_counter()


def finish(backbone: str, started) -> dict:
  process, workdir, load_before, start_time = started
  stdout, _ = process.communicate()
  seconds = time.perf_counter() - start_time
  if process.returncode:
    raise RuntimeError(f"{backbone} failed; see {workdir.parent / (backbone + '.log')}")
  final = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", stdout.split("Final:")[-1])}
  pictures = sorted((workdir / "images").glob("detections_*.png"))
  if pictures:
    shutil.copy(pictures[-1], RESULTS / f"default_detection_{backbone}.png")
  return {"backbone": backbone, "seconds": seconds, "load_before": load_before,
          "load_after": os.getloadavg()[0], "concurrent": _CONCURRENT.value,
          "overrides": list(_OVERRIDES.value), **final}


def model_counts() -> list[dict]:
  from experiments import model_stats  # pylint: disable=g-import-not-at-top
  rows = []
  for backbone in ("resnet50", "aa_resnet50"):
    for p6 in ("c5", "p5"):
      model = model_stats.build_abstract("retinanet", num_classes=80, backbone=backbone,
                                         image_size=640, p6_input=p6)
      params, _ = model_stats.count_params(model)
      madd = model_stats.forward_madd(model, (640, 640, 3))
      paper_params, paper_gflops, paper_map = PAPER[backbone]
      rows.append({"backbone": backbone, "p6_input": p6, "params": params,
                   "gflops": 2 * madd / 1e9, "paper_params": paper_params,
                   "paper_gflops": paper_gflops, "paper_map": paper_map})
      print(rows[-1], flush=True)
  return rows


def main(argv):
  del argv
  RESULTS.mkdir(exist_ok=True)
  path = RESULTS / "default_detection.json"
  previous = json.loads(path.read_text()) if path.exists() else {}
  runs = previous.get("runs", [])
  if not _STATS_ONLY.value:
    runs = [r for r in runs if r["backbone"] not in _BACKBONES.value]
    if _CONCURRENT.value:
      started = {b: start(b) for b in _BACKBONES.value}
      runs += [finish(b, started[b]) for b in _BACKBONES.value]
    else:
      for backbone in _BACKBONES.value:
        runs.append(finish(backbone, start(backbone)))
        print(runs[-1], flush=True)
  counts = model_counts()
  machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"{jax.device_count()} JAX CPU device(s), jax {jax.__version__}")
  path.write_text(json.dumps({"machine": machine, "runs": runs, "counts": counts}, indent=1))

  lines = ["# Default detector on digit scenes, and RetinaNet-50 counts (AA Table 5)", "",
           f"Machine: {machine}. The 1-minute load average before / after "
           "each run is given (2 cores: a load of 2 is a quiet "
           "machine).", "",
           "`python -m attention_lab.main --config=configs/detection/default.py "
           "--config.model.backbone=<backbone>` (wall time end to end: start, data, "
           "compilation, training, evaluation). COCOeval on the 500 test scenes.", "",
           "| backbone | mAP@[.5:.95] | AP50 | AP75 | AP small | AP medium | wall time (s) | "
           "load before / after | concurrent | overrides |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in runs:
    lines.append(
        f"| {r['backbone']} | {r.get('eval_map', float('nan')):.4f} | "
        f"{r.get('eval_ap50', float('nan')):.4f} | {r.get('eval_ap75', float('nan')):.4f} | "
        f"{r.get('eval_ap_small', float('nan')):.4f} | "
        f"{r.get('eval_ap_medium', float('nan')):.4f} | {r['seconds']:.0f} | "
        f"{r['load_before']:.1f} / {r['load_after']:.1f} | {r.get('concurrent', False)} | "
        f"{' '.join(r.get('overrides', [])) or '-'} |")
  lines += ["", "RetinaNet at 640×640, 80 classes: parameters (all trainable arrays) and "
            "forward GFlops (2 × MAdd from the jaxpr), beside AA Table 5.", "",
            "| backbone | P6 from | params | paper params | GFlops | paper GFlops | paper mAP |",
            "|---|---|---|---|---|---|---|"]
  for c in counts:
    lines.append(f"| {c['backbone']} | {c['p6_input']} | {c['params'] / 1e6:.2f}M | "
                 f"{c['paper_params'] / 1e6:.1f}M | {c['gflops']:.1f} | "
                 f"{c['paper_gflops']:.0f} | {c['paper_map']} |")
  (RESULTS / "default_detection.md").write_text("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
