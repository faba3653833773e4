"""KANet and its baselines / ablations on ImageNet (KAO paper Tables 2-4).

  python -m attention_lab.main --config=configs/kanet/imagenet.py[:ROW] --workdir=workdirs/ROW
  # ROW (KAO paper row, expected top-1): kanet_kv (default; Table 2 KANet_KV 0.729, 3.44m,
  #   288m MAdd) | kanet_qkv (Table 2 KANet_QKV 0.728, 281m) | mobilenet_v2 (0.720) |
  #   attnnet (Table 3, 365m MAdd) | attnnet_pool (Table 3, 300m) |
  #   mobilenet_v2_kao (Table 4 MobileNetV2+KAO 0.726, 3.46m) | kanet_no_kao (Table 4
  #   KANet w/o KAO 0.721)
  # the same rows by override: --config.model.name=ROW (every row shares the recipe)

Recipe (KAO appendix; SANet's, see configs/sanet/imagenet.py, except the
batch): SGD momentum 0.9, 0.1 ×0.1 at epochs 80/105/120 of 150, batch 512 on
8 TITAN Xp (SANet: 640 on 8 RTX 2080 Ti; the learning rate is 0.1 in both
papers, so it is not rescaled), dropout keep 0.8, 256-resize / 224 crop /
flip, batch norm on the coefficient matrices. Silent there as in the SAO paper: weight decay (4e-5), warm-up,
label smoothing. Hardware and the `:cpu` / `:tiny` presets as in
configs/sanet/imagenet.py (KANet_KV `:cpu`: eval top-1 92.7% using 121
CPU-seconds, about 1-1.5 min wall on a quiet 2-core CPU).
"""

import ml_collections

from configs import presets
from configs.sanet import imagenet as sao

BATCH_SIZE = 512  # KAO appendix: "8 TITAN Xp GPUs and a batch size of 512"

ROWS = ("kanet_kv", "kanet_qkv", "mobilenet_v2", "attnnet", "attnnet_pool", "mobilenet_v2_kao",
        "kanet_no_kao")


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  row, size = presets.parse(preset, ROWS, default_row="kanet_kv", where="configs/kanet/imagenet.py")
  config = sao.recipe(row, size)
  if size is None:
    config.batch_size = BATCH_SIZE  # the `:cpu` / `:tiny` sizes keep their own batch
    config.bn_group_size = BATCH_SIZE // 8  # BatchNorm per GPU: 64 on each of 8 TITAN Xp
  return config
