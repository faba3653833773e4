"""torchvision ResNet weights → our ResNet, proven on a .pth zip written here in torch's format:
the stem, max pool and first bottleneck of our model equal an independent NCHW numpy computation
(PyTorch semantics: symmetric k//2 padding, eval-mode BatchNorm) on the same weights."""

import collections

import jax
import numpy as np
import pytest
from flax import nnx

from attention_lab.checkpoints import backbone_weights, torchvision_resnet
from attention_lab.models.resnet import ResNetBackbone
from tests.checkpoints.test_torch_reader import Storage, Tensor, write_zip

C = 8  # width 0.125: stem 8 channels, stage widths 8, 16, 32, 64 (×4 out)


def torchvision_state(rng):
  """A torchvision-named ResNet state dict at depth 14 (one bottleneck per stage)."""
  shapes = {"conv1.weight": (C, 3, 7, 7)}
  bn = lambda name, n: {f"{name}.{k}": (n,) for k in
                        ("weight", "bias", "running_mean", "running_var")}
  shapes.update(bn("bn1", C))
  cin = C
  for stage, planes in enumerate((C, 2 * C, 4 * C, 8 * C), 1):
    p = f"layer{stage}.0"
    shapes.update({f"{p}.conv1.weight": (planes, cin, 1, 1), f"{p}.conv2.weight":
                   (planes, planes, 3, 3), f"{p}.conv3.weight": (4 * planes, planes, 1, 1),
                   f"{p}.downsample.0.weight": (4 * planes, cin, 1, 1)})
    for name, n in (("bn1", planes), ("bn2", planes), ("bn3", 4 * planes),
                    ("downsample.1", 4 * planes)):
      shapes.update(bn(f"{p}.{name}", n))
    cin = 4 * planes
  shapes.update({"fc.weight": (10, cin), "fc.bias": (10,)})
  state = collections.OrderedDict()
  for name, shape in shapes.items():
    if name.endswith("running_var"):
      value = rng.uniform(0.5, 2.0, shape)
    elif name.endswith(".weight") and len(shape) == 1:
      value = rng.uniform(0.5, 1.5, shape)
    else:
      value = rng.normal(0, 0.3, shape)
    state[name] = value.astype(np.float32)
  state["bn1.num_batches_tracked"] = np.array(7, np.int64)
  return state


def write_pth(path, state):
  tensors = collections.OrderedDict()
  for i, (name, value) in enumerate(state.items()):
    stride = tuple(int(s) // value.itemsize for s in value.strides)
    tensors[name] = Tensor(Storage(str(i), value), 0, value.shape, stride)
  write_zip(path, tensors)


# Independent reference, NCHW, float64.
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
      out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
  return out


def bn(x, s, name):
  g = lambda k: s[f"{name}.{k}"].astype(np.float64)[None, :, None, None]
  return (x - g("running_mean")) / np.sqrt(g("running_var") + 1e-5) * g("weight") + g("bias")


def max_pool(x):
  x = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
  h, w = (x.shape[2] - 3) // 2 + 1, (x.shape[3] - 3) // 2 + 1
  return np.max([x[:, :, i:i + 2 * h:2, j:j + 2 * w:2] for i in range(3) for j in range(3)], 0)


def reference(x, s):
  relu = lambda v: np.maximum(v, 0)
  x = max_pool(relu(bn(conv(x, s["conv1.weight"], 2), s, "bn1")))
  stem = x
  p = "layer1.0"
  y = relu(bn(conv(x, s[f"{p}.conv1.weight"]), s, f"{p}.bn1"))
  y = relu(bn(conv(y, s[f"{p}.conv2.weight"]), s, f"{p}.bn2"))
  y = bn(conv(y, s[f"{p}.conv3.weight"]), s, f"{p}.bn3")
  shortcut = bn(conv(x, s[f"{p}.downsample.0.weight"]), s, f"{p}.downsample.1")
  return stem, relu(y + shortcut)


def test_stem_and_bottleneck_match_an_nchw_numpy_computation(tmp_path):
  rng = np.random.default_rng(0)
  state = torchvision_state(rng)
  path = str(tmp_path / "resnet.pth")
  write_pth(path, state)
  model = ResNetBackbone(depth=14, width=0.125, rngs=nnx.Rngs(0))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  loaded = backbone_weights.load_into(
      {"params": {"backbone": params}, "rest": {"backbone": rest}}, path)
  model = nnx.merge(graphdef, loaded["params"]["backbone"], loaded["rest"]["backbone"])
  model.eval()
  x = rng.normal(size=(2, 3, 17, 21))  # odd sizes: 'SAME' pads as PyTorch does
  stem_ref, block_ref = reference(x, state)
  nhwc = jax.numpy.asarray(x.transpose(0, 2, 3, 1), jax.numpy.float32)
  stem = nnx.max_pool(model.stem(nhwc), (3, 3), (2, 2), "SAME")
  block = model.blocks[0](stem)
  np.testing.assert_allclose(np.asarray(stem).transpose(0, 3, 1, 2), stem_ref, rtol=1e-4,
                             atol=1e-4)
  np.testing.assert_allclose(np.asarray(block).transpose(0, 3, 1, 2), block_ref, rtol=1e-4,
                             atol=1e-4)
  # Every backbone variable came from the file; the classifier was not mapped.
  converted = torchvision_resnet.convert(state)
  assert len(converted) == len(state) - 3  # fc.weight, fc.bias, num_batches_tracked
  assert converted[("blocks", "3", "shortcut", "norm", "var")].shape == (8 * C * 4,)


def test_bad_files_and_shapes_are_named(tmp_path):
  state = torchvision_state(np.random.default_rng(1))
  with pytest.raises(ValueError, match="no counterpart"):
    torchvision_resnet.convert({**state, "layer1.0.se.weight": np.zeros((2, 2, 1, 1))})
  path = str(tmp_path / "resnet.pth")
  write_pth(path, state)
  model = ResNetBackbone(depth=14, width=0.25, rngs=nnx.Rngs(0))  # wider than the file
  _, params, rest = nnx.split(model, nnx.Param, ...)
  with pytest.raises(ValueError, match="shape"):
    backbone_weights.load_into({"params": {"backbone": params}, "rest": {"backbone": rest}}, path)
  with pytest.raises(ValueError, match="does not exist"):
    backbone_weights.load_into({"params": {}, "rest": {}}, str(tmp_path / "missing.pth"))
