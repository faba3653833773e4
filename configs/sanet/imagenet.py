"""SANet and its baselines / ablations on ImageNet (SAO paper Tables 3, 4, 6, 8).

  python -m attention_lab.main --config=configs/sanet/imagenet.py[:ROW] --workdir=workdirs/ROW
  # ROW (SAO paper row, expected top-1): sanet (default; Table 3/4 SANet 0.730, 3.44m params,
  #   288m MAdd) | mobilenet_v2 (Table 3 0.720) | senet (Table 4 0.724) | attnnet (0.730) |
  #   attnnet_pool (0.729) | attnnet_mean (AttnNet1/N, 0.730) | sanet_no_sao (Table 6, 0.721) |
  #   sanet_no_global (Table 6 w/o global term, 0.728) | mobilenet_v2_sao (Table 6, 0.727) |
  #   sanet_ones_w (Table 8, w fixed to ones; no accuracy in the paper)
  # the same rows by override: --config.model.name=ROW (every row shares the recipe)

Recipe (SAO appendix 2): 150 epochs of SGD, momentum 0.9, learning rate 0.1
×0.1 at epochs 80, 105, 120, batch 640 (8 RTX 2080 Ti GPUs), dropout keep 0.8
after the global pool, scale to 256 / random 224 crop / flip, centre crop at
eval, batch norm on the SAO coefficients instead of 1/N. Where the paper is
silent: weight decay (we use MobileNetV2's 4e-5, kernels only), warm-up
(none), label smoothing (none), Nesterov (no). The paper initialises every
parameter with Xavier (Glorot) initialisation; our layers use Flax's
defaults (LeCun normal kernels), a difference that matters little with batch
norm. Meant for an 8-GPU host or a TPU slice (about 1.5 days on 8 RTX 2080 Ti
in the paper); needs the ImageNet TFDS data (manual download) under
--config.dataset.data_dir.

Presets: `:cpu` (or `:ROW,cpu`) — the row's network at width 0.25 on the
embedded digits data (32×32, 1 channel), 400 AdamW steps (learning rate 3e-3,
cosine, no dropout): SANet reached eval top-1 62.3% using 115 CPU-seconds
(about 1-1.5 min wall on a quiet 2-core CPU; experiments/results/cpu_presets.md).
The paper's SGD recipe cut to a few hundred steps stays near chance (11.7%
after 20 steps, 14% after 200: lr 0.1 without warm-up and fresh BatchNorm
statistics need many epochs).
`:tiny`: the `:cpu` network, 2 steps (tests).
"""

import ml_collections

from configs import presets, schema

ROWS = ("sanet", "mobilenet_v2", "senet", "attnnet", "attnnet_pool", "attnnet_mean",
        "sanet_no_sao", "sanet_no_global", "mobilenet_v2_sao", "sanet_ones_w")


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="sanet", where="configs/sanet/imagenet.py")
  return recipe(row, size)


def recipe(row: str, size: str | None) -> ml_collections.ConfigDict:
  """The SAO appendix's ImageNet recipe for the network `row`, or its `size` preset ("cpu",
  "tiny"); the KAO paper trains its KANets with it too (configs/kanet/imagenet.py)."""
  config = schema.classification()
  presets.imagenet(config, crop="resize")
  config.model.update(name=row, width=1.0, image_size=224, in_channels=3, dropout=0.2,
                      dtype="float32")
  config.batch_size = 640
  # BatchNorm statistics per GPU: 8 RTX 2080 Ti with 80 images each (PyTorch without
  # SyncBN); KANet's 512 on 8 TITAN Xp set 64 (configs/kanet/imagenet.py).
  config.bn_group_size = 80
  config.num_epochs = 150
  config.optimizer.update(
      name="sgd", learning_rate=0.1, momentum=0.9, nesterov=False, weight_decay=4e-5,
      schedule="step", decay_epochs=(80, 105, 120), decay_factor=0.1, warmup_epochs=0.0)
  config.log_every_steps = 100
  config.eval_every_steps = 5_000
  config.checkpoint_every_steps = 2_000
  config.keep_checkpoints = 3
  if size in ("cpu", "tiny"):
    presets.digits_cpu(config, schema.optimizer())
    config.model.width = 0.25
    if size == "tiny":
      presets.tiny(config)
  return config
