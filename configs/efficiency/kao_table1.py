"""KAO paper Table 1: Attn, Attn+Pool, KAO_KV and KAO_QKV, batch 8, 8 channels in and out.

  python -m experiments.efficiency --config=configs/efficiency/kao_table1.py

Paper (TensorFlow, CPU): ratios against Attn must reproduce: KAO_KV 3.5×, 10.1×, 31.1× and
KAO_QKV 6.8×, 40.9×, 305.8× faster. Also sweeps the grid side 8..128.
Hardware/runtime: about 2 minutes on a 2-core CPU. `:tiny` runs in seconds.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "operators"
  config.table = "kao_table1"
  config.title = "KAO Table 1: attention operators on 8 inputs of 8 channels (1 head, Q = K = V)"
  config.paper_source = "KAO paper Table 1 (TensorFlow profile, CPU)"
  config.batch = 8
  config.heads = 1
  config.sizes = ((14, 8), (28, 8), (56, 8))
  config.operators = ("attn", "attn_pool", "kao_kv", "kao_qkv")
  config.baseline = "attn"
  config.dtype = "float32"  # the papers'; the accelerator report adds bfloat16
  # "auto": beside XLA's regular attention, the device's fused kernel (cuDNN flash on a GPU,
  # Pallas flash on a TPU; none on a CPU), see experiments/efficiency_fused.py; or "none".
  config.fused_attention = "auto"
  config.repeats = 9
  config.min_sample_s = 0.05
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  # Paper: {operator: {side: (MAdd m, memory MB, time ms, memory saving %, speed-up)}}.
  config.paper = {
      "attn": {"14": (0.63, 5.2, 5.8, 0.0, 1.0), "28": (9.88, 79.9, 72.4, 0.0, 1.0),
               "56": (157.55, 1262.6, 1541.1, 0.0, 1.0)},
      "attn_pool": {"14": (0.16, 1.5, 2.0, 71.65, 3.0), "28": (2.47, 20.7, 20.9, 74.13, 3.5),
                    "56": (39.39, 318.7, 396.9, 74.76, 3.9)},
      "kao_kv": {"14": (0.09, 0.9, 1.7, 82.03, 3.5), "28": (0.71, 6.5, 7.1, 91.88, 10.1),
                 "56": (5.62, 48.2, 49.6, 96.18, 31.1)},
      "kao_qkv": {"14": (0.01, 0.3, 0.8, 95.06, 6.8), "28": (0.05, 0.9, 1.7, 98.85, 40.9),
                  "56": (0.21, 3.4, 5.1, 99.73, 305.8)},
  }
  config.sweep_sides = (8, 16, 32, 64, 128)
  config.sweep_channels = 8
  config.sweep_repeats = 5
  config.memory_budget_gib = 4.0
  config.sweep_note = "Batch 8, 8 channels, 1 head, Q = K = V."
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.sizes = ((6, 8), (8, 8))
    config.repeats = 1
    config.min_sample_s = 0.0
    config.sweep_sides = (4, 8)
    config.sweep_repeats = 1
    config.memory_budget_gib = 2e-5
    config.sweep_note = "Tiny preset."
  return config
