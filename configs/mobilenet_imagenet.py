"""The ImageNet recipe of the SAO and KAO papers for MobileNetV2 and the networks built on it
(configs/sanet/imagenet.py, configs/kanet/imagenet.py start from it; they differ in the batch).

Recipe (SAO appendix 2, repeated by the KAO appendix): 150 epochs of SGD, momentum 0.9,
learning rate 0.1 ×0.1 at epochs 80, 105, 120, on 8 GPUs (the learning rate is 0.1 at either
paper's batch), dropout keep 0.8 after the global pool, scale to 256 / random 224 crop /
flip, centre crop at eval. Where the papers are silent: weight decay (we use MobileNetV2's
4e-5, kernels only), warm-up (none), label smoothing (none), Nesterov (no).

Sizes: "cpu" is the row's network at width 0.25 on the embedded digits data (32×32, 1
channel), 400 AdamW steps (learning rate 3e-3, cosine, no dropout; configs/presets.py
`digits_cpu` says why not the paper's SGD); "tiny" is the "cpu" network for 2 steps (tests).
"""

import ml_collections

from configs import presets, schema

GPUS = 8  # both papers; BatchNorm statistics per GPU (no synchronised BatchNorm)


def recipe(row: str, size: str | None, *, batch_size: int) -> ml_collections.ConfigDict:
  """The recipe for the network `row` at the paper's global `batch_size` (BatchNorm groups
  of batch_size / GPUS, one per GPU), or at its `size` preset ("cpu", "tiny")."""
  config = schema.classification()
  presets.imagenet(config, crop="resize")
  config.model.update(name=row, width=1.0, image_size=224, in_channels=3, dropout=0.2,
                      dtype="float32")
  config.batch_size = batch_size
  config.bn_group_size = batch_size // GPUS
  config.num_epochs = 150
  config.optimizer.update(
      name="sgd", learning_rate=0.1, momentum=0.9, nesterov=False, weight_decay=4e-5,
      schedule="step", decay_epochs=(80, 105, 120), decay_factor=0.1, warmup_epochs=0.0)
  config.log_every_steps = 100
  config.eval_every_steps = 5_000
  config.checkpoint_every_steps = 2_000
  config.keep_checkpoints = 3
  if size in ("cpu", "tiny"):
    presets.digits_cpu(config, schema.optimizer())
    config.model.width = 0.25
    if size == "tiny":
      presets.tiny(config)
  return config
