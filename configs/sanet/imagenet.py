"""SANet and its baselines / ablations on ImageNet (SAO paper Tables 3, 4, 6, 8).

  python -m attention_lab.main --config=configs/sanet/imagenet.py[:ROW] --workdir=workdirs/ROW
  # ROW (SAO paper row, expected top-1): sanet (default; Table 3/4 SANet 0.730, 3.44m params,
  #   288m MAdd) | mobilenet_v2 (Table 3 0.720) | senet (Table 4 0.724) | attnnet (0.730) |
  #   attnnet_pool (0.729) | attnnet_mean (AttnNet1/N, 0.730) | sanet_no_sao (Table 6, 0.721) |
  #   sanet_no_global (Table 6 w/o global term, 0.728) | mobilenet_v2_sao (Table 6, 0.727) |
  #   sanet_ones_w (Table 8, w fixed to ones; no accuracy in the paper)
  # the same rows by override: --config.model.name=ROW (every row shares the recipe)

Recipe: SAO appendix 2 (configs/mobilenet_imagenet.py, shared with KANet) at batch 640 on 8
RTX 2080 Ti GPUs (BatchNorm groups of 80); batch norm on the SAO coefficients, not 1/N. The
paper initialises every parameter with Xavier (Glorot) initialisation; our layers use
Flax's defaults (LeCun normal kernels), a difference that matters little with batch norm.
Meant for an 8-GPU host or a TPU slice (about 1.5 days on 8 RTX 2080 Ti in the paper);
needs the ImageNet TFDS data (manual download) under --config.dataset.data_dir.

Presets: `:cpu` (or `:ROW,cpu`) and `:tiny`, the sizes of configs/mobilenet_imagenet.py.
Expected at `:cpu`: eval top-1 ≥ 50% in a few minutes on a 2-core CPU
(experiments/results/paper_presets.md gives each row's top-1 and time).
"""

import ml_collections

from configs import mobilenet_imagenet, presets

ROWS = ("sanet", "mobilenet_v2", "senet", "attnnet", "attnnet_pool", "attnnet_mean",
        "sanet_no_sao", "sanet_no_global", "mobilenet_v2_sao", "sanet_ones_w")
BATCH_SIZE = 640  # SAO appendix 2: 8 RTX 2080 Ti GPUs, 80 images each


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="sanet", where="configs/sanet/imagenet.py")
  return mobilenet_imagenet.recipe(row, size, batch_size=BATCH_SIZE)
