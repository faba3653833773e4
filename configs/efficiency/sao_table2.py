"""SAO paper Table 2: Attn, Attn+Pool, Attn1/N and SAO on one 2D input, batch 1, Q = K = V.

  python -m experiments.efficiency --config=configs/efficiency/sao_table2.py

Paper (TensorFlow, CPU): ratios against Attn must reproduce (SAO 6.62×, 14.18×, 58.21× faster,
79.54%, 88.78%, 94.65% memory saved); MAdd within 3%. Also sweeps the grid side 8..128.
Hardware/runtime: about 2 minutes on a 2-core CPU. `:tiny` runs in seconds.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "operators"
  config.table = "sao_table2"
  config.title = "SAO Table 2: attention operators on one input (batch 1, 1 head, Q = K = V)"
  config.paper_source = "SAO paper Table 2 (TensorFlow profile, CPU)"
  config.batch = 1
  config.heads = 1
  config.sizes = ((14, 64), (28, 128), (56, 256))  # (side, channels)
  config.operators = ("attn", "attn_pool", "attn_mean", "sao")
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
      "attn": {"14": (4.92, 20.97, 20.47, 0.0, 1.0), "28": (157.35, 301.99, 450.22, 0.0, 1.0),
               "56": (5035.26, 5040.0, 12920.0, 0.0, 1.0)},
      "attn_pool": {"14": (1.23, 8.39, 5.07, 59.99, 4.04),
                    "28": (39.34, 100.66, 119.55, 66.67, 3.77),
                    "56": (1258.82, 1340.0, 4820.0, 73.38, 2.68)},
      "attn_mean": {"14": (1.61, 5.24, 6.97, 75.01, 2.94),
                    "28": (25.69, 37.75, 70.52, 87.50, 6.38),
                    "56": (411.04, 280.0, 1020.0, 94.34, 12.66)},
      "sao": {"14": (0.05, 4.29, 3.09, 79.54, 6.62), "28": (0.40, 33.88, 31.76, 88.78, 14.18),
              "56": (3.21, 260.0, 220.0, 94.65, 58.21)},
  }
  # Plot sweep: grid side against time and memory at a fixed channel count.
  config.sweep_sides = (8, 16, 32, 64, 128)
  config.sweep_channels = 64
  config.sweep_repeats = 5
  config.memory_budget_gib = 4.0
  config.sweep_note = "Batch 1, 64 channels, 1 head, Q = K = V."
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.sizes = ((6, 8), (8, 8))
    config.repeats = 1
    config.min_sample_s = 0.0
    config.sweep_sides = (4, 8)
    config.sweep_channels = 8
    config.sweep_repeats = 1
    config.memory_budget_gib = 2e-5  # Attn passes it at 8²: exercises "over budget".
    config.sweep_note = "Tiny preset."
  return config
