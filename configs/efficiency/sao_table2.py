"""SAO paper Table 2: Attn, Attn+Pool, Attn1/N and SAO on one 2D input, batch 1, Q = K = V.

  python -m experiments.efficiency --config=configs/efficiency/sao_table2.py

The paper measured TensorFlow on a CPU; the ratios against Attn (speed-up,
memory saving) are what must reproduce: SAO 6.62×, 14.18×, 58.21× faster at
14²×64, 28²×128, 56²×256 with 94.65% memory saved at the largest size.
Runs in a couple of minutes on a 2-core CPU.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.table = "sao_table2"
  config.title = "SAO Table 2: attention operators on one input (batch 1, 1 head)"
  config.batch = 1
  config.heads = 1
  config.sizes = ((14, 64), (28, 128), (56, 256))  # (side, channels)
  config.operators = ("attn", "attn_pool", "attn_mean", "sao")
  config.repeats = 7
  # Paper: {operator: {side: (MAdd in millions, memory in MB, time in ms)}}.
  config.paper = {
      "attn": {"14": (4.92, 20.97, 20.47), "28": (157.35, 301.99, 450.22),
               "56": (5035.26, 5040.0, 12920.0)},
      "attn_pool": {"56": (1258.82, 1340.0, 4820.0)},
      "attn_mean": {"56": (411.04, 280.0, 1020.0)},
      "sao": {"14": (0.05, 4.29, 3.09), "28": (0.40, 33.88, 31.76), "56": (3.21, 260.0, 220.0)},
  }
  if preset == "tiny":
    config.sizes = ((6, 8), (8, 8))
    config.repeats = 1
  return config
