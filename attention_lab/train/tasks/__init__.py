"""Task families, one module each; `config.task` names the module (see base.py)."""

import importlib
import pkgutil

from attention_lab.train.tasks.base import Environment, Task


def names() -> list[str]:
  """Every task name: the modules of this package that define `TASK`."""
  return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base")


def create(config, env: Environment) -> Task:
  """Builds the task `config.task` ("classification" when unset)."""
  name = config.task
  if name not in names():
    raise ValueError(f"task must be one of {names()}, got {name!r}")
  return importlib.import_module(f"{__name__}.{name}").TASK(config, env)
