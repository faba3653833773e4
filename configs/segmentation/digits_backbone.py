"""The digits-pretrained backbone of the default segmentation experiment (its "ImageNet").

  python -m attention_lab.main --config=configs/segmentation/digits_backbone.py \\
      --workdir=workdirs/digits_backbone

The segmentation papers start from ImageNet-trained ResNets; our CPU
experiment (configs/segmentation/default.py) starts from this run, which it
trains itself into <workdir>/pretrained (`init_from` names this file). Data:
the 1,497 train digits of `digits` at 48×48 (the size of a digit in the ×2
digit scenes is 28-60 pixels), grey replicated to RGB. Model: `resnet` with the
segmenter's backbone (depth, width and stem from the segmentation config) at
output stride 32, global pooling and a linear classifier. AdamW 3e-3, cosine,
30 epochs of batch 64 (690 steps).

Expected: test top-1 near 99% in under a minute on a 2-core CPU (measured:
experiments/results/default_segmentation.md).

Presets: `:cpu` (5 epochs, for the segmentation `:cpu` preset), `:tiny` (two
steps, for tests).
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.classification()
  config.dataset.name = "digits"
  config.dataset.image_size = 48
  config.dataset.crop = "resize"
  config.dataset.channels = 3  # the scenes are RGB
  # configs/segmentation/default.py's backbone (tests/train/test_segmentation_configs.py).
  config.model.update(name="resnet", depth=14, width=0.125, stem="standard", dtype="float32")
  config.batch_size = 64
  config.num_epochs = 30
  config.optimizer.update(name="adamw", learning_rate=3e-3, momentum=0.9, nesterov=True,
                          weight_decay=1e-4, schedule="cosine", warmup_epochs=1.0)
  config.log_every_steps = 50
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 250
  if preset == "cpu":  # for the segmentation `:cpu` preset
    config.num_epochs = 5
  elif preset == "tiny":
    config.model.width = 0.0625  # the segmentation `:tiny` width
    config.batch_size = 16
    config.num_epochs, config.num_train_steps = 0, 2
    config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/segmentation/digits_backbone.py; "
                     "expected 'cpu' or 'tiny'")
  return config
