"""The default segmentation experiment once per head (the digits-pretrained backbone,
trained first in each workdir, included).

  python -m experiments.default_segmentation [--vary=model.head=aspp] [--set=num_train_steps=N]
"""

from attention_lab.models.segmentation import SEGMENTER_HEADS
from experiments import sweep

GOAL_MIOU, GOAL_S = 0.80, 600
TABLE = sweep.Table(
    "default_segmentation", "Default segmentation experiment (digit scenes, segmenter) per head",
    "configs/segmentation/default.py", {"model.head": tuple(SEGMENTER_HEADS)},
    columns=(("test mIoU", "eval_miou", "{:.4f}"),
             ("pixel acc.", "eval_pixel_accuracy", "{:.4f}"),
             ("mean class acc.", "eval_mean_class_accuracy", "{:.4f}"), ("steps", "steps", "{}")),
    about="Command: `python -m experiments.default_segmentation`. Goal: every head ≥ "
          f"{GOAL_MIOU} mIoU on the digit-scenes test split in ≤ {GOAL_S} s on a 2-core CPU "
          "(the wall time includes the backbone's pretraining).",
    goal=lambda r: r["final"]["eval_miou"] >= GOAL_MIOU and r["wall_s"] <= GOAL_S)

if __name__ == "__main__":
  sweep.main_for(TABLE)
