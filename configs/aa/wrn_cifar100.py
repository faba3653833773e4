"""Wide-ResNet-28-10 and its attention variants on CIFAR-100 (AA paper Table 1).

  python -m attention_lab.main --config=configs/aa/wrn_cifar100.py[:ROW] --workdir=workdirs/ROW
  # ROW (AA Table 1 row, expected top-1 / top-5): aa_wide_resnet28_10 (default; AA-Wide-ResNet
  #   81.6 / 95.2, 36.2M params) | wide_resnet28_10 (80.3 / 95.0, 36.3M) |
  #   se_wide_resnet28_10 (SE-Wide-ResNet 81.0 / 95.3, 36.5M) |
  #   ge_wide_resnet28_10 (GE-Wide-ResNet, parameter-free Gather-Excite, 79.8 / 95.0)

Pick the row with the preset, not by overriding model.name alone: the
non-augmented rows (WRN, SE, GE) also change the batch size, learning rate
and weight decay, as the appendix says.

Recipe (AA appendix A.1, CIFAR-100): 500 epochs of synchronous SGD, momentum
0.9, on 8 V100s; learning rate warmed up linearly from 0 to 0.2·B/256 over the
first 5% of epochs, then cosine decay; mean normalisation, random crop
(4-pixel padding) and flip. Augmented networks: batch 256, weight decay 5e-4;
non-augmented ones (WRN, SE-WRN, GE-WRN): batch 1024, weight decay 2e-4. No
attention downsampling at CIFAR resolution; Nh = 8, κ = 2υ = 0.2, ≥ 20 key
dims per head. Silent in the paper, our choices: no dropout in the wide
blocks (the WRN paper's 0.3 is not mentioned), no Nesterov, no label
smoothing, per-channel std normalisation as well as the mean, reflect
padding, weight decay on kernels only, the SE reduction 16. CIFAR-100 comes
from TFDS (downloaded once into --config.dataset.data_dir); about a day on 8
V100s (or a TPU slice) for 500 epochs.

Presets: `:cpu` (`:ROW,cpu`) — the row's network at width 0.1 (8-64 channels),
2 heads of at least 4 key dims, on the embedded digits at 16×16, 400 AdamW
steps; expected: eval top-1 ≥ 50% in a few minutes on a 2-core CPU
(experiments/results/paper_presets.md gives each row's top-1 and time). `:tiny`: the
same at depth 10 (one block per stage), 2 steps (tests).
"""

import ml_collections

from configs import presets, schema

ROWS = ("aa_wide_resnet28_10", "wide_resnet28_10", "se_wide_resnet28_10", "ge_wide_resnet28_10")


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="aa_wide_resnet28_10",
                            where="configs/aa/wrn_cifar100.py")
  augmented = row.startswith("aa_")
  config = schema.classification()
  d = config.dataset
  d.name, d.train_split, d.eval_split = "cifar100", "train", "test"
  d.image_size = 32
  d.crop = "resize"
  config.model.update(name=row, width=1.0, image_size=32, in_channels=3, dropout=0.0,
                      dtype="float32")
  if augmented:
    config.model.heads, config.model.min_key_dims = 8, 20
  config.batch_size = 256 if augmented else 1024
  config.bn_group_size = config.batch_size // 8  # BatchNorm per V100 worker (32 or 128)
  config.num_epochs = 500
  config.optimizer.update(
      name="sgd", learning_rate=0.2 * config.batch_size / 256, momentum=0.9, nesterov=False,
      weight_decay=5e-4 if augmented else 2e-4, schedule="cosine",
      warmup_epochs=0.05 * config.num_epochs)
  config.log_every_steps = 100
  config.eval_every_steps = 2_000
  config.checkpoint_every_steps = 2_000
  if size in ("cpu", "tiny"):
    presets.digits_cpu(config, schema.optimizer(), image_size=16)
    config.model.width = 0.1
    if augmented:
      config.model.heads, config.model.min_key_dims = 2, 4
    if size == "tiny":  # WRN-10 (one block per stage): cheap to compile
      config.model.depth = 10
      presets.tiny(config)
  return config
