"""Cheap model construction for tests: the registry's model with random values, no initialisers.

`models.create` runs every initialiser eagerly, and XLA:CPU compiles each
(initialiser, shape) pair once: for a whole network that takes longer than
its train step. The shape-and-structure half of construction is what the tests
check, so `create_tiny` builds the model abstractly (`nnx.eval_shape`) and fills
it from numpy: parameters ~ N(0, 1/fan_in), batch-norm variances 1, means 0,
RNG keys from jax.random.key, other variables N(0, 1).
"""

import functools

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


def _train_forward(graphdef, params, rest, x):
  """Training-mode outputs, gradients of mean(outputs²) with respect to the parameters, and
  the updated non-parameter variables, from one forward pass: plain jax.value_and_grad over
  the split state traces and compiles in about half the time of nnx.jit + nnx.grad here."""
  def loss(params):
    model = nnx.merge(graphdef, params, rest, copy=True)
    out = model(x)
    return jnp.mean(out**2), (out, nnx.state(model, nnx.Not(nnx.Param)))

  (_, (out, rest)), grads = jax.value_and_grad(loss, has_aux=True)(params)
  return out, grads, rest


def train_step(model, x):
  """(outputs, gradients of mean(outputs²)) in one jit-compiled call; the model's batch
  statistics and RNG counters are updated as a training step updates them."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  out, grads, rest = jax.jit(functools.partial(_train_forward, graphdef))(params, rest, x)
  nnx.update(model, rest)
  return out, grads


def train_and_eval(model, x, x_other):
  """One compiled call: training-mode outputs and gradients of mean(out²), and the
  evaluation-mode outputs of a copy of the model for the batches x and x_other (one trace,
  lax.map)."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  evaluated = nnx.merge(graphdef, params, rest)
  evaluated.eval()
  eval_graphdef, eval_state = nnx.split(evaluated)

  @jax.jit
  def run(params, rest, eval_state, batches):
    out, grads, _ = _train_forward(graphdef, params, rest, batches[0])
    outs = jax.lax.map(lambda b: nnx.merge(eval_graphdef, eval_state, copy=True)(b), batches)
    return out, grads, outs

  return run(params, rest, eval_state, jnp.stack([x, x_other]))
