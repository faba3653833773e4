"""The default detector with a plain and an AA backbone: COCO mAP on the digit-scenes test
split, wall time, the last detection picture of each run; and RetinaNet-ResNet-50 /
AA-ResNet-50 at 640×640, 80 classes, beside AA Table 5: parameters (every trainable array,
as the AA paper counts) and forward GFlops (2 × MAdd from the jaxpr, experiments/model_stats)
for both P6 inputs (C5: Lin et al.; P5: the TPU codebase the AA paper used).

  python -m experiments.default_detection [--vary=model.backbone=resnet] [--set=...]
  python -m experiments.default_detection --table_only   # only the RetinaNet-50 counts
"""

from experiments import sweep

GOAL_MAP, GOAL_S = 0.50, 900
PAPER = {"resnet50": (33.4e6, 182.0, 36.8), "aa_resnet50": (33.1e6, 182.0, 38.2)}


def model_counts() -> tuple[list[str], dict]:
  """(markdown lines, {"counts": rows}) of RetinaNet-50 at 640×640 beside AA Table 5."""
  from experiments import model_stats  # pylint: disable=g-import-not-at-top
  rows, lines = [], [
      "RetinaNet at 640×640, 80 classes: parameters (all trainable arrays) and forward "
      "GFlops (2 × MAdd from the jaxpr), beside AA Table 5.", "",
      "| backbone | P6 from | params | paper params | GFlops | paper GFlops | paper mAP |",
      "|---|---|---|---|---|---|---|"]
  for (backbone, (params, gflops, mean_ap)), p6 in ((b, p) for b in PAPER.items()
                                                     for p in ("c5", "p5")):
    model = model_stats.build_abstract("retinanet", num_classes=80, backbone=backbone,
                                       image_size=640, p6_input=p6)
    rows.append({"backbone": backbone, "p6_input": p6, "params": model_stats.count_params(
        model)[0], "gflops": 2 * model_stats.forward_madd(model, (640, 640, 3)) / 1e9,
                 "paper_params": params, "paper_gflops": gflops, "paper_map": mean_ap})
    lines.append(f"| {backbone} | {p6} | {rows[-1]['params'] / 1e6:.2f}M | {params / 1e6:.1f}M "
                 f"| {rows[-1]['gflops']:.1f} | {gflops:.0f} | {mean_ap} |")
  return lines + [""], {"counts": rows}


TABLE = sweep.Table(
    "default_detection", "Default detector on digit scenes, and RetinaNet-50 counts (AA Table "
    "5)", "configs/detection/default.py", {"model.backbone": ("resnet", "aa_resnet")},
    columns=(("mAP@[.5:.95]", "eval_map", "{:.4f}"), ("AP50", "eval_ap50", "{:.4f}"),
             ("AP75", "eval_ap75", "{:.4f}"), ("AP small", "eval_ap_small", "{:.4f}"),
             ("AP medium", "eval_ap_medium", "{:.4f}")),
    about="Command: `python -m experiments.default_detection`. COCOeval on the 500 test "
          f"scenes. Goal: mAP@[.5:.95] ≥ {GOAL_MAP} for both backbones in ≤ {GOAL_S} s each "
          "on a 2-core CPU.",
    goal=lambda r: r["final"]["eval_map"] >= GOAL_MAP and r["wall_s"] <= GOAL_S,
    picture="detections_*.png", appendix=model_counts)

if __name__ == "__main__":
  sweep.main_for(TABLE)
