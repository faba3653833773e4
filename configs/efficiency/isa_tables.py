"""Refined-SA paper Tables 2-3: SAGAN, ISAGAN and SGAN, 64×64 generator + discriminator.

  python -m experiments.efficiency --config=configs/efficiency/isa_tables.py

Paper: forward s per 30k images 1.077 / 0.762 / 0.564, backward s per 10 batches 5.992 / 3.049 /
2.390 (ratios against SAGAN must reproduce); largest batch on an 11 GB GTX 1080 Ti: 256 / ≥ 1024
/ ≥ 1024 (here within an 11 GiB XLA:CPU budget; on the GPU: gan_largest_batch.py). Width 16
matches the cost of the heykeetae SAGAN the paper ran (G + D 0.62 vs 0.64 GMAdd per image).
Hardware/runtime: about 13 minutes on a 2-core CPU. `:tiny` (no spectral norm) ~15 s.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "gan"
  config.table = "isa_tables"
  config.title = "Refined-SA Tables 2-3: SAGAN, ISAGAN, SGAN (64×64 G + D)"
  config.variants = ("sagan", "isagan", "sgan")
  config.baseline = "sagan"
  config.batch = 64
  config.image_size = 64
  config.z_dim = 128
  config.width = 16  # the paper's model's cost; SAGAN's ImageNet width is 64
  config.max_batch = 4096
  config.memory_budget_gib = 11.0
  config.repeats = 5
  config.min_sample_s = 0.0
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  config.about = (
      "Batch {batch}, {image_size}×{image_size} images, z of {z_dim}, width {width}, float32. "
      "Forward = evaluation-mode D(G(z)); backward = one training iteration (D hinge loss on "
      "real + fake, then G loss; gradients, no optimiser). Times are medians of {repeats} "
      "interleaved samples, scaled to the paper's units (forward: per 30k images = "
      "t·30000/batch; backward: per 10 batches = 10·t). Memory: XLA memory_analysis of the "
      "training iteration (temporaries + arguments + outputs). Largest batch: doubling from "
      "{batch} while that memory ≤ {memory_budget_gib} GiB (the paper: 'ok'/'no' on one GTX "
      "1080 Ti, 11 GB). Paper: Refined-SA Tables 2-3 (PyTorch, GPU).")
  config.spectral_norm = True  # SAGAN's; the tiny preset drops it to compile faster
  # Paper: (forward s per 30k images, backward s per 10 batches, largest batch 'ok').
  config.paper = (("sagan", (1.077, 5.992, "256")), ("isagan", (0.762, 3.049, "≥ 1024")),
                  ("sgan", (0.564, 2.390, "≥ 1024")))
  if preset == "tiny":
    config.batch = 2
    config.width = 4
    config.z_dim = 8
    config.max_batch = 2
    config.variants = ("sagan", "isagan")
    config.memory_budget_gib = 0.01
    config.repeats = 1
    config.spectral_norm = False
  return config
