"""AA-Wide-ResNet-28-10 on CIFAR-100 (AA paper Table 1 row "AA-Wide-ResNet": 81.6% top-1, 36.2M params).

  python -m attention_lab.main --config=configs/aa/wrn_cifar100.py --workdir=workdirs/aa_wrn
  # baselines: --config.model.name=wide_resnet28_10 | se_wide_resnet28_10 | ge_wide_resnet28_10
  #   (non-augmented: the paper uses batch 1024 and weight decay 2e-4)

Recipe (AA appendix A.1): 500 epochs of SGD with momentum 0.9, learning rate
warmed up linearly from 0 to 0.2·B/256 over the first 5% of epochs, then
cosine decay; batch 256 and weight decay 5e-4 for augmented networks;
mean normalisation, random crop (4-pixel padding) and flip. No attention
downsampling at CIFAR resolution. Meant for 8 V100s (or a TPU slice); CIFAR-100
comes from TFDS (downloaded once into --config.dataset.data_dir).

Preset `:cpu`: the same network at width 0.1 (8-64 channels), 2 heads of at
least 4 key dims, on the embedded digits data at 16×16, 20 steps — about a
minute on a 2-core CPU.
"""

import ml_collections

from configs import default


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.dataset.name = "cifar100"
  config.dataset.eval_split = "test"
  config.dataset.image_size = 32
  config.dataset.shuffle_buffer = 50_000
  config.model = ml_collections.ConfigDict(dict(
      name="aa_wide_resnet28_10", width=1.0, image_size=32, in_channels=3, dropout=0.0,
      dtype="float32"))
  config.batch_size = 256
  config.num_epochs = 500
  config.optimizer.name = "sgd"
  config.optimizer.learning_rate = 0.2 * config.batch_size / 256
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.weight_decay = 5e-4
  config.optimizer.schedule = "cosine"
  config.optimizer.warmup_epochs = 0.05 * config.num_epochs
  config.log_every_steps = 100
  config.eval_every_steps = 2_000
  config.checkpoint_every_steps = 2_000
  if preset == "cpu":
    config.dataset.name = "digits"
    config.dataset.shuffle_buffer = 2048
    config.dataset.image_size = 16
    config.model.width, config.model.in_channels, config.model.image_size = 0.1, 1, 16
    config.model.heads, config.model.min_key_dims = 2, 4
    config.batch_size = 32
    config.num_train_steps = 20
    config.optimizer.warmup_epochs = 0.0
    config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 10
  elif preset:
    raise ValueError(f"unknown preset {preset!r}; expected 'cpu'")
  return config
