"""torchvision ResNet weights → our ResNetBackbone variables, by name.

torchvision (v1.5, like ours: the stride on the 3×3 conv) names, for a
bottleneck j of stage L: `layer{L}.{j}.conv1/bn1` (1×1 reduce), `conv2/bn2`
(3×3), `conv3/bn3` (1×1 expand), `downsample.0/.1` (projection shortcut);
basic blocks `conv1/bn1`, `conv2/bn2`; the stem `conv1`, `bn1`; `fc` (not
mapped). Ours (models/resnet.py): `stem.conv/norm`, `blocks[k]` numbered over
all stages, with `reduce.conv/norm`, `conv`, `norm`, `expand`, `expand_norm`,
`shortcut.conv/norm` (basic: `conv1`, `norm1`, `conv2`, `norm2`, `shortcut`).
Conv weights are transposed OIHW → HWIO; BatchNorm weight/bias → scale/bias
(parameters), running_mean/var → mean/var (batch statistics); the epsilon is
1e-5 in both. `num_batches_tracked` is dropped.

Padding: torchvision pads k//2 on each side; ours is 'SAME', which equals it
for stride 1 and, for the stride-2 stem conv, max pool and 3×3 convs, on odd
input sizes (DeepLab's 321 / 513 crops); on even sizes 'SAME' pads one pixel
less at the top / left (the usual TF-vs-PyTorch one-pixel shift).
Only the standard 7×7 stem maps (not `stem="deep"`).
"""

import numpy as np

from attention_lab.models.resnet import BASIC_DEPTHS, STAGES

_BOTTLENECK = {"conv1": ("reduce", "conv"), "bn1": ("reduce", "norm"), "conv2": ("conv",),
               "bn2": ("norm",), "conv3": ("expand",), "bn3": ("expand_norm",),
               "downsample.0": ("shortcut", "conv"), "downsample.1": ("shortcut", "norm")}
_BASIC = {"conv1": ("conv1",), "bn1": ("norm1",), "conv2": ("conv2",), "bn2": ("norm2",),
          "downsample.0": ("shortcut", "conv"), "downsample.1": ("shortcut", "norm")}
_BN = {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}


def infer_depth(torch_state: dict) -> int:
  """ResNet depth from the number of blocks per stage and the block kind."""
  counts = tuple(len({k.split(".")[1] for k in torch_state if k.startswith(f"layer{s}.")})
                 for s in range(1, 5))
  basic = not any(".conv3." in k for k in torch_state)
  for depth, stages in STAGES.items():
    if stages == counts and (depth in BASIC_DEPTHS) == basic:
      return depth
  raise ValueError(f"torch_state is not a torchvision ResNet we know (blocks per stage "
                   f"{counts}, {'basic' if basic else 'bottleneck'} blocks)")


def convert(torch_state: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], np.ndarray]:
  """{our variable path (strings, e.g. ("blocks", "3", "reduce", "conv", "kernel")): value}.

  `prefix` is prepended to every path (e.g. ("backbone",)). Raises ValueError on
  a key it cannot place (other than `fc.*` and `num_batches_tracked`).
  """
  depth = infer_depth(torch_state)
  names = _BASIC if depth in BASIC_DEPTHS else _BOTTLENECK
  first = np.cumsum((0,) + STAGES[depth])
  out = {}
  for key, value in torch_state.items():
    value = np.asarray(value)
    parts = key.split(".")
    if parts[0] == "fc" or parts[-1] == "num_batches_tracked":
      continue
    if parts[0] in ("conv1", "bn1"):
      module, leaf = ("stem", "conv" if parts[0] == "conv1" else "norm"), parts[1]
    elif parts[0].startswith("layer") and len(parts) >= 4:
      stage, index = int(parts[0][5:]) - 1, int(parts[1])
      local = ".".join(parts[2:-1])
      if local not in names:
        raise ValueError(f"torch_state key {key!r} has no counterpart in our ResNet")
      module, leaf = ("blocks", str(first[stage] + index)) + names[local], parts[-1]
    else:
      raise ValueError(f"torch_state key {key!r} has no counterpart in our ResNet")
    if value.ndim == 4:
      if leaf != "weight":
        raise ValueError(f"torch_state key {key!r}: expected a conv weight")
      out[prefix + module + ("kernel",)] = value.transpose(2, 3, 1, 0)
    else:
      if leaf not in _BN:
        raise ValueError(f"torch_state key {key!r}: expected a BatchNorm entry")
      out[prefix + module + (_BN[leaf],)] = value
  return out
