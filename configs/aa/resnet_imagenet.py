"""ResNets and AA-ResNets on ImageNet (AA paper Tables 2, 3, 6, 7).

  python -m attention_lab.main --config=configs/aa/resnet_imagenet.py:ROW --workdir=workdirs/ROW
  # ROW (Table 3): resnet34 | se_resnet34 | aa_resnet34 | resnet50 | se_resnet50 |
  #   aa_resnet50 (the default) | resnet101 | se_resnet101 | aa_resnet101 | resnet152 |
  #   se_resnet152 | aa_resnet152
  # Table 2 "AA (υ=0.25)" and Table 6 (fully attentional): ROW=aa_resnet50 with
  #   --config.model.kappa=K --config.model.upsilon=K, K ∈ {0.25, 0.5, 0.75, 1.0}
  # Table 7 (positional encodings): ROW=aa_resnet34 or aa_resnet50 with
  #   --config.model.positional=none | sine | coordconv | relative
  #   (coordconv: CoordConv's (x, y, r) channels concatenated to the attention input, AA Sec. 4.5)

Pick the row with the preset, not by overriding model.name alone: the row also
sets κ, υ (0.25 / 0.25 for AA-ResNet-34, 0.2 / 0.1 for the others) and the
batch size. Expected top-1 (paper, 100 epochs): ResNet-34 73.6, SE 74.3, AA
74.7; ResNet-50 76.4, SE 77.5, AA 77.7; ResNet-101 77.9, SE 78.4, AA 78.7;
ResNet-152 78.4, SE 78.9, AA 79.1; Table 6 κ=υ 0.25/0.5/0.75/1.0: 77.7 /
77.3 / 76.7 / 73.9; Table 7 AA-ResNet-50 none / sine / CoordConv / relative:
77.5 / 77.5 / 77.5 / 77.7 (AA-ResNet-34: 74.4 / 74.4 / 74.4 / 74.7).

Recipe (AA appendix A.1, "ImageNet classification with ResNet"): 100 epochs of
synchronous SGD, momentum 0.9, weight decay 1e-4, learning rate 0.128 per 256
images scaled linearly with the total batch, warmed up linearly from 0 over
the first 5% of epochs and divided by 10 at epochs 30, 60, 80 and 90; standard
Inception augmentation (random area 8-100% / aspect 3/4-4/3 crop to 224,
flip); 8 V100 GPUs with "the largest batch per worker in {32, 64, 128, 256}
that fits". Where the paper is silent we chose: total batch 1024 (128 per
worker on 8 GPUs; 256 for the non-augmented ResNets and SE-ResNets, i.e.
2048) — override batch_size and learning_rate together (lr = 0.128·B/256);
weight decay on kernels only; no label smoothing (not mentioned; the TF TPU
ResNet reference the paper's model follows defaults to none; set
--config.label_smoothing=0.1 to try it); evaluation centre crop 224 of the
256-resized image; bfloat16 compute on accelerators (the paper's Table 9
counts attention maps in bfloat16, i.e. it trained in bfloat16; parameters
stay float32). Heads Nh = 8 and ≥ 20 key dims per head as the models' defaults.

Hardware/runtime: the paper used 8 V100s; on a TPU v3-32 / v4-32 slice (batch
4096: set batch_size=4096 and learning_rate=2.048) ResNet-50 takes a few hours,
AA-ResNet-50 about 1.3× that. Needs ImageNet in TFDS (manual download) under
--config.dataset.data_dir.

Presets: `:cpu` (e.g. `:aa_resnet50,cpu`) — the row's network at width 1/8
(8-64 bottleneck channels), 2 heads of ≥ 4 key dims, on the embedded digits
(32×32, 1 channel), 400 AdamW steps: eval top-1 well above 50% in about two
minutes on a 2-core CPU. `:tiny`: the `:cpu` network cut to one block per
stage (depth 10 / 14), 2 steps (tests).
"""

import ml_collections

from configs import presets, schema

DEPTHS = (34, 50, 101, 152)
ROWS = tuple(f"{kind}resnet{d}" for d in DEPTHS for kind in ("", "se_", "aa_"))


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="aa_resnet50",
                            where="configs/aa/resnet_imagenet.py")
  augmented = row.startswith("aa_")
  config = schema.classification()
  presets.imagenet(config, crop="inception")
  config.model.update(name=row, width=1.0, image_size=224, in_channels=3, dtype="bfloat16")
  if augmented:
    kappa, upsilon = (0.25, 0.25) if row == "aa_resnet34" else (0.2, 0.1)
    config.model.update(kappa=kappa, upsilon=upsilon, heads=8, min_key_dims=20,
                        positional="relative")
  config.batch_size = 1024 if augmented else 2048
  config.bn_group_size = config.batch_size // 8  # BatchNorm per V100 worker (128 or 256)
  config.num_epochs = 100
  config.label_smoothing = 0.0
  config.optimizer.update(
      name="sgd", learning_rate=0.128 * config.batch_size / 256, momentum=0.9, nesterov=False,
      weight_decay=1e-4, grad_clip_norm=0.0, schedule="step", decay_epochs=(30, 60, 80, 90),
      decay_factor=0.1, warmup_epochs=5.0)
  config.log_every_steps = 100
  config.eval_every_steps = 2_500
  config.checkpoint_every_steps = 2_500
  config.keep_checkpoints = 3
  if size in ("cpu", "tiny"):
    presets.digits_cpu(config, schema.optimizer())
    config.model.width = 0.125
    if augmented:
      config.model.heads, config.model.min_key_dims = 2, 4
    if size == "tiny":  # one block per stage (basic for ResNet-34 rows): cheap to compile
      config.model.depth = 10 if row.endswith("34") else 14
      presets.tiny(config)
  return config
