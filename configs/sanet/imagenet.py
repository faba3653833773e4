"""SANet on ImageNet (SAO paper Table 3/4 row "SANet": 73.0% top-1, 3.44m params, 288m MAdd).

  python -m attention_lab.main --config=configs/sanet/imagenet.py --workdir=workdirs/sanet
  # ablations (SAO Table 6/8): --config.model.name=sanet_no_global | sanet_no_sao |
  #   sanet_ones_w | mobilenet_v2_sao ; baselines (Table 3/4): mobilenet_v2 | senet |
  #   attnnet | attnnet_pool | attnnet_mean

Recipe (SAO appendix): 150 epochs of SGD, momentum 0.9, learning rate 0.1
×0.1 at epochs 80, 105, 120, batch 640 (8 GPUs), dropout keep 0.8 after the
global pool, scale to 256 / random 224 crop / flip, centre crop at eval.
The paper does not state weight decay; we use MobileNetV2's 4e-5. Meant for
an 8-GPU host or a TPU slice (about 1.5 days on 8 RTX 2080 Ti in the paper);
needs the ImageNet TFDS data (manual download) under --config.dataset.data_dir.

Preset `:cpu`: the same model at width 0.25 on the embedded digits data (32×32,
1 channel), 20 steps — about a minute on a 2-core CPU, to check the pipeline.
"""

import ml_collections

from configs import default


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.dataset.name = "imagenet2012"
  config.dataset.eval_split = "validation"
  config.dataset.image_size = 224
  config.dataset.crop = "resize"
  config.dataset.shuffle_buffer = 16_384
  config.model = ml_collections.ConfigDict(dict(
      name="sanet", width=1.0, image_size=224, in_channels=3, dropout=0.2, dtype="float32"))
  config.batch_size = 640
  config.num_epochs = 150
  config.optimizer.name = "sgd"
  config.optimizer.learning_rate = 0.1
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.weight_decay = 4e-5
  config.optimizer.schedule = "step"
  config.optimizer.decay_epochs = (80, 105, 120)
  config.optimizer.decay_factor = 0.1
  config.optimizer.warmup_epochs = 0.0
  config.log_every_steps = 100
  config.eval_every_steps = 5_000
  config.checkpoint_every_steps = 2_000
  config.keep_checkpoints = 3
  if preset == "cpu":
    config.dataset.name = "digits"
    config.dataset.eval_split = "test"
    config.dataset.image_size = 32
    config.dataset.shuffle_buffer = 2048
    config.model.width, config.model.image_size, config.model.in_channels = 0.25, 32, 1
    config.batch_size = 32
    config.num_train_steps = 20
    config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 10
  elif preset:
    raise ValueError(f"unknown preset {preset!r}; expected 'cpu'")
  return config
