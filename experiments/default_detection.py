"""The default detector (configs/detection/default.py) with a plain and an AA backbone:
COCO mAP on the digit-scenes test split and wall time; RetinaNet-50 counts beside AA Table 5.

  python -m experiments.default_detection [--vary=model.backbone=resnet] [--set=...]
  python -m experiments.default_detection --table_only   # only the RetinaNet-50 counts

The sweep of experiments/sweep.py (its flags) → experiments/results/default_detection.{md,json}
and the last detection picture of each run (default_detection_<backbone>.png). Counts:
parameters (every trainable array, as the AA paper counts) and forward MAdd from the jaxpr
(experiments/model_stats.py; GFlops = 2 × GMAdd, the AA paper's convention) of
RetinaNet-ResNet-50 / AA-ResNet-50 at 640×640 with 80 classes, for both P6 inputs (C5: Lin
et al.; P5: the TPU codebase the AA paper used).
"""

from experiments import sweep

GOAL_MAP, GOAL_S = 0.50, 900
PAPER = {"resnet50": (33.4e6, 182.0, 36.8), "aa_resnet50": (33.1e6, 182.0, 38.2)}


def model_counts() -> tuple[list[str], dict]:
  """(markdown lines, {"counts": rows}) of RetinaNet-50 at 640×640 beside AA Table 5."""
  from experiments import model_stats  # pylint: disable=g-import-not-at-top
  rows = []
  for backbone in ("resnet50", "aa_resnet50"):
    for p6 in ("c5", "p5"):
      model = model_stats.build_abstract("retinanet", num_classes=80, backbone=backbone,
                                         image_size=640, p6_input=p6)
      paper_params, paper_gflops, paper_map = PAPER[backbone]
      rows.append({"backbone": backbone, "p6_input": p6,
                   "params": model_stats.count_params(model)[0],
                   "gflops": 2 * model_stats.forward_madd(model, (640, 640, 3)) / 1e9,
                   "paper_params": paper_params, "paper_gflops": paper_gflops,
                   "paper_map": paper_map})
  lines = ["RetinaNet at 640×640, 80 classes: parameters (all trainable arrays) and forward "
           "GFlops (2 × MAdd from the jaxpr), beside AA Table 5.", "",
           "| backbone | P6 from | params | paper params | GFlops | paper GFlops | paper mAP |",
           "|---|---|---|---|---|---|---|"]
  lines += [f"| {c['backbone']} | {c['p6_input']} | {c['params'] / 1e6:.2f}M | "
            f"{c['paper_params'] / 1e6:.1f}M | {c['gflops']:.1f} | {c['paper_gflops']:.0f} | "
            f"{c['paper_map']} |" for c in rows]
  return lines + [""], {"counts": rows}


TABLE = sweep.Table(
    name="default_detection",
    title="Default detector on digit scenes, and RetinaNet-50 counts (AA Table 5)",
    config="configs/detection/default.py",
    vary={"model.backbone": ("resnet", "aa_resnet")},
    columns=(("mAP@[.5:.95]", "eval_map", "{:.4f}"), ("AP50", "eval_ap50", "{:.4f}"),
             ("AP75", "eval_ap75", "{:.4f}"), ("AP small", "eval_ap_small", "{:.4f}"),
             ("AP medium", "eval_ap_medium", "{:.4f}")),
    about="Command: `python -m experiments.default_detection`. COCOeval on the 500 test "
          f"scenes. Goal: mAP@[.5:.95] ≥ {GOAL_MAP} for both backbones in ≤ {GOAL_S} s each "
          "on a 2-core CPU.",
    goal=lambda r: r["final"]["eval_map"] >= GOAL_MAP and r["wall_s"] <= GOAL_S,
    picture="detections_*.png",
    appendix=model_counts)

if __name__ == "__main__":
  sweep.main_for(TABLE.name)
