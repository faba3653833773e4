"""Default experiment: a small attention CNN on the embedded `digits` dataset, on the CPU.

  python -m attention_lab.main --config=configs/default.py --workdir=workdirs/default \
      [--config.model.attention=softmax|softmax_pool|mean|siamese|kronecker_kv|kronecker_qkv|relative|hamburger|none]

Data: scikit-learn's 1,797 handwritten digits (shipped inside the package,
no download) as a TFDS dataset at 32×32, 1,497 train / 300 test. Model:
`attention_cnn` (three conv stages, one global-context block on the 8×8 map).
Expected: ≥ 97% test top-1 for every operator in about a minute or two on a
2-core CPU (see the README for measured numbers).

Presets (`configs/default.py:tiny`): "tiny" shrinks the run to a few steps for
tests.
"""

import ml_collections

from configs import schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.classification()
  config.dataset.name = "digits"
  config.dataset.image_size = 32
  config.dataset.crop = "resize"

  config.model.update(name="attention_cnn", attention="softmax", width=32, heads=4, dropout=0.1,
                      dtype="float32")

  config.batch_size = 64
  config.num_epochs = 30
  config.label_smoothing = 0.0
  config.optimizer.update(name="sgd", learning_rate=0.1, momentum=0.9, nesterov=True,
                          weight_decay=5e-4, schedule="cosine", warmup_epochs=1.0)

  config.log_every_steps = 50
  config.eval_every_steps = 250
  config.checkpoint_every_steps = 250

  if preset == "tiny":
    config.model.width = 8
    config.batch_size = 16
    config.num_train_steps = 4
    config.log_every_steps = 2
    config.eval_every_steps = 4
    config.checkpoint_every_steps = 2
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/default.py; expected 'tiny'")
  return config
