"""Ham paper Table 3: SA, the A² double-attention block, Ham (CD) and Ham (NMF) at 1×512×128×128.

  python -m experiments.efficiency --config=configs/efficiency/ham_table3.py

Paper (d = 512, r = 64, K = 6; PyTorch, TITAN Xp): parameters and MACs must match; memory and
time compare as ratios against SA. Also sweeps the grid side 8..128 (inference).
Hardware/runtime: about 5 minutes on a 2-core CPU. `:tiny` runs in seconds.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "modules"
  config.table = "ham_table3"
  config.title = "Ham Table 3: context modules on a 1×512×128×128 feature map"
  config.batch = 1
  config.side = 128
  config.channels = 512
  config.modules = ("sa", "a2", "ham_cd", "ham_nmf")
  config.baseline = "sa"
  # "auto": SA also with the device's fused attention (cuDNN flash on a GPU, Pallas flash on a
  # TPU; none on a CPU) where its rules allow one 512-dim float32 head; or "none".
  config.fused_attention = "auto"
  config.a2_features = 512
  config.ham_dim = 512
  config.ham_rank = 64
  config.ham_steps = 6
  config.ham_loop_corrected_flops = True
  config.about = (
      "Input {batch}×{side}×{side}×{channels} (channels-last), float32. Params: every trainable "
      "parameter. MACs: multiply-adds of the convolutions and matrix products of the inference "
      "forward (the paper's torchprofile convention), solver loops counted K times; XLA GFLOP: "
      "cost_analysis on the program with the solver loops unrolled (XLA counts a loop body "
      "once). Memory: XLA memory_analysis, temporaries + arguments + outputs (arguments: "
      "parameters and, in training, input and output cotangent). Inference = evaluation-mode "
      "forward; training = forward + backward (grads w.r.t. parameters and input of <out, g>). "
      "Time: median of {repeats} calls (method: Timing and calibration, below). Paper: PyTorch on a TITAN "
      "Xp ('GPU load', 'GPU time'): compare ratios, not absolute values.")
  config.repeats = 5
  config.min_sample_s = 0.0
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  # Paper: {module: (params M, MACs G, train MB, infer MB, train ms, infer ms)}.
  config.paper = {
      "sa": (1.00, 292.0, 5253.0, 2148.0, 242.0, 82.2),
      "a2": (1.01, 25.7, 326.0, 165.0, 22.9, 8.0),
      "ham_cd": (0.50, 16.2, 162.0, 102.0, 20.0, 13.0),
      "ham_nmf": (0.50, 17.6, 202.0, 98.0, 15.6, 7.7),
  }
  config.sweep_sides = (8, 16, 32, 64, 128)
  config.sweep_repeats = 5
  config.memory_budget_gib = 8.0
  config.sweep_note = "Batch 1, 512 channels, inference (evaluation mode)."
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.side = 8
    config.channels = 16
    config.a2_features = 16
    config.ham_dim = 16
    config.ham_rank = 4
    config.ham_steps = 2
    config.repeats = 1
    config.sweep_sides = (4,)
    config.ham_loop_corrected_flops = False
    config.sweep_repeats = 1
    config.memory_budget_gib = 1e-4
    config.sweep_note = "Tiny preset."
  return config
