"""Default GAN experiment: a class-conditional SAGAN on the embedded `digits`, 32×32, on the CPU.

  python -m attention_lab.main --config=configs/gan/default.py --workdir=workdirs/default_gan \
      [--config.model.attention=none|sa|refined|hamburger|conv]

Data: scikit-learn's real handwritten digits (no download), 1,497 training
images at 32×32, tiled to RGB, in [−1, 1]. Models: SAGAN's residual G and
projection D (BigGAN's 32×32 layout, 4·width channels, spectral norm, conditional
BN) with the context module at 16×16 in both (sa / refined keys and values max-pooled
2×2 to 8×8, as SAGAN's official code does). Training: hinge loss, Adam β = (0,
0.9), TTUR 5e-4 (G) / 1e-3 (D) (SAGAN's 1e-4 / 4e-4 raised for this short run: at
2e-4 / 4e-4 samples followed their class only after ~3,000 steps; at 5e-4 / 1e-3, 95%
did at 2,000), one D step per G step, batch 32, 5,000 steps, width 4 (16
channels), BigGAN's shared class embedding in G (`model.class_embedding` 128) and
G evaluated with an EMA of its weights (decay 0.999 from step 1,000). Without
the last two, the hamburger and conv variants ended at 85% conditional accuracy
(hamburger oscillating between evaluations, conv plateaued). MSGAN's mode-seeking
term in G's loss (`mode_seeking` 0.3): without it G draws nearly one image per class
(recall and class diversity fall as the class is learned); at 0.1 recall still fell
late in training; at 1.0 G ignores the class. The term slows class learning, hence
5,000 steps.
Evaluation: FID, IS and KID in the feature space of the default classification
experiment's digits classifier (configs/default.py, restored from
`eval.classifier_workdir`, trained there first if missing: ~1-2 min), and the
conditional accuracy (share of class-k samples it labels k) over 2,000
class-balanced samples. FID is the headline: lower is better.
Expected (experiments/default_gan.py, `python -m experiments.default_gan`): every
attention variant ≥ 90% conditional accuracy and a digits-FID at most a tenth of
the untrained G's, recall ≥ 0.5 and class diversity ≥ 0.7, in ≤ 15 minutes on a
2-core CPU (measured numbers in the README and experiments/results/default_gan.md).

Shared by the other GAN configs (`base()`): configs/isa/*.py (Refined-SA Table 1),
configs/hamburger/imagenet128_hamgan.py (Ham Table 6).

Presets: `:cpu` (a shorter run that learns visibly in a few minutes) and `:tiny`
(a few steps at width 1, for tests; its classifier is configs/default.py:tiny).
"""

import ml_collections

from configs import presets


def base() -> ml_collections.ConfigDict:
  """The fields every GAN config has (SAGAN's recipe); dataset and sizes set by the caller."""
  config = ml_collections.ConfigDict()
  config.task = "gan"
  config.seed = 0
  config.distributed = False

  config.dataset = ml_collections.ConfigDict()
  config.dataset.name = "digits"
  config.dataset.data_dir = ""  # "": the TFDS default (~/tensorflow_datasets).
  config.dataset.image_dir = ""  # celeb_a only: the img_align_celeba/ folder instead of TFDS.
  config.dataset.train_split = "train"
  config.dataset.image_size = 32
  config.dataset.shuffle_buffer = 2048
  config.conditional = True

  config.model = ml_collections.ConfigDict()
  config.model.attention = "sa"  # none | sa | refined | hamburger | conv
  config.model.d_attention = ""  # "": the same as G's
  config.model.width = 64
  config.model.latent_dim = 128
  config.model.spectral_norm = True
  config.model.context_side = 0  # 0: 32 (16 at resolution 32)
  config.model.class_embedding = 0  # 0: per-class BN table in G (SAGAN); E > 0: BigGAN
  config.model.hierarchical_z = False  # True: z split across G's blocks (BigGAN)
  config.model.minibatch_std = 0  # g > 0: D sees the std over groups of g images (ProGAN)
  config.model.key_pool = 1  # p > 1: sa / refined keys and values max-pooled p×p
  config.model.dtype = "float32"

  config.batch_size = 256
  config.num_train_steps = 1_000_000
  config.d_steps = 1
  config.ema_decay = 0.0  # 0: off (the papers' setting); BigGAN: 0.9999
  config.ema_start_step = 0
  config.mode_seeking = 0.0  # λ > 0: MSGAN's mode-seeking term in G's loss
  for name, lr in (("g_optimizer", 1e-4), ("d_optimizer", 4e-4)):
    opt = ml_collections.ConfigDict()
    opt.name = "adam"
    opt.learning_rate = lr
    opt.b1 = 0.0
    opt.b2 = 0.9
    opt.schedule = "constant"
    config[name] = opt

  config.eval = ml_collections.ConfigDict()
  config.eval.features = "inception"  # inception | digits | none
  config.eval.inception_path = ""  # pt_inception-2015-12-05-6726825d.pth (pytorch-fid)
  config.eval.classifier_config = "configs/default.py"
  config.eval.classifier_workdir = ""  # "": <workdir>/digits_classifier
  config.eval.num_samples = 50_000
  config.eval.real_split = "train"
  config.eval.num_real = 0  # 0: the whole split
  config.eval.num_kid_real = 10_000
  config.eval.kid_subsets = 100
  config.eval.kid_subset_size = 1000
  config.eval.batch_size = 250
  config.eval.seed = 1234
  config.eval.stats_dir = ""  # "": <TFDS data_dir>/gan_statistics
  config.eval.grid_rows = 8
  config.eval.grid_classes = 10

  config.mesh = ml_collections.ConfigDict()
  config.mesh.num_devices = -1
  config.mesh.param_sharding = "replicated"
  config.log_every_steps = 100
  config.eval_every_steps = 10_000
  config.checkpoint_every_steps = 5_000
  config.keep_checkpoints = 2
  presets.run_options(config)
  return config


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = base()
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
