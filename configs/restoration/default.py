"""Default restoration experiment: 2D denoising of real photographs on the CPU.

  python -m attention_lab.main --config=configs/restoration/default.py \
      --workdir=workdirs/restoration [--config.model.attention=none|softmax|siamese]

Data: `restoration_photos`, the photographs bundled inside the scikit-image
wheel (no download), grey levels in [0, 1] with seeded Poisson-Gaussian noise
(peak 30, σ 0.04); 14 training photos, 3 held-out test photos (camera, coins,
chelsea; never trained on). Model: `unet2d` (CARE U-Net, depth 3, 16 maps at
the first level, residual) with attention in the bottom and decoder blocks
as in SAO Table 7: "none" (U-Net), "softmax" (U-Net+Attn, query-chunked) or
"siamese" (U-Net+SAO). L1 loss (CARE's "mae"), Adam 1e-3 with cosine decay
over 300 steps (the SAO appendix's 4e-4 is for 100-200 epochs; a CPU run is
short), batch 16 random 32×32 patches with flips/rotations (small patches
keep the softmax attention at full resolution, N = 1,024, affordable on a CPU).

Evaluation: every test photo predicted whole, in 48×48 tiles with 8 pixels
of overlap (attention within each tile, as in training); PSNR / SSIM / NRMSE
with the "plain" protocol (the clean photo is known in [0, 1], data_range 1,
NRMSE = RMSE) for the prediction and for the noisy input. Set
--config.eval.protocol=care for the CARE protocol (percentile-normalised
target, min-MSE affine rescaling of the prediction) of the SAO configs.

Expected (experiments/default_restoration.py, 2-core CPU): every attention
variant gains ≥ 5 dB PSNR over the noisy input within 10 minutes (see the
README for the measured table).

Presets: `:cpu` (the same experiment with 150 steps and the test photos
centre-cropped to 128×128: learns visibly in a few minutes), `:tiny` (a few
steps at tiny width, for tests).
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.restoration()
  d = config.dataset
  d.name = "restoration_photos"
  d.patch_size = (32, 32)
  d.augment = True
  d.input_percentiles = ()  # photos are already in [0, 1]

  config.model.update(name="unet2d", attention="softmax", features=16, depth=3, heads=4,
                      attention_kwargs=ml_collections.ConfigDict({"query_chunk_size": 1024}),
                      dtype="float32")

  config.loss = "mae"
  config.batch_size = 16
  config.num_train_steps = 300
  config.optimizer.update(name="adam", learning_rate=1e-3, b1=0.9, b2=0.999, schedule="cosine")

  config.eval.protocol = "plain"
  config.eval.tile_size = (48, 48)
  config.eval.tile_overlap = (8, 8)

  config.log_every_steps = 50
  config.eval_every_steps = 300
  config.checkpoint_every_steps = 150

  if preset == "cpu":
    config.eval.crop_size = (128, 128)
    config.num_train_steps = 150
    config.log_every_steps = 25
    config.eval_every_steps = config.checkpoint_every_steps = 150
  elif preset == "tiny":
    config.model.features = 4
    config.batch_size = 8
    config.dataset.patch_size = (16, 16)
    config.eval.tile_size = (64, 64)
    config.eval.tile_overlap = (8, 8)
    config.eval.max_examples = 1
    config.eval.crop_size = (64, 64)
    config.num_train_steps = 2
    config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/restoration/default.py; "
                     "expected 'cpu' or 'tiny'")
  return config
