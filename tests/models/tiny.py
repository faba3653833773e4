"""Cheap model construction for tests: the registry's model with random values, no initialisers.

`models.create` runs every initialiser eagerly, and XLA:CPU compiles each
(initialiser, shape) pair once: ~9 s for a width-0.25 MobileNetV2, more than
its train step. The shape-and-structure half of construction is what the tests
check, so `create_tiny` builds the model abstractly (`nnx.eval_shape`) and fills
it from numpy: parameters ~ N(0, 1/fan_in), batch-norm variances 1, means 0,
RNG keys from jax.random.key, other variables N(0, 1).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab import models


def create_tiny(name: str, *, num_classes: int, seed: int = 0, **overrides) -> nnx.Module:
  abstract = nnx.eval_shape(
      lambda: models.create(name, num_classes=num_classes, rngs=nnx.Rngs(0), **overrides))
  graphdef, state = nnx.split(abstract)
  rng = np.random.default_rng(seed)

  def fill(path, variable):
    shape, dtype = variable.shape, variable.dtype
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      value = jax.random.key(int(rng.integers(2**31)))
    elif not jnp.issubdtype(dtype, jnp.floating):
      value = np.zeros(shape, dtype)
    elif isinstance(variable, nnx.BatchStat) and path[-1] in ("var", "mean"):
      value = (np.ones if path[-1] == "var" else np.zeros)(shape, dtype)
    else:
      fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
      value = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)
    return variable.replace(value)

  flat = [(path, fill(path, v)) for path, v in nnx.to_flat_state(state)]
  return nnx.merge(graphdef, nnx.from_flat_state(flat))


def train_step(model, x):
  """(outputs, gradients of mean(outputs²)) in one jit-compiled call."""
  return nnx.jit(lambda m, x: (m(x), nnx.grad(lambda m: jnp.mean(m(x) ** 2))(m)))(model, x)


def train_and_eval(model, x, x_other):
  """One compiled call: training-mode outputs and gradients of mean(out²), and the
  evaluation-mode outputs of a copy of the model for the batches x and x_other (one trace,
  lax.map)."""
  graphdef, state = nnx.split(model)
  evaluated = nnx.merge(graphdef, state)
  evaluated.eval()
  eval_graphdef, eval_state = nnx.split(evaluated)

  @jax.jit
  def run(state, eval_state, batches):
    def loss(m):
      out = m(batches[0])
      return jnp.mean(out**2), out
    (_, out), grads = nnx.value_and_grad(loss, has_aux=True)(nnx.merge(graphdef, state))
    outs = jax.lax.map(lambda b: nnx.merge(eval_graphdef, eval_state)(b), batches)
    return out, grads, outs

  return run(state, eval_state, jnp.stack([x, x_other]))
