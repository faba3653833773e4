"""The parameter count and table through clu.parameter_overview, for nnx states."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab.train import parameters


class Net(nnx.Module):

  def __init__(self, rngs):
    self.conv = nnx.Conv(3, 4, (3, 3), rngs=rngs)
    self.norm = nnx.BatchNorm(4, rngs=rngs)  # its running statistics are not parameters
    self.blocks = nnx.List([nnx.Linear(4, 5, rngs=rngs), nnx.Linear(5, 2, use_bias=False,
                                                                     rngs=rngs)])


def _state():
  """A task's state: {"params", "non_params", "opt_state"} of an nnx model, split as tasks do."""
  model = Net(nnx.Rngs(0))
  _, params, rest = nnx.split(model, nnx.Param, ...)
  return model, {"step": jnp.zeros((), jnp.int32), "params": params, "non_params": rest,
                 "opt_state": (jax.tree.map(jnp.zeros_like, params),)}


def test_count_is_the_nnx_param_count():
  model, state = _state()
  by_hand = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  assert by_hand == 3 * 3 * 3 * 4 + 4 + 4 + 4 + 4 * 5 + 5 + 5 * 2
  assert parameters.count_parameters(state) == by_hand
  assert parameters.count_parameters(jax.eval_shape(lambda: state)) == by_hand


def test_every_params_key_at_any_depth_counts():
  _, one = _state()
  _, other = _state()
  gan = {"generator": one, "discriminator": other, "ema": one["params"]}
  assert parameters.count_parameters(gan) == 2 * parameters.count_parameters(one)
  assert sorted(parameters.parameters(gan))[0] == "discriminator/params/blocks/0/bias"


def test_table_has_a_row_per_parameter_and_the_total_last(tmp_path):
  _, state = _state()
  path = parameters.write_table(state, str(tmp_path))
  lines = pathlib.Path(path).read_text().splitlines()
  rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines
          if line.startswith("| params/")}
  assert rows == {"params/conv/kernel": "(3, 3, 3, 4)", "params/conv/bias": "(4,)",
                  "params/norm/scale": "(4,)", "params/norm/bias": "(4,)",
                  "params/blocks/0/kernel": "(4, 5)", "params/blocks/0/bias": "(5,)",
                  "params/blocks/1/kernel": "(5, 2)"}
  assert lines[-1] == f"Total: {parameters.count_parameters(state):,} -- {4 * 155:,} bytes"
