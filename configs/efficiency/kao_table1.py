"""KAO paper Table 1: Attn, Attn+Pool, KAO_KV and KAO_QKV, batch 8, 8 channels in and out.

  python -m experiments.efficiency --config=configs/efficiency/kao_table1.py

The paper measured TensorFlow on a CPU; what must reproduce are the ratios
against Attn: KAO_KV 3.5×, 10.1×, 31.1× and KAO_QKV 6.8×, 40.9×, 305.8× faster
at 14², 28², 56². Runs in about a minute on a 2-core CPU.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.table = "kao_table1"
  config.title = "KAO Table 1: attention operators on 8 inputs of 8 channels (1 head)"
  config.batch = 8
  config.heads = 1
  config.sizes = ((14, 8), (28, 8), (56, 8))
  config.operators = ("attn", "attn_pool", "kao_kv", "kao_qkv")
  config.repeats = 7
  config.paper = {
      "attn": {"56": (157.55, 1262.6, 1541.1)},
      "attn_pool": {"56": (39.39, 318.7, 396.9)},
      "kao_kv": {"56": (5.62, 48.2, 49.6)},
      "kao_qkv": {"56": (0.21, 3.4, 5.1)},
  }
  config.paper_speedup = {"kao_kv": {"14": 3.5, "28": 10.1, "56": 31.1},
                          "kao_qkv": {"14": 6.8, "28": 40.9, "56": 305.8}}
  if preset == "tiny":
    config.sizes = ((6, 8), (8, 8))
    config.repeats = 1
  return config
