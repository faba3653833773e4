"""KANet on ImageNet (KAO paper Table 2: KANet_KV 72.9%, KANet_QKV 72.8% top-1, 3.44m params).

  python -m attention_lab.main --config=configs/kanet/imagenet.py --workdir=workdirs/kanet_kv
  python -m attention_lab.main --config=configs/kanet/imagenet.py --workdir=workdirs/kanet_qkv \
      --config.model.name=kanet_qkv
  # ablations (KAO Tables 3-4): --config.model.name=mobilenet_v2_kao | kanet_no_kao

Recipe (KAO appendix, same as SANet's): SGD momentum 0.9, 0.1 ×0.1 at epochs
80/105/120 of 150, dropout keep 0.8, 256-resize / 224 crop / flip. Hardware
and the `:cpu` preset as in configs/sanet/imagenet.py.
"""

import ml_collections

from configs.sanet import imagenet as sanet_imagenet


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = sanet_imagenet.get_config(preset)
  config.model.name = "kanet_kv"
  return config
