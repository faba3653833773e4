"""Synthetic input for speed runs (`--config.dataset.synthetic=True`), as MaxText's: one
random global batch of the task's shapes, made on the devices in its sharding and fed at
every step, so a run measures the train step alone, with no input pipeline and no
TensorFlow. Floats are uniform in [0, 1), integers (labels) uniform over the classes,
booleans (masks) true."""

import functools
from typing import Iterator

import jax
import jax.numpy as jnp


def batch(spec: dict[str, jax.ShapeDtypeStruct], sharding, *, seed: int,
          num_classes: int) -> dict[str, jax.Array]:
  """A random global batch of `spec`'s shapes and dtypes, placed with `sharding`."""

  @functools.partial(jax.jit, out_shardings=sharding)
  def make(key):
    keys = dict(zip(sorted(spec), jax.random.split(key, len(spec))))
    out = {}
    for name, s in spec.items():
      if jnp.issubdtype(s.dtype, jnp.floating):
        out[name] = jax.random.uniform(keys[name], s.shape, s.dtype)
      elif jnp.issubdtype(s.dtype, jnp.integer):
        out[name] = jax.random.randint(keys[name], s.shape, 0, max(num_classes, 1), s.dtype)
      else:
        out[name] = jnp.ones(s.shape, s.dtype)
    return out

  return make(jax.random.key(seed))


def batches(spec, sharding, *, seed: int, num_classes: int) -> Iterator[dict[str, jax.Array]]:
  """The same synthetic batch (`batch`) for ever."""
  data = batch(spec, sharding, seed=seed, num_classes=num_classes)
  while True:
    yield data
