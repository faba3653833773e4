"""KANet and its baselines / ablations on ImageNet (KAO paper Tables 2-4).

  python -m attention_lab.main --config=configs/kanet/imagenet.py[:ROW] --workdir=workdirs/ROW
  # ROW (KAO paper row, expected top-1): kanet_kv (default; Table 2 KANet_KV 0.729, 3.44m,
  #   288m MAdd) | kanet_qkv (Table 2 KANet_QKV 0.728, 281m) | mobilenet_v2 (0.720) |
  #   attnnet (Table 3, 365m MAdd) | attnnet_pool (Table 3, 300m) |
  #   mobilenet_v2_kao (Table 4 MobileNetV2+KAO 0.726, 3.46m) | kanet_no_kao (Table 4
  #   KANet w/o KAO 0.721)
  # the same rows by override: --config.model.name=ROW (every row shares the recipe)

Recipe: the KAO appendix, which is SANet's (configs/mobilenet_imagenet.py), at batch 512 on
8 TITAN Xp (BatchNorm groups of 64; SANet: 640 on 8 RTX 2080 Ti; the learning rate is 0.1
in both papers, so it is not rescaled); batch norm on the coefficient matrices. Hardware
as in configs/sanet/imagenet.py.

Presets: `:cpu` (or `:ROW,cpu`) and `:tiny`, the sizes of configs/mobilenet_imagenet.py.
Expected at `:cpu`: eval top-1 ≥ 50% in a few minutes on a 2-core CPU
(experiments/results/paper_presets.md gives each row's top-1 and time).
"""

import ml_collections

from configs import mobilenet_imagenet, presets

ROWS = ("kanet_kv", "kanet_qkv", "mobilenet_v2", "attnnet", "attnnet_pool", "mobilenet_v2_kao",
        "kanet_no_kao")
BATCH_SIZE = 512  # KAO appendix: "8 TITAN Xp GPUs and a batch size of 512"


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="kanet_kv", where="configs/kanet/imagenet.py")
  return mobilenet_imagenet.recipe(row, size, batch_size=BATCH_SIZE)
