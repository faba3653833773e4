"""Default detector: a small RetinaNet on the embedded `digit_scenes`, on the CPU.

  python -m attention_lab.main --config=configs/detection/default.py --workdir=workdirs/det \
      [--config.model.backbone=resnet|aa_resnet|se_resnet]

Data: 64×64 scenes of 1-4 real handwritten digits (scikit-learn's, embedded,
no download), boxes of the visible digit pixels, 10 classes; 4,000 train /
500 test scenes whose digits are disjoint. Model: RetinaNet (FPN P3-P7, 9
anchors per location, 4-conv class and box subnets with GroupNorm, focal loss
α 0.25 γ 2, smooth-L1 boxes) on a ResNet-10 at width 0.25 (16-128 channels)
with 64 FPN channels; `aa_resnet` augments the 3×3 convs of stages 2-4 with
relative self-attention (κ = 2υ = 0.2, 2 heads of ≥ 8 key dimensions at this
width). At 64×64 the anchors are halved (anchor_scale 2: 16-203 pixels from
P3 to P7) to fit digits of 5-30 pixels. AdamW 2e-3, cosine, 12 epochs (1,500
steps at batch 32). Horizontal flips are off: a mirrored digit is not that
digit.

Expected (experiments/default_detection.py, 2-core CPU): COCO mAP@[.5:.95]
≥ 0.50 on the test scenes for both backbones in ≤ 15 minutes each (measured:
experiments/results/default_detection.md).

Presets: `:cpu` (a visibly learning run of a minute or two: 150 steps at
batch 16), `:tiny` (a few steps at 32×32 for tests).
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.detection()
  d = config.dataset
  d.name = "digit_scenes"
  d.image_size = 64
  d.scale_range = (0.75, 1.25)
  d.flip = False
  d.max_boxes = d.eval_max_boxes = 8  # scenes hold ≤ 4
  d.min_box_size = 2.0

  config.model.update(
      name="retinanet", backbone="resnet",  # resnet | se_resnet | aa_resnet [+ depth]
      depth=10, width=0.25, features=64, head_convs=4, head_norm="group",
      heads=2, min_key_dims=8,  # AA backbone only
      dtype="float32")

  config.anchors.anchor_scale = 2.0
  config.eval.pre_nms_top_k = 100  # per level; scenes hold ≤ 4 digits (COCO: 1000)

  config.batch_size = 32
  config.num_epochs = 12
  config.optimizer.update(name="adamw", learning_rate=2e-3, weight_decay=1e-4, grad_clip_norm=1.0,
                          schedule="cosine", warmup_epochs=0.5)

  config.log_every_steps = 50
  config.eval_every_steps = 750
  config.checkpoint_every_steps = 500

  if preset == "cpu":
    config.batch_size = 16
    config.num_train_steps = 150
    config.log_every_steps = 25
    config.eval_every_steps = config.checkpoint_every_steps = 150
    config.eval.max_batches = 8
  elif preset == "tiny":
    config.dataset.image_size = 32
    config.model.width = 0.125
    config.model.features = 16
    config.model.head_convs = 1
    config.model.max_level = 5
    config.model.min_key_dims = 4
    config.batch_size = 8
    config.num_train_steps = 2
    config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
    config.eval.max_batches = 1
    config.num_summary_images = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/detection/default.py; expected "
                     f"'cpu' or 'tiny'")
  return config
