"""Ham Table 6, ImageNet 128×128 class-conditional FID: SAGAN 18.28, HamGAN-baby 16.05,
HamGAN-strong 14.77.

  python -m attention_lab.main --config=configs/hamburger/imagenet128_hamgan.py \
      --workdir=workdirs/hamgan --config.dataset.data_dir=/path/to/tfds \
      --config.eval.inception_path=/path/to/pt_inception-2015-12-05-6726825d.pth \
      [--config.model.attention=sa]        # the SAGAN row (default: hamburger)
  # HamGAN-strong: the preset `configs/hamburger/imagenet128_hamgan.py:strong`

Models: SAGAN's conditional residual G and projection D at 128×128 (width 64,
spectral norm, conditional BN) with the context module at 32×32 in both.
HamGAN-baby (the paper: "self-attention replaced by Hamburger with NMF ham in
both generator and discriminator at feature resolution 32×32"): Hamburger NMF,
K = 6 in training and evaluation, with the official sizes d = 256, r = 32 in G
(its 4w = 256 channels at 32², r = d/8) and d = 128, r = 16 in D (2w = 128).
SAGAN row: `--config.model.attention=sa`. Recipe (SAGAN's): hinge loss, Adam (0,
0.9), TTUR 1e-4 / 4e-4, batch 256, one D step, no EMA, 1M steps.
HamGAN-strong (`:strong`) was trained with the YLG codebase's settings on a TPU:
batch 1024 (the official HamGAN), the rest as above (YLG follows SAGAN's
optimiser); we add nothing YLG did not use.
Data: TFDS imagenet2012 (manual download), centre crop to the shorter side,
resized to 128 in the pipeline. FID: pytorch-fid's Inception, 50,000 samples
against the training images. Expected: Table 6's ordering. Hardware: a TPU pod
slice (v3-8 or more; the paper: TPUv3), days.

Presets: `:cpu` (the HamGAN layout at width 4 on the embedded digits at 32×32,
conditional, a few hundred steps) and `:tiny` (two steps, for tests).
"""

import ml_collections

from configs import presets, schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.gan()
  config.dataset.name = "imagenet2012"
  config.dataset.image_size = 128
  config.conditional = True
  config.model.attention = "hamburger"
  config.model.width = 64
  config.batch_size = 256
  config.num_train_steps = 1_000_000
  config.eval_every_steps = 50_000
  if preset == "strong":
    config.batch_size = 1024
    return config
  if preset not in (None, "", "cpu", "tiny"):
    raise ValueError(f"unknown preset {preset!r} for configs/hamburger/imagenet128_hamgan.py; expected "
                     "'strong', 'cpu' or 'tiny'")
  return presets.gan_digits(config, preset)
