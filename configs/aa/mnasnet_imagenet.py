"""MnasNet-A1 and AA-MnasNet on ImageNet (AA paper Table 4, width multipliers 0.75 / 1.0 / 1.25 / 1.4).

  python -m attention_lab.main --config=configs/aa/mnasnet_imagenet.py:ROW --workdir=workdirs/ROW_W \
      --config.model.width=W
  # ROW: mnasnet_a1 | aa_mnasnet_a1 (the default); W: 0.75 | 1.0 | 1.25 | 1.4

Expected top-1 (AA Table 4): MnasNet 73.3 / 75.2 / 76.7 / 77.2 and AA-MnasNet
73.9 / 75.7 / 77.2 / 77.7 at widths 0.75 / 1.0 / 1.25 / 1.4 (2.91M → 3.02M,
3.89M → 4.06M, 5.26M → 5.53M, 6.10M → 6.44M parameters).

Recipe: the AA appendix only says "we follow the training setup of [42]
(MnasNet) and train all networks for 350 epochs with RMSProp and exponential
learning-rate decay; for augmented MnasNets we divide the learning rate by 2
and adjust the decay so that the final learning rate stays the same". From
the MnasNet paper (Tan et al. 2019, Sec. 5; not in ../shared/papers): RMSProp
with decay 0.9 and momentum 0.9 (ε 1e-3 as its TPU code), weight decay 1e-5,
batch 4096, learning rate warmed up linearly from 0 to 0.256 over 5 epochs
then ×0.97 every 2.4 epochs, dropout 0.2 before the classifier, Inception
preprocessing at 224², batch-norm momentum 0.99. The augmented rows start at
0.128 and decay by 0.97·2^(2.4/345) per 2.4 epochs, which lands on the same
final rate after the 345 post-warm-up epochs. The learning rate does not
scale with the batch here (the reference used 0.256 at 4096; with fewer
images per step scale learning_rate by B/4096 yourself). Not from the papers
(silent there): our MnasNet's batch-norm momentum is 0.9 (the library's
ConvBN); no label smoothing (the MnasNet TPU code uses 0.1: set
--config.label_smoothing=0.1 to follow it); bfloat16 compute (the TPU
reference's default); weight decay on kernels only.

Hardware/runtime: the reference setup is a TPU v2/v3 pod slice (batch 4096,
about 1-2 days for 350 epochs on 32 cores); needs ImageNet in TFDS (manual
download) under --config.dataset.data_dir.

Presets: `:cpu` (`:mnasnet_a1,cpu`, `:aa_mnasnet_a1,cpu`) — the row's network at
width 0.25 on the embedded digits (32×32, 1 channel), 2 heads, 400 AdamW
steps: eval top-1 above 50% in about two minutes on a 2-core CPU. `:tiny`: 2
steps (tests).
"""

import ml_collections

from configs import presets, schema

ROWS = ("mnasnet_a1", "aa_mnasnet_a1")
EPOCHS, WARMUP, DECAY_EVERY = 350, 5.0, 2.4


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="aa_mnasnet_a1",
                            where="configs/aa/mnasnet_imagenet.py")
  augmented = row.startswith("aa_")
  config = schema.classification()
  presets.imagenet(config, crop="inception")
  config.model.update(name=row, width=1.0, image_size=224, in_channels=3, dropout=0.2,
                      dtype="bfloat16")
  if augmented:
    config.model.heads = 4
  config.batch_size = 4096
  config.num_epochs = EPOCHS
  config.label_smoothing = 0.0
  decays = (EPOCHS - WARMUP) / DECAY_EVERY
  config.optimizer.update(
      name="rmsprop", learning_rate=0.128 if augmented else 0.256, momentum=0.9,
      nesterov=False, weight_decay=1e-5, grad_clip_norm=0.0, schedule="exponential",
      decay_every_epochs=DECAY_EVERY,
      decay_factor=0.97 * 2 ** (1 / decays) if augmented else 0.97, warmup_epochs=WARMUP)
  config.log_every_steps = 100
  config.eval_every_steps = 2_500
  config.checkpoint_every_steps = 2_500
  config.keep_checkpoints = 3
  if size in ("cpu", "tiny"):
    presets.digits_cpu(config, schema.optimizer())
    config.model.width = 0.25
    if augmented:
      config.model.heads = 2
    if size == "tiny":
      presets.tiny(config)
  return config
