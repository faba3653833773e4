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
≥ 0.50 on the test scenes for both backbones in ≤ 15 minutes each. Measured on
a quiet 2-core CPU: ResNet 0.599 in 138 s, AA-ResNet 0.602 in 148 s end to end
(README, experiments/results/default_detection.md).

Presets: `:cpu` (a visibly learning run of a minute or two: 150 steps at
batch 16), `:tiny` (a few steps at 32×32 for tests).
"""

import ml_collections

from configs import presets


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.task = "detection"
  config.seed = 0
  config.distributed = False
  config.init_from = ""  # A torchvision .pth or our classification checkpoint.

  config.dataset = ml_collections.ConfigDict()
  config.dataset.name = "digit_scenes"
  config.dataset.data_dir = ""
  config.dataset.train_split = "train"
  config.dataset.eval_split = "test"
  config.dataset.image_size = 64
  config.dataset.scale_range = (0.75, 1.25)  # Scale jitter of the longer side.
  config.dataset.flip = False
  config.dataset.max_boxes = 8  # Training boxes per image (scenes hold ≤ 4).
  config.dataset.eval_max_boxes = 8
  config.dataset.min_box_size = 2.0  # Pixels; smaller crop remnants are dropped.
  config.dataset.shuffle_buffer = 4000

  config.model = ml_collections.ConfigDict()
  config.model.name = "retinanet"
  config.model.backbone = "resnet"  # resnet | se_resnet | aa_resnet [+ depth]
  config.model.depth = 10
  config.model.width = 0.25
  config.model.features = 64
  config.model.head_convs = 4
  config.model.head_norm = "group"
  config.model.min_level = 3
  config.model.max_level = 7
  config.model.heads = 2  # AA backbone only.
  config.model.min_key_dims = 8
  config.model.dtype = "float32"

  config.anchors = ml_collections.ConfigDict()
  config.anchors.anchor_scale = 2.0
  config.anchors.scales_per_octave = 3
  config.anchors.aspect_ratios = (0.5, 1.0, 2.0)

  config.loss = ml_collections.ConfigDict()
  config.loss.alpha = 0.25
  config.loss.gamma = 2.0
  config.loss.box_weight = 1.0
  config.loss.smooth_l1_beta = 0.11
  config.loss.positive_iou = 0.5
  config.loss.negative_iou = 0.4

  config.eval = ml_collections.ConfigDict()
  config.eval.pre_nms_top_k = 100  # Per level; scenes hold ≤ 4 digits (COCO: 1000).
  config.eval.score_threshold = 0.05
  config.eval.iou_threshold = 0.5
  config.eval.max_detections = 100
  config.eval.max_batches = 0  # 0: the whole eval split.

  config.batch_size = 32
  config.num_epochs = 12
  config.num_train_steps = 0  # 0: derive from num_epochs.

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = "adamw"
  config.optimizer.learning_rate = 2e-3
  config.optimizer.weight_decay = 1e-4
  config.optimizer.grad_clip_norm = 1.0
  config.optimizer.schedule = "cosine"
  config.optimizer.warmup_epochs = 0.5

  config.mesh = ml_collections.ConfigDict()
  config.mesh.num_devices = -1
  config.mesh.param_sharding = "replicated"

  config.log_every_steps = 50
  config.eval_every_steps = 750
  config.checkpoint_every_steps = 500
  config.keep_checkpoints = 2
  presets.run_options(config)
  config.num_summary_images = 4

  if preset == "cpu":
    config.batch_size = 16
    config.num_train_steps = 150
    config.log_every_steps = 25
    config.eval_every_steps = config.checkpoint_every_steps = 150
    config.eval.max_batches = 8
  elif preset == "tiny":
    config.dataset.image_size = 32
    config.dataset.shuffle_buffer = 16
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
