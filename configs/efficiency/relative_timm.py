"""2D relative self-attention (AA Eq. 3-4) beside timm's BottleneckAttn.

  python -m experiments.relative_timm --config=configs/efficiency/relative_timm.py

Case: forward + backward, and forward alone, of the 1×1 qkv
projection plus relative attention, batch 2, 256 channels, 8 heads × 32, grids
14², 28², 56², 112². Ours is `layers.GlobalAttention(256, "relative",
project="qkv", use_bias=False)` with the library default
(`query_chunk_size="auto"`). timm's `BottleneckAttn(256, feat_size,
num_heads=8, dim_head=32)` runs beside it when torch and timm are installed
(optional; never required); it is skipped above `timm_max_side` (at 112² its
float32 (HW)² attention and relative logits alone are 2 × 10 GB per pass).
Plus XLA temporaries and kernel / byte counts for ours, and `aa_resnet`
(AA-ResNet-50 vs ResNet-50 forward + backward at 224², batch `resnet_batch`).
The notes of experiments/results/relative_timm.md compare the operator before its blocked
custom VJP.

Goals: ours ≤ timm in time at every size where timm runs (forward
+ backward and forward alone); our temporaries at 56² ≤ 0.5 GiB; AA-ResNet-50
≤ 1.15× ResNet-50. Writes experiments/results/relative_timm.{md,json}.
Hardware/runtime: 3 min on a quiet 2-core CPU for 14²-56² and the ResNets; 112² adds
minutes per sample (`sides` to narrow).
`:tiny` runs in a minute (small grids, no ResNets).
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.batch = 2
  config.channels = 256
  config.heads = 8
  config.head_dim = 32
  config.sides = (14, 28, 56, 112)
  config.modes = ("train", "forward")
  config.timm_max_side = 56
  config.repeats = 7
  config.big_repeats = 3  # sides ≥ 56
  config.huge_repeats = 2  # sides ≥ 112
  config.min_sample_s = 0.2
  config.aa_resnet = True
  config.resnet_batch = 2
  config.resnet_size = 224
  config.resnet_repeats = 5
  config.out_dir = ""
  config.merge = True  # keep sizes not measured now from the saved json (`--config.sides`)
  config.about = (
      "Case: 1×1 qkv projection + 2D relative self-attention, batch {batch}, {channels} "
      "channels, {heads} heads × {head_dim}. Ours: `GlobalAttention(relative, project='qkv', "
      "use_bias=False)`, `query_chunk_size='auto'`. Times: median (min) of samples after "
      "warm-up, ours by the method of 'Timing and calibration' below, timm's by wall time (its "
      "CUDA queue waited for, so its launches count). Speed-up = timm / ours. Kernels: XLA "
      "kernels of the entry and loop bodies (a loop body once); logits passes: those writing "
      "at least one query row's logits (B·H·Y·XY elements); XLA bytes: cost_analysis 'bytes "
      "accessed' (a loop body once).")
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.sides = (6, 8)
    config.repeats = 2
    config.big_repeats = 1
    config.huge_repeats = 1
    config.min_sample_s = 0.0
    config.aa_resnet = False
    config.batch, config.channels, config.heads, config.head_dim = 1, 16, 2, 8
  return config
