"""PyTorch ResNet checkpoints → our ResNetBackbone variables, by name, for four layouts.

Stages: every layout names block j of stage L `layer{L}.{j}.` + (bottleneck)
`conv1/bn1` (1×1 reduce), `conv2/bn2` (3×3, with the stride: "v1.5", as ours),
`conv3/bn3` (1×1 expand), `downsample.0/.1` (projection shortcut); (basic)
`conv1/bn1`, `conv2/bn2`. Ours (models/resnet.py): `blocks[k]` numbered over all
stages, with `reduce.conv/norm`, `conv`, `norm`, `expand`, `expand_norm`,
`shortcut.conv/norm` (basic: `conv1`, `norm1`, `conv2`, `norm2`, `shortcut`).

Stems (LAYOUTS), told apart by their keys:
- "torchvision": `conv1` 7×7/2, `bn1` → our `stem="standard"` (`stem.conv/norm`).
- "encoding": the deep stem of PyTorch-Encoding's ResNets, which EMANet and
  Enjoy-Hamburger's seg/HamNet load (`resnet101-2a57e44d.pth`,
  `resnet50-ebb6acbb.pth`): an nn.Sequential `conv1` = 3×3/2 conv `conv1.0`,
  BN `conv1.1`, 3×3 conv `conv1.3`, BN `conv1.4`, 3×3 conv `conv1.6`; its last
  BN is the top-level `bn1`. Widths 64, 64, 128.
- "semseg": the PSPNet deep stem of hszhao/semseg (`resnet101_v2.pth`):
  `conv1/bn1`, `conv2/bn2`, `conv3/bn3` at the top level. Widths 64, 64, 128.
- "mmcv": mmcv / mmseg ResNetV1c (`open-mmlab://resnet101_v1c`,
  `resnet101_v1c-e67eebb6.pth`): an nn.Sequential `stem` = conv `stem.0`, BN
  `stem.1`, conv `stem.3`, BN `stem.4`, conv `stem.6`, BN `stem.7`. Widths 32,
  32, 64.
The deep stems map to our `stem="deep"` (`stem.layers[i].conv/norm`) with
`stem_widths` read from the weights (`stem_options`).

Conv weights are transposed OIHW → HWIO; BatchNorm weight/bias → scale/bias
(parameters), running_mean/var → mean/var (batch statistics); the epsilon is
1e-5 in all of them and ours. `num_batches_tracked` and the classifier `fc`
are dropped. All were trained with torch's symmetric padding (k//2 per side,
max pool 1): build the model with `padding="torch"` to compute the features
the weights were trained for (models/resnet.py says why 'SAME' differs).
"""

import numpy as np

from attention_lab.models.resnet import BASIC_DEPTHS, STAGES

_BOTTLENECK = {"conv1": ("reduce", "conv"), "bn1": ("reduce", "norm"), "conv2": ("conv",),
               "bn2": ("norm",), "conv3": ("expand",), "bn3": ("expand_norm",),
               "downsample.0": ("shortcut", "conv"), "downsample.1": ("shortcut", "norm")}
_BASIC = {"conv1": ("conv1",), "bn1": ("norm1",), "conv2": ("conv2",), "bn2": ("norm2",),
          "downsample.0": ("shortcut", "conv"), "downsample.1": ("shortcut", "norm")}
_BN = {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}


def _deep(*names):
  """{torch module: our stem module} for a deep stem whose modules are `names` in the order
  conv, BN, conv, BN, conv, BN."""
  return {name: ("stem", "layers", str(i // 2), "norm" if i % 2 else "conv")
          for i, name in enumerate(names)}


# Layout name → {torch stem module name: our module path}.
LAYOUTS = {
    "torchvision": {"conv1": ("stem", "conv"), "bn1": ("stem", "norm")},
    "encoding": _deep("conv1.0", "conv1.1", "conv1.3", "conv1.4", "conv1.6", "bn1"),
    "semseg": _deep("conv1", "bn1", "conv2", "bn2", "conv3", "bn3"),
    "mmcv": _deep("stem.0", "stem.1", "stem.3", "stem.4", "stem.6", "stem.7"),
}


def unwrap(torch_state: dict) -> dict:
  """The backbone's entries of a state dict: a DataParallel `module.` prefix removed and,
  for a whole mmseg / mmdet model (keys `backbone.*`, `decode_head.*`, ...), only its
  `backbone.` entries, without the prefix."""
  state = {(k[len("module."):] if k.startswith("module.") else k): v
           for k, v in torch_state.items()}
  if any(k.startswith("backbone.") for k in state):
    state = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
  return state


def layout(torch_state: dict) -> str:
  """The stem layout of a (unwrapped) ResNet state dict: a key of LAYOUTS."""
  if "stem.0.weight" in torch_state:
    return "mmcv"
  if "conv1.0.weight" in torch_state:
    return "encoding"
  if "conv2.weight" in torch_state:
    return "semseg"
  if "conv1.weight" in torch_state:
    return "torchvision"
  raise ValueError(f"torch_state has no ResNet stem we know (none of stem.0.weight, "
                   f"conv1.0.weight, conv1.weight); keys start {sorted(torch_state)[:5]}")


def stem_options(torch_state: dict) -> dict:
  """Our ResNetBackbone's stem arguments for these weights: {"stem": "standard"} or
  {"stem": "deep", "stem_widths": (w1, w2, w3)} (output channels of the three convs)."""
  name = layout(torch_state)
  if name == "torchvision":
    return {"stem": "standard"}
  convs = [k for k, v in LAYOUTS[name].items() if v[-1] == "conv"]
  return {"stem": "deep",
          "stem_widths": tuple(int(np.shape(torch_state[f"{k}.weight"])[0]) for k in convs)}


def infer_depth(torch_state: dict) -> int:
  """ResNet depth from the number of blocks per stage and the block kind."""
  counts = tuple(len({k.split(".")[1] for k in torch_state if k.startswith(f"layer{s}.")})
                 for s in range(1, 5))
  basic = not any(k.startswith("layer") and ".conv3." in k for k in torch_state)
  for depth, stages in STAGES.items():
    if stages == counts and (depth in BASIC_DEPTHS) == basic:
      return depth
  raise ValueError(f"torch_state is not a ResNet we know (blocks per stage {counts}, "
                   f"{'basic' if basic else 'bottleneck'} blocks)")


def _module(key: str, stem: dict, names: dict, first) -> tuple[tuple[str, ...], str] | None:
  """(our module path, torch leaf name) of a state-dict key; None for one to drop."""
  parts = key.split(".")
  if parts[0] == "fc" or parts[-1] == "num_batches_tracked":
    return None
  module, leaf = ".".join(parts[:-1]), parts[-1]
  if module in stem:
    return stem[module], leaf
  if parts[0].startswith("layer") and parts[0][5:].isdigit() and len(parts) >= 4:
    stage, index, local = int(parts[0][5:]) - 1, int(parts[1]), ".".join(parts[2:-1])
    if local in names and 0 <= stage < 4:
      return ("blocks", str(first[stage] + index)) + names[local], leaf
  raise ValueError(f"torch_state key {key!r} has no counterpart in our ResNet")


def convert(torch_state: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], np.ndarray]:
  """{our variable path (strings, e.g. ("blocks", "3", "reduce", "conv", "kernel")): value}.

  `torch_state` is a flat state dict in any of LAYOUTS (after `unwrap`); `prefix`
  is prepended to every path (e.g. ("backbone",)). Raises ValueError on a key it
  cannot place (other than `fc.*` and `num_batches_tracked`).
  """
  stem = LAYOUTS[layout(torch_state)]
  depth = infer_depth(torch_state)
  names = _BASIC if depth in BASIC_DEPTHS else _BOTTLENECK
  first = np.cumsum((0,) + STAGES[depth])
  out = {}
  for key, value in torch_state.items():
    place = _module(key, stem, names, first)
    if place is None:
      continue
    module, leaf = place
    value = np.asarray(value)
    if value.ndim == 4:
      if leaf != "weight":
        raise ValueError(f"torch_state key {key!r}: expected a conv weight")
      out[prefix + module + ("kernel",)] = value.transpose(2, 3, 1, 0)
    else:
      if leaf not in _BN:
        raise ValueError(f"torch_state key {key!r}: expected a BatchNorm entry")
      out[prefix + module + (_BN[leaf],)] = value
  return out
