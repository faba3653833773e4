"""RetinaNet on COCO with a ResNet-50 or AA-ResNet-50 backbone (AA paper Table 5).

  python -m attention_lab.main --config=configs/aa/coco_retinanet.py --workdir=workdirs/retina_r50
  python -m attention_lab.main --config=configs/aa/coco_retinanet.py --workdir=workdirs/retina_aa50 \
      --config.model.backbone=aa_resnet50
  # also: --config.model.backbone=se_resnet50 | resnet101 | aa_resnet101 (the other rows)

Paper rows (Table 5, mAP / AP50 / AP75 on COCO, 640×640): ResNet-50 36.8 /
54.5 / 39.5 (33.4M params, 182 GFlops); AA-ResNet-50 38.2 / 56.5 / 40.7
(33.1M, 182 GFlops); SE-ResNet-50 36.5; ResNet-101 38.5, AA-ResNet-101 39.2.

Recipe (AA appendix: "the setup described in [26, 11]", trained from scratch
for 150 epochs without ImageNet pretraining, in the TPU RetinaNet codebase):
640×640 inputs with scale jitter [0.8, 1.2] and flips, FPN P3-P7 with 256
channels (P6 from P5 and batch norm in the heads, as that codebase), 9 anchors
per location at anchor scale 4, focal loss α 0.25 γ 2, smooth-L1 boxes; SGD
with momentum 0.9, weight decay 4e-5 (He et al. 2019's from-scratch setting),
batch 64, learning rate 0.08 warmed up over the first epoch and ×0.1 at epochs
130 and 145 of 150. Evaluation: COCOeval on val2017 (5,000 images), ≤ 100
detections per image. Meant for a TPU v3-32 class slice (or 8+ large GPUs) for
days; COCO comes from TFDS `coco/2017` (download once into
--config.dataset.data_dir). `--config.init_from=` a torchvision ResNet .pth or
one of our ImageNet classification workdirs trains from pretrained weights
instead (then 12-24 epochs suffice).

Preset `:cpu`: the same recipe and model structure at ResNet-10 width 1/8 with
32 FPN channels on the embedded digit scenes at 64×64, 40 steps — a minute or
two on a 2-core CPU; it proves the configuration runs, not the paper's number.
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.detection()
  d = config.dataset
  d.name = "coco/2017"
  d.train_split, d.eval_split = "train", "validation"
  d.image_size = 640
  d.scale_range = (0.8, 1.2)
  d.flip = True
  d.max_boxes = d.eval_max_boxes = 100
  d.min_box_size = 1.0

  config.model.update(
      name="retinanet", backbone="resnet50", width=1.0, features=256, head_convs=4,
      min_level=3, max_level=7, head_norm="batch", p6_input="p5", dtype="bfloat16")
  config.anchors.anchor_scale = 4.0
  config.eval.pre_nms_top_k = 1000

  config.batch_size = 64
  config.num_epochs = 150
  config.optimizer.update(
      name="sgd", learning_rate=0.08, momentum=0.9, nesterov=False, weight_decay=4e-5,
      grad_clip_norm=0.0, schedule="step", decay_epochs=(130, 145), decay_factor=0.1,
      warmup_epochs=1.0)
  config.log_every_steps = 100
  config.eval_every_steps = 20_000
  config.checkpoint_every_steps = 2_000
  if preset == "cpu":
    config.dataset.name = "digit_scenes"
    config.dataset.train_split, config.dataset.eval_split = "train", "test"
    config.dataset.image_size = 64
    config.dataset.max_boxes = config.dataset.eval_max_boxes = 8
    config.model.backbone, config.model.depth = "resnet", 10
    config.model.width, config.model.features, config.model.dtype = 0.125, 32, "float32"
    config.model.heads, config.model.min_key_dims = 2, 4
    config.anchors.anchor_scale = 2.0
    config.batch_size = 16
    config.num_train_steps = 40
    config.optimizer.learning_rate = 0.02
    config.optimizer.warmup_epochs = 0.0
    config.optimizer.decay_epochs = (0.13, 0.145)  # Of 0.16 epochs: the same shape, shrunk.
    config.log_every_steps = 10
    config.eval_every_steps = config.checkpoint_every_steps = 40
    config.eval.max_batches = 4
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/aa/coco_retinanet.py; expected "
                     f"'cpu'")
  return config
