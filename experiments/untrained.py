"""Evaluates a config's model before its first step and prints a `Final:` line as
`attention_lab.main` does (the start of a learning curve).

  python -m experiments.untrained --config=configs/X.py[:preset] --workdir=DIR

The workdir is the run's (nothing is saved in it at step 0), so a training run in the
same workdir starts from the same initialisation.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
from absl import app, flags, logging

from attention_lab import cli
from attention_lab import main as main_lib  # defines --config, --workdir and --debug
from attention_lab.train import compilation_cache


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with cli.silenced_stderr():
    from attention_lab.train import trainer as trainer_lib
  config = flags.FLAGS.config
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  compilation_cache.enable(config.get("compilation_cache_dir", compilation_cache.default_dir()))
  main_lib.keep_freed_host_memory()
  try:
    trainer = trainer_lib.Trainer(config, flags.FLAGS.workdir)
    summary = trainer.run(until_step=0)
  except ValueError as e:
    if flags.FLAGS.debug:
      raise
    cli.fail(cli.name_field(str(e), config))
  trainer.say("Final: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(summary.items())))
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
