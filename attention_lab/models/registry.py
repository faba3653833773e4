"""Model registry: `create(name, ...)` builds a registered model by name.

The registered names are a contract (configs, experiments and tests use them).
"""

from typing import Callable

from flax import nnx

_REGISTRY: dict[str, Callable[..., nnx.Module]] = {}


def register(name: str):
  """Decorator registering a model constructor `fn(*, rngs, **kw)` (classifiers, detectors
  and segmenters take `num_classes`; a restoration net's output defaults to its input's
  channels)."""

  def wrap(fn):
    if name in _REGISTRY:
      raise ValueError(f"model name {name!r} is registered twice")
    _REGISTRY[name] = fn
    return fn

  return wrap


def names() -> list[str]:
  """Sorted list of every registered model name."""
  return sorted(_REGISTRY)


def create(name: str, *, rngs: nnx.Rngs, **overrides) -> nnx.Module:
  """Builds the model registered as `name`; `overrides` (e.g. `num_classes`) go to its
  constructor."""
  if name not in _REGISTRY:
    raise ValueError(f"unknown model name {name!r}; expected one of {names()}")
  return _REGISTRY[name](rngs=rngs, **overrides)
