"""Refined-SA paper Tables 2-3: SAGAN, ISAGAN and SGAN, 64×64 generator + discriminator.

  python -m experiments.efficiency --config=configs/efficiency/isa_tables.py

Reproduces: "Refined self-attention: less memory, faster speed", Table 2
(forward time per 30k images: SAGAN 1.077 s, ISAGAN 0.762 s, SGAN 0.564 s;
backward per 10 batches: 5.992 / 3.049 / 2.390 s) and Table 3 (largest
trainable batch on one GTX 1080 Ti, 11 GB: SAGAN 256, ISAGAN and SGAN ≥ 1024).
SAGAN = self-attention blocks with an N×N softmax map; ISAGAN = the refined
(linear) block out = z(yᵀφ)/N; SGAN = the attention blocks replaced by
convolutions. Time ratios against SAGAN must reproduce; the largest batch is
found by XLA memory analysis of one training iteration against an 11 GiB
budget (compiled, never run). Models: the registry's unconditional
sagan_generator / sagan_discriminator (residual SAGAN, spectral norm, the
context module at 32×32; attention "sa" | "refined" | "conv") at width 16,
which matches the cost of the heykeetae SAGAN the paper ran (G + D 0.62 vs
0.64 GMAdd per image, 64 channels at the 32² attention).
Hardware/runtime: about 13 minutes on a 2-core CPU. `:tiny` (no spectral
norm) takes ~15 s.
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
