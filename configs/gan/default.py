"""Default GAN experiment: a class-conditional SAGAN on the embedded `digits`, 32×32, on the CPU.

  python -m attention_lab.main --config=configs/gan/default.py --workdir=workdirs/default_gan \
      [--config.model.attention=none|sa|refined|hamburger|conv]

Data: scikit-learn's real handwritten digits (no download), 1,497 training
images at 32×32, tiled to RGB, in [−1, 1]. Models: SAGAN's residual G and
projection D (BigGAN's 32×32 layout, 4·width channels, spectral norm, conditional
BN) with the context module at 16×16 in both (sa / refined keys and values max-pooled
2×2 to 8×8, as SAGAN's official code does). Training: hinge loss, Adam β = (0,
0.9), TTUR 5e-4 (G) / 1e-3 (D) (SAGAN's 1e-4 / 4e-4 raised so that samples follow
their class within this short run), one D step per G step, batch 32, 5,000 steps,
width 4 (16 channels), BigGAN's shared class embedding in G (`model.class_embedding`
128) and G evaluated with an EMA of its weights (decay 0.999 from step 1,000): without
these two the hamburger and conv variants fall short of the accuracy goal. MSGAN's
mode-seeking term in G's loss (`mode_seeking` 0.3): without it G draws nearly one image
per class (recall and class diversity fall as the class is learned); a smaller weight
lets recall fall late in training, a much larger one makes G ignore the class. The term
slows class learning, hence 5,000 steps. The runs behind these choices:
experiments/results/default_gan.md.
Evaluation: FID, IS and KID in the feature space of the default classification
experiment's digits classifier (configs/default.py, restored from
`eval.classifier_workdir`, trained there first if missing: ~1-2 min), and the
conditional accuracy (share of class-k samples it labels k) over 2,000
class-balanced samples. FID is the headline: lower is better.
Expected (experiments/default_gan.py, `python -m experiments.default_gan`): every
attention variant ≥ 90% conditional accuracy and a digits-FID at most a tenth of
the untrained G's, recall ≥ 0.5 and class diversity ≥ 0.7, in ≤ 15 minutes on a
2-core CPU (measured numbers in the README and experiments/results/default_gan.md).

Presets: `:cpu` (a shorter run that learns visibly in a few minutes) and `:tiny`
(a few steps at width 1, for tests; its classifier is configs/default.py:tiny).
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.gan()
  config.model.attention = "sa"
  config.model.width = 4  # 16 channels: CPU-sized
  config.batch_size = 32
  config.num_train_steps = 5000
  config.g_optimizer.learning_rate = 5e-4  # SAGAN's 1e-4 / 4e-4 raised for the short run
  config.d_optimizer.learning_rate = 1e-3
  config.model.class_embedding = 128
  config.model.key_pool = 2  # as SAGAN's official code: N/4 keys, sa's attention 4× cheaper
  config.ema_decay = 0.999
  config.ema_start_step = 1000
  config.mode_seeking = 0.3
  config.eval.features = "digits"
  config.eval.classifier_workdir = "workdirs/default"  # the README's default experiment
  config.eval.num_samples = 2000
  config.eval.num_kid_real = 1497
  config.eval.batch_size = 500
  config.log_every_steps = 50
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 500
  if preset == "cpu":
    config.num_train_steps = 300
    config.eval_every_steps = 300
    config.eval.num_samples = 1000
  elif preset == "tiny":
    config.model.width = 1
    config.model.latent_dim = 8
    config.model.class_embedding = 8
    config.batch_size = 8
    config.num_train_steps = 2
    config.log_every_steps = 1
    config.eval_every_steps = 2
    config.checkpoint_every_steps = 1
    config.eval.classifier_config = "configs/default.py:tiny"
    config.eval.classifier_workdir = ""
    config.eval.num_samples = 40
    config.eval.num_real = 64
    config.eval.kid_subsets = 2
    config.eval.kid_subset_size = 20
    config.eval.batch_size = 40
    config.eval.grid_rows = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/gan/default.py; expected 'cpu' or "
                     "'tiny'")
  return config
