"""The Refined-SA paper's GAN measurement (SAGAN, ISAGAN and SGAN, 64×64 generator +
discriminator): the fields of experiments/efficiency_gan.py and their defaults, for
configs/efficiency/isa_tables.py and gan_largest_batch.py."""

import ml_collections


def measurement(preset: str | None = None) -> ml_collections.ConfigDict:
  """Every field of a GAN measurement (experiments/efficiency_gan.py) and its default: the
  paper's 64×64 SAGAN / ISAGAN / SGAN, timed and searched within an 11 GiB budget; `:tiny`
  for tests."""
  config = ml_collections.ConfigDict()
  config.kind = "gan"
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
      "samples (method: Timing and calibration, below), scaled to the paper's units (forward: per 30k images = "
      "t·30000/batch; backward: per 10 batches = 10·t). Memory: XLA memory_analysis of the "
      "training iteration (temporaries + arguments + outputs). Largest batch: doubling from "
      "{batch} while that memory ≤ {memory_budget_gib} GiB (the paper: 'ok'/'no' on one GTX "
      "1080 Ti, 11 GB). Paper: Refined-SA Tables 2-3 (PyTorch, GPU).")
  config.timed = True  # False: the largest-batch searches only
  # Largest-batch searches beside the budget one: ({"target": "cpu", "budget_gib": G} or a
  # GPU target config, "image_size", "width", "start"), ...
  config.largest_batch = ()
  config.spectral_norm = True  # SAGAN's; the tiny preset drops it to compile faster
  # Paper: (forward s per 30k images, backward s per 10 batches, largest batch 'ok').
  config.paper = (("sagan", (1.077, 5.992, "256")), ("isagan", (0.762, 3.049, "≥ 1024")),
                  ("sgan", (0.564, 2.390, "≥ 1024")))
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.batch = 2
    config.width = 4
    config.z_dim = 8
    config.max_batch = 2
    config.variants = ("sagan", "isagan")
    config.memory_budget_gib = 0.01
    config.repeats = 1
    config.spectral_norm = False
  return config
