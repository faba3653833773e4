"""Parameter counts and the parameter table (<workdir>/parameters.txt), through
`clu.parameter_overview`.

The parameters of a state are its arrays under a "params" key at any depth (one model's
{"params", "non_params", "opt_state"}, or the GAN's generator and discriminator). clu takes a
dict of arrays and not an `nnx.State`, so they are handed over as one flat dict keyed by
path ("params/block/key/kernel"; the `nnx.Variable`'s own "value" attribute left out).
"""

import jax
from clu import parameter_overview
from etils import epath


def parameters(state) -> dict[str, object]:
  """{"path/to/array": array} of every array (or ShapeDtypeStruct) under a "params" key."""
  flat = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    if any(getattr(k, "key", None) == "params" for k in path):
      if isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
        path = path[:-1]
      flat[jax.tree_util.keystr(path, simple=True, separator="/")] = leaf
  return flat


def count_parameters(state) -> int:
  """The number of parameters in `state` (arrays or abstract ShapeDtypeStructs)."""
  return int(parameter_overview.count_parameters(parameters(state)))


def write_table(state, workdir: str) -> str:
  """Writes clu's table of `state`'s parameters (name, shape, dtype, size; the total on the
  last line) to <workdir>/parameters.txt and returns its path."""
  path = epath.Path(workdir) / "parameters.txt"
  path.write_text(parameter_overview.get_parameter_overview(parameters(state),
                                                            include_stats=False) + "\n")
  return str(path)
