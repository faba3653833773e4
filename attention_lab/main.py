"""Entry point: python -m attention_lab.main --config=configs/<file>.py[:preset] --workdir=DIR.

Any config field can be overridden with --config.<key>=<value>. Multi-host
runs (TPU pods, several GPU hosts) call jax.distributed.initialize() when
--config.distributed=True or when the environment names a coordinator.
"""

import logging as std_logging
import os

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from attention_lab.train.trainer import Trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and TensorBoard logs.")
flags.mark_flags_as_required(["config", "workdir"])


class _QuietLibraries(std_logging.Filter):
  """Keeps orbax's per-save INFO chatter out of the console; warnings still pass."""

  def filter(self, record):
    return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname


def main(argv):
  del argv
  logging.get_absl_handler().addFilter(_QuietLibraries())
  config = _CONFIG.value
  if config.get("distributed") or os.environ.get("JAX_COORDINATOR_ADDRESS"):
    jax.distributed.initialize()
  logging.info("JAX process %d/%d, devices: %s", jax.process_index(), jax.process_count(),
               jax.devices())
  trainer = Trainer(config, _WORKDIR.value)
  print(f"TensorBoard logs: tensorboard --logdir {os.path.abspath(_WORKDIR.value)}", flush=True)
  summary = trainer.run()
  print("Final: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(summary.items())), flush=True)


if __name__ == "__main__":
  app.run(main)
