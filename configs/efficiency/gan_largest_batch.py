"""Refined-SA Table 3: the largest SAGAN / ISAGAN training batch within a GPU's memory.

  python -m experiments.efficiency --config=configs/efficiency/gan_largest_batch.py

The training iteration of configs/efficiency/isa_tables.py (configs/efficiency/gan.py), compiled (never run) at doubling
batches: for the paper's GTX 1080 Ti (XLA:GPU for attention_lab/gpu_targets/gtx_1080_ti.txtpb;
needs JAX's CUDA plugin, `pip install -e '.[gpu]'`, no GPU) at the paper's 64² (width 16) and at
SAGAN's ImageNet 128² (width 64), and on XLA:CPU within 11 GiB at 128². Paper (GTX 1080 Ti,
11 GB, 64²): SAGAN 256, ISAGAN ≥ 1024.
Hardware/runtime: about 10 minutes on a 2-core CPU. `:tiny` (XLA:CPU only) in seconds.
"""

import ml_collections

from configs.efficiency import gan


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = gan.measurement(preset)
  config.table = "gan_largest_batch"
  config.title = "Refined-SA Table 3: largest GAN training batch within a memory budget"
  config.timed = False  # the searches only
  config.variants = ("sagan", "isagan")
  # target: "cpu" (XLA:CPU, budget_gib) or a GPU target config (budget: its memory).
  config.largest_batch = (
      {"target": "gtx_1080_ti", "image_size": 64, "width": 16, "start": 64},
      {"target": "gtx_1080_ti", "image_size": 128, "width": 64, "start": 16},
      {"target": "cpu", "budget_gib": 11.0, "image_size": 128, "width": 64, "start": 32})
  if preset == "tiny":
    config.largest_batch = (
        {"target": "cpu", "budget_gib": 0.01, "image_size": 32, "width": 4, "start": 1},)
  return config
