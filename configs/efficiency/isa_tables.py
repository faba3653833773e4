"""Refined-SA paper Tables 2-3: SAGAN, ISAGAN and SGAN, 64×64 generator + discriminator.

  python -m experiments.efficiency --config=configs/efficiency/isa_tables.py

Paper: forward s per 30k images 1.077 / 0.762 / 0.564, backward s per 10 batches 5.992 / 3.049 /
2.390 (ratios against SAGAN must reproduce); largest batch on an 11 GB GTX 1080 Ti: 256 / ≥ 1024
/ ≥ 1024 (here within an 11 GiB XLA:CPU budget; on the GPU: gan_largest_batch.py). Width 16
matches the cost of the heykeetae SAGAN the paper ran (G + D 0.62 vs 0.64 GMAdd per image).
Hardware/runtime: about 13 minutes on a 2-core CPU. `:tiny` (no spectral norm) ~15 s.
"""

import ml_collections

from configs.efficiency import gan


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = gan.measurement(preset)
  config.table = "isa_tables"
  config.title = "Refined-SA Tables 2-3: SAGAN, ISAGAN, SGAN (64×64 G + D)"
  return config
