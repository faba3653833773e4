"""Task-neutral checks of a run's config, before anything is built."""

from attention_lab import cli
from attention_lab.train import profiling


def validate_config(config) -> None:
  """Checks the fields every run has, anywhere in the config tree: learning rates, batch
  sizes and `*_every_steps` must be > 0, epochs and step counts >= 0, `profile_steps` a
  (start, end) pair. Raises ValueError naming the field, the value and what is allowed."""
  for path, value in cli.config_leaves(config):
    name = path.rsplit(".", 1)[-1]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if name in ("learning_rate", "batch_size", "keep_checkpoints") or name.endswith(
        "_every_steps"):
      if not value > 0:
        raise ValueError(f"{path} = {value!r}: must be > 0")
    elif name in ("num_epochs", "num_train_steps") and not value >= 0:
      raise ValueError(f"{path} = {value!r}: must be >= 0")
  profiling.steps(config)
