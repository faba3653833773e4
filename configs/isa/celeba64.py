"""Refined-SA Table 1, CelebA at 64×64: SAGAN 8.864, ISAGAN 8.723, SGAN 6.394 FID.

  python -m attention_lab.main --config=configs/isa/celeba64.py --workdir=workdirs/isa_celeba \
      --config.eval.inception_path=/path/to/pt_inception-2015-12-05-6726825d.pth \
      [--config.dataset.image_dir=/path/to/img_align_celeba] \
      [--config.model.attention=sa|refined|conv]   # SAGAN | ISAGAN | SGAN

Data: TFDS `celeb_a` (its Google-Drive download often fails its checksum), or
`dataset.image_dir` = the `img_align_celeba/` folder of the 202,599 aligned
JPEGs (the official partition: first 162,770 train); centre crop 160, resized to
64 (the heykeetae SAGAN recipe the paper used). Unconditional. Models and recipe
as configs/isa/cifar10.py (SAGAN's: hinge, Adam (0, 0.9), TTUR 1e-4 / 4e-4, batch
64, no EMA, 100k steps). FID: pytorch-fid's Inception, 50,000 samples against
the training images. Expected: the paper's ordering (SGAN < ISAGAN ≈ SAGAN);
absolute FIDs depend on the training length. Hardware: one GPU, about a day.

Presets: `:cpu` (the recipe on the embedded digits at 32×32, unconditional, a few
hundred steps on a CPU) and `:tiny` (two steps, for tests).
"""

import ml_collections

from configs import presets, schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.gan()
  config.dataset.name = "celeb_a"
  config.dataset.image_size = 64
  config.eval.real_split = "train"
  config.conditional = False
  config.model.attention = "sa"
  config.model.width = 64
  config.batch_size = 64
  config.num_train_steps = 100_000
  config.eval_every_steps = 10_000
  if preset not in (None, "", "cpu", "tiny"):
    raise ValueError(f"unknown preset {preset!r} for configs/isa/celeba64.py; expected "
                     "'cpu' or 'tiny'")
  return presets.gan_digits(config, preset)
