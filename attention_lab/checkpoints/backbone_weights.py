"""Initialise a segmentation backbone from elsewhere (`config.init_from`), in place of its
random initial values, keeping every array's sharding (multi-host safe).

Sources:
- a PyTorch ResNet `.pth` / `.pt` file (read without torch by
  checkpoints/torch_reader.py, mapped by checkpoints/torch_resnet.py):
  torchvision's, or the deep-stem ResNets of PyTorch-Encoding / EMANet /
  Enjoy-Hamburger, PSPNet (hszhao/semseg) and mmcv / mmseg (ResNetV1c, also
  inside a whole mmseg model checkpoint);
- an orbax checkpoint of our classification task (e.g. configs/sanet or an
  ImageNet ResNet run): a workdir, its `checkpoints/` folder or one step
  folder; its `params["backbone"]` and `non_params["backbone"]` (BatchNorm
  statistics; `rest` in older checkpoints) are copied where our model has the
  same path and shape.
Every backbone variable must be found, with its shape; otherwise ValueError
names the first missing or mismatched one (and, for a stem, the stem options
the checkpoint needs). `scope="model"` (`config.init_scope`) copies every
variable of an orbax checkpoint of the same model instead, head included (a
fine-tune from a whole trained model, e.g. configs/hamburger/voc_hamnet.py:trainval).

Padding follows the source (`model_options`, called where a task builds its
model): torch-trained weights need the backbone's `padding="torch"`, which is
chosen whenever `init_from` names a torch file and `config.model.padding` is
"auto"; an orbax checkpoint of ours, or a fresh start, keeps the
model's own padding ("same").
"""

import jax
import numpy as np
from absl import logging
from etils import epath


def _name(entry) -> str:
  for attribute in ("key", "name", "idx"):
    if hasattr(entry, attribute):
      return str(getattr(entry, attribute))
  return str(entry)


def flatten(tree) -> dict[tuple[str, ...], np.ndarray]:
  """{path as strings, without nnx's trailing "value": leaf} of any pytree."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    names = tuple(_name(p) for p in path)
    if names and names[-1] == "value":
      names = names[:-1]
    out[names] = leaf
  return out


def _orbax_item(path: str) -> epath.Path:
  """The item folder of the newest step under a workdir / checkpoints dir / step dir (a
  local path, made absolute as orbax wants, or a URI)."""
  path = epath.Path(path)
  path = path if "://" in str(path) else path.resolve()
  if (path / "checkpoints").is_dir():
    path = path / "checkpoints"
  steps = [int(d.name) for d in path.iterdir() if d.name.isdigit()] if path.is_dir() else []
  if steps:
    path = path / str(max(steps))
  if (path / "default").is_dir():
    path = path / "default"
  return path


def is_torch_checkpoint(init_from: str) -> bool:
  """True when `init_from` names a torch.save file: not empty, not a config file
  (`path.py[:preset]`) and not a directory (an orbax checkpoint or workdir)."""
  if not init_from or init_from.partition(":")[0].endswith(".py"):
    return False
  return not epath.Path(init_from).is_dir()


def model_options(config) -> dict:
  """Model arguments that the weights of `config.init_from` fix, for the task to pass when it
  builds `config.model`: {"padding": "torch"} for a torch checkpoint, {"padding": "same"}
  otherwise, when `config.model.padding` is "auto"; {} when it names a padding itself
  (an explicit choice wins)."""
  if config.model.padding != "auto":
    return {}
  return {"padding": "torch" if is_torch_checkpoint(config.init_from) else "same"}


def _stem_hint(weights) -> str:
  """An error suffix naming the stem options the loaded weights need ("" if unknown)."""
  stem = ("params", "backbone", "stem")
  if stem + ("conv", "kernel") in weights:
    return " (its stem needs --config.model.stem=standard)"
  widths = [weights[stem + ("layers", str(i), "conv", "kernel")].shape[-1]
            for i in range(3) if stem + ("layers", str(i), "conv", "kernel") in weights]
  if len(widths) != 3:
    return ""
  return (f" (its stem needs --config.model.stem=deep "
          f"--config.model.stem_widths=\"({','.join(map(str, widths))})\")")


SCOPES = ("backbone", "model")


def read(path: str, scope: str = "backbone") -> dict[tuple[str, ...], np.ndarray]:
  """{("params" | "non_params", "backbone", ...): numpy value} from a .pth file or orbax
  checkpoint; scope "model": every ("params" | "non_params", ...) value of an orbax
  checkpoint."""
  if scope not in SCOPES:
    raise ValueError(f"init_scope must be one of {SCOPES}, got {scope!r}")
  if not epath.Path(path).exists():
    raise ValueError(f"init_from {path!r} does not exist")
  if epath.Path(path).is_file():
    if scope != "backbone":
      raise ValueError(f"init_from {path!r} is a torch file (a backbone); init_scope "
                       f"{scope!r} needs a workdir of a run of this model")
    from attention_lab.checkpoints import torch_reader, torch_resnet  # pylint: disable=g-import-not-at-top
    state = torch_resnet.unwrap(torch_reader.load_torch_state_dict(path))
    converted = torch_resnet.convert(state)
    return {("non_params" if k[-1] in ("mean", "var") else "params", "backbone") + k: v
            for k, v in converted.items()}
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from attention_lab.train import checkpointing  # pylint: disable=g-import-not-at-top
  item = _orbax_item(path)
  # The handler, not a Checkpointer: a Checkpointer looks for the step's metadata file in
  # the item folder and warns on the console that it is missing.
  handler = ocp.PyTreeCheckpointHandler()
  try:
    tree = handler.metadata(item)
    tree = getattr(tree, "item_metadata", tree)
    tree = getattr(tree, "tree", tree)
    # numpy on the host: no device placement, the same on every process.
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    restored = handler.restore(item, args=ocp.args.PyTreeRestore(restore_args=restore_args))
  finally:
    handler.close()
  restored = checkpointing.current_keys(restored)
  return {k: np.asarray(v) for k, v in flatten(restored).items()
          if len(k) > 1 and k[0] in ("params", "non_params") and _in_scope(k, scope)}


def _in_scope(key: tuple[str, ...], scope: str) -> bool:
  return scope == "model" or key[1] == "backbone"


def load_into(state, path: str, scope: str = "backbone"):
  """`state` with its backbone variables (scope "model": all its variables) replaced by
  those at `path`, in their shardings."""
  weights = read(path, scope)
  flat_state = {("params",) + k: v for k, v in flatten(state["params"]).items()}
  flat_state.update({("non_params",) + k: v for k, v in flatten(state["non_params"]).items()})
  wanted = {k for k, v in flat_state.items()
            if _in_scope(k, scope) and hasattr(v, "shape") and
            jax.numpy.issubdtype(v.dtype, jax.numpy.floating)}  # not rng keys
  for key in sorted(wanted, key=lambda k: (k[2:3] != ("stem",), k)):  # the stem first
    hint = _stem_hint(weights) if key[2:3] == ("stem",) else ""
    if key not in weights:
      raise ValueError(f"init_from {path!r} has no {'/'.join(key[1:])} ({key[0]}){hint}")
    if tuple(weights[key].shape) != tuple(flat_state[key].shape):
      raise ValueError(f"init_from {path!r}: {'/'.join(key[1:])} has shape "
                       f"{weights[key].shape}, our model {flat_state[key].shape}{hint}")
  unused = sorted(set(weights) - wanted)
  logging.info("init_from %s: %d %s arrays loaded, %d unused", path, len(wanted), scope,
               len(unused))

  def replace(prefix):
    def fn(path_, leaf):
      key = prefix + tuple(n for n in (_name(p) for p in path_) if n != "value")
      if key not in wanted:
        return leaf
      value = weights[key].astype(leaf.dtype)
      return jax.make_array_from_callback(leaf.shape, leaf.sharding, lambda index: value[index])
    return fn

  params = jax.tree_util.tree_map_with_path(replace(("params",)), state["params"])
  non_params = jax.tree_util.tree_map_with_path(replace(("non_params",)), state["non_params"])
  return {**state, "params": params, "non_params": non_params}
