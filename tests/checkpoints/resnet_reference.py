"""Torch ResNet state dicts written here, and an independent NCHW float64 numpy forward of
them with PyTorch's semantics (symmetric d·(k−1)/2 conv padding, max pool 3×3/2 padded 1 with
−∞, eval-mode BatchNorm ε = 1e-5), for the checkpoint converters' tests.

A tiny bottleneck ResNet: one block per stage (our depth 14), stage widths C, 2C, 4C, 8C
(×4 out), stride on the 3×3 conv, output stride 32. Stems, by layout (key names as the
real checkpoints have them): "torchvision" 7×7/2; the deep 3×3 stems "encoding"
(conv1.0/1/3/4/6 + bn1), "semseg" (conv1..3/bn1..3) and "mmcv" (stem.0/1/3/4/6/7).
"""

import collections

import numpy as np

from tests.checkpoints.test_torch_reader import Storage, Tensor, write_zip

C = 8

_STEM_NAMES = {
    "encoding": ("conv1.0", "conv1.1", "conv1.3", "conv1.4", "conv1.6", "bn1"),
    "semseg": ("conv1", "bn1", "conv2", "bn2", "conv3", "bn3"),
    "mmcv": ("stem.0", "stem.1", "stem.3", "stem.4", "stem.6", "stem.7"),
}


def _bn(name, n):
  return {f"{name}.{k}": (n,) for k in ("weight", "bias", "running_mean", "running_var")}


def state_dict(rng, layout="torchvision", stem_widths=(C, C, 2 * C)):
  """{name: float32 array} of the tiny ResNet with the `layout` stem, plus the classifier
  `fc` and one `num_batches_tracked` per BatchNorm (as torch writes them)."""
  shapes = {}
  if layout == "torchvision":
    shapes["conv1.weight"] = (C, 3, 7, 7)
    shapes.update(_bn("bn1", C))
    cin = C
  else:
    names, cin = _STEM_NAMES[layout], 3
    for i, width in enumerate(stem_widths):
      shapes[f"{names[2 * i]}.weight"] = (width, cin, 3, 3)
      shapes.update(_bn(names[2 * i + 1], width))
      cin = width
  for stage, planes in enumerate((C, 2 * C, 4 * C, 8 * C), 1):
    p = f"layer{stage}.0"
    shapes.update({f"{p}.conv1.weight": (planes, cin, 1, 1), f"{p}.conv2.weight":
                   (planes, planes, 3, 3), f"{p}.conv3.weight": (4 * planes, planes, 1, 1),
                   f"{p}.downsample.0.weight": (4 * planes, cin, 1, 1)})
    for name, n in (("bn1", planes), ("bn2", planes), ("bn3", 4 * planes),
                    ("downsample.1", 4 * planes)):
      shapes.update(_bn(f"{p}.{name}", n))
    cin = 4 * planes
  shapes.update({"fc.weight": (10, cin), "fc.bias": (10,)})
  state = collections.OrderedDict()
  for name, shape in shapes.items():
    if name.endswith("running_var"):
      value = rng.uniform(0.5, 2.0, shape)
    elif name.endswith(".weight") and len(shape) == 1:
      value = rng.uniform(0.5, 1.5, shape)
    elif len(shape) == 4:  # He-scaled so activations keep their size through the net
      value = rng.normal(0, np.sqrt(2 / np.prod(shape[1:])), shape)
    else:
      value = rng.normal(0, 0.3, shape)
    state[name] = value.astype(np.float32)
    if name.endswith("running_var"):
      state[name[:-len("running_var")] + "num_batches_tracked"] = np.array(7, np.int64)
  return state


def write_pth(path, obj):
  """torch.save's zip format of a (possibly nested) dict whose leaves are arrays or plain
  values."""
  def tensors(value, counter):
    if isinstance(value, dict):
      return collections.OrderedDict((k, tensors(v, counter)) for k, v in value.items())
    if not isinstance(value, np.ndarray):
      return value
    counter.append(0)
    stride = tuple(int(s) // value.itemsize for s in value.strides)
    return Tensor(Storage(str(len(counter)), value), 0, value.shape, stride)
  write_zip(path, tensors(obj, []))


def conv(x, w, stride=1):
  k = w.shape[-1]
  p = k // 2
  x = np.pad(x, [(0, 0), (0, 0), (p, p), (p, p)])
  h = (x.shape[2] - k) // stride + 1
  wd = (x.shape[3] - k) // stride + 1
  out = np.zeros((x.shape[0], w.shape[0], h, wd))
  for i in range(k):
    for j in range(k):
      patch = x[:, :, i:i + stride * h:stride, j:j + stride * wd:stride]
      out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
  return out


def bn(x, s, name):
  g = lambda k: s[f"{name}.{k}"].astype(np.float64)[None, :, None, None]
  return (x - g("running_mean")) / np.sqrt(g("running_var") + 1e-5) * g("weight") + g("bias")


def max_pool(x):
  x = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
  h, w = (x.shape[2] - 3) // 2 + 1, (x.shape[3] - 3) // 2 + 1
  return np.max([x[:, :, i:i + 2 * h:2, j:j + 2 * w:2] for i in range(3) for j in range(3)], 0)


def relu(v):
  return np.maximum(v, 0)


def forward(x, s, layout="torchvision"):
  """x (N, 3, H, W) → (stem + max pool output, backbone output), NCHW float64."""
  if layout == "torchvision":
    x = relu(bn(conv(x, s["conv1.weight"], 2), s, "bn1"))
  else:
    names = _STEM_NAMES[layout]
    for i in range(3):
      x = relu(bn(conv(x, s[f"{names[2 * i]}.weight"], 2 if i == 0 else 1), s, names[2 * i + 1]))
  x = stem = max_pool(x)
  for stage in range(1, 5):
    p, stride = f"layer{stage}.0", 1 if stage == 1 else 2
    y = relu(bn(conv(x, s[f"{p}.conv1.weight"]), s, f"{p}.bn1"))
    y = relu(bn(conv(y, s[f"{p}.conv2.weight"], stride), s, f"{p}.bn2"))
    y = bn(conv(y, s[f"{p}.conv3.weight"]), s, f"{p}.bn3")
    x = relu(y + bn(conv(x, s[f"{p}.downsample.0.weight"], stride), s, f"{p}.downsample.1"))
  return stem, x
