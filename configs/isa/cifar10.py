"""Refined-SA Table 1, CIFAR-10 at 64×64: SAGAN 12.739, ISAGAN 12.236, SGAN 16.066 FID.

  python -m attention_lab.main --config=configs/isa/cifar10.py --workdir=workdirs/isa_cifar10 \
      --config.eval.inception_path=/path/to/pt_inception-2015-12-05-6726825d.pth \
      [--config.model.attention=sa|refined|conv]   # SAGAN | ISAGAN | SGAN

Models: the unconditional residual SAGAN G and D at 64×64 (BigGAN's 64² layout,
spectral norm, the context module at 32×32 in both); SAGAN = "sa" (N×N
self-attention), ISAGAN = "refined" (o = z(yᵀφ)/N), SGAN = "conv" (3×3
convolution in place of the attention). The paper ran the heykeetae DCGAN-style
SAGAN (attention at 16² and 32²) without giving its training length; we use
SAGAN's recipe: hinge loss, Adam (0, 0.9), TTUR 1e-4 / 4e-4, batch 64, one D step,
no EMA, 100k steps. Data: TFDS cifar10 (downloads on first use) resized 32→64.
FID: pytorch-fid's Inception on 50,000 samples against the 50,000 training
images (statistics cached beside the data). Expected: the paper's ordering;
absolute FIDs depend on the training length. Hardware: one GPU, about a day
(the paper: one GTX 1080 Ti).

Presets: `:cpu` — the same recipe at width 4 on the embedded digits at 32×32
(FID in the digits classifier's space), a few hundred steps on a CPU; `:tiny`
— two steps, for tests.
"""

import ml_collections

from configs import presets, schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.gan()
  config.dataset.name = "cifar10"
  config.dataset.image_size = 64
  config.conditional = False
  config.model.attention = "sa"
  config.model.width = 64
  config.batch_size = 64
  config.num_train_steps = 100_000
  config.eval_every_steps = 10_000
  if preset not in (None, "", "cpu", "tiny"):
    raise ValueError(f"unknown preset {preset!r} for configs/isa/cifar10.py; expected "
                     "'cpu' or 'tiny'")
  return presets.gan_digits(config, preset)
