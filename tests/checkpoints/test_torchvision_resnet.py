"""torchvision ResNet weights → our ResNet, proven on .pth zips written here in torch's format:
with `padding="torch"` the whole backbone equals an independent NCHW numpy computation
(tests/checkpoints/resnet_reference.py) at even and odd input sizes; 'SAME' equals it only at
odd sizes. Where torchvision is installed, against torchvision itself."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from attention_lab.checkpoints import backbone_weights, torch_resnet
from attention_lab.models.resnet import ResNetBackbone
from tests import peers
from tests.checkpoints import resnet_reference as ref


def load(path, depth=14, width=0.125, **options):
  """Our backbone, filled from `path` by backbone_weights.load_into, in eval mode."""
  abstract = nnx.eval_shape(lambda: ResNetBackbone(depth=depth, width=width, rngs=nnx.Rngs(0),
                                                   **options))
  graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
  params, rest = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (params, rest))
  loaded = backbone_weights.load_into(
      {"params": {"backbone": params}, "non_params": {"backbone": rest}}, path)
  model = nnx.merge(graphdef, loaded["params"]["backbone"], loaded["non_params"]["backbone"])
  model.eval()
  return model


def features(model, x_nchw):
  """(stem + max pool, backbone output) of our model, back in NCHW."""
  x = jnp.asarray(x_nchw.transpose(0, 2, 3, 1), jnp.float32)
  stem, out = jax.jit(lambda x: (model.stem_features(x), model(x)))(x)
  return np.asarray(stem).transpose(0, 3, 1, 2), np.asarray(out).transpose(0, 3, 1, 2)


def relative_error(ours, reference):
  return float(np.abs(ours - reference).max() / np.abs(reference).max())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  state = ref.state_dict(np.random.default_rng(0))
  path = str(tmp_path_factory.mktemp("tv") / "resnet.pth")
  ref.write_pth(path, state)
  return state, path


@pytest.mark.parametrize("size", [32, 33])
def test_torch_padding_gives_torchvision_features_at_even_and_odd_sizes(checkpoint, size):
  state, path = checkpoint
  x = np.random.default_rng(size).normal(size=(2, 3, size, 2 * size - size % 2))
  stem_ref, out_ref = ref.forward(x, state)
  stem, out = features(load(path, padding="torch"), x)
  assert out.shape == out_ref.shape == (2, 8 * ref.C * 4, -(-size // 32), -(-x.shape[3] // 32))
  np.testing.assert_allclose(stem, stem_ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(out, out_ref, rtol=1e-4, atol=1e-4)
  # 'SAME' padding is torch's only on odd sizes; on even ones every stride-2 layer shifts.
  _, same = features(load(path), x)
  if size % 2:
    np.testing.assert_allclose(same, out_ref, rtol=1e-4, atol=1e-4)
  else:
    assert relative_error(same, out_ref) > 0.05


def test_every_tensor_lands_once(checkpoint):
  state, _ = checkpoint
  converted = torch_resnet.convert(state)
  dropped = [k for k in state if k.startswith("fc.") or k.endswith("num_batches_tracked")]
  assert len(converted) == len(state) - len(dropped) and len(dropped) == 2 + 17
  np.testing.assert_array_equal(converted[("blocks", "3", "shortcut", "norm", "var")],
                                state["layer4.0.downsample.1.running_var"])
  np.testing.assert_array_equal(converted[("stem", "conv", "kernel")],
                                state["conv1.weight"].transpose(2, 3, 1, 0))
  model = nnx.eval_shape(lambda: ResNetBackbone(depth=14, width=0.125, rngs=nnx.Rngs(0)))
  _, params, rest = nnx.split(model, nnx.Param, ...)
  ours = {k for k, v in backbone_weights.flatten({"p": params, "r": rest}).items()
          if np.issubdtype(np.dtype(v.dtype), np.floating)}
  assert {k[1:] for k in ours} == set(converted)  # no leftovers, nothing missing


def test_bad_files_and_shapes_are_named(checkpoint, tmp_path):
  state, path = checkpoint
  with pytest.raises(ValueError, match="no counterpart"):
    torch_resnet.convert({**state, "layer1.0.se.weight": np.zeros((2, 2, 1, 1))})
  with pytest.raises(ValueError, match="no ResNet stem"):
    torch_resnet.convert({k: v for k, v in state.items() if not k.startswith(("conv1", "bn1"))})
  with pytest.raises(ValueError, match="shape"):
    load(path, width=0.25)  # wider than the file
  with pytest.raises(ValueError, match="stem needs --config.model.stem=standard"):
    load(path, stem="deep")
  with pytest.raises(ValueError, match="does not exist"):
    backbone_weights.load_into({"params": {}, "non_params": {}}, str(tmp_path / "missing.pth"))


def test_torch_checkpoints_choose_torch_padding(checkpoint, tmp_path):
  """The tasks build their model with model_options(config): torch files get torch padding;
  an orbax checkpoint, a config file or no init_from keep 'same'; an explicit padding wins."""
  _, path = checkpoint
  config = lambda init_from, padding="auto": ml_collections.ConfigDict(
      {"init_from": init_from, "model": {"name": "hamnet", "padding": padding}})
  options = backbone_weights.model_options
  assert options(config(path)) == {"padding": "torch"}
  assert options(config(path, padding="same")) == {}
  assert options(config(str(tmp_path))) == {"padding": "same"}  # orbax dir
  assert options(config("configs/segmentation/digits_backbone.py:cpu")) == {"padding": "same"}
  assert options(config("")) == {"padding": "same"}


@pytest.mark.parametrize("size", [64, 65])
def test_real_torchvision(tmp_path, size):
  """torchvision's own Bottleneck ResNet (one block per stage, full width, random weights and
  BatchNorm statistics), saved by torch.save, read without torch, equals torchvision."""
  torch = peers.require("torch")
  torchvision = peers.require("torchvision")
  torch.manual_seed(0)
  net = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1])
  with torch.no_grad():
    for m in net.modules():
      if isinstance(m, torch.nn.BatchNorm2d):
        m.weight.uniform_(0.5, 1.5), m.bias.normal_(0, 0.3)
        m.running_mean.normal_(0, 0.3), m.running_var.uniform_(0.5, 2.0)
  net.eval()
  path = str(tmp_path / "resnet.pth")
  torch.save(net.state_dict(), path)
  x = np.random.default_rng(0).normal(size=(1, 3, size, size)).astype(np.float32)
  body = torch.nn.Sequential(*list(net.children())[:-2])
  with torch.no_grad():
    expected = body(torch.from_numpy(x)).numpy()
  _, out = features(load(path, width=1.0, padding="torch"), x)
  assert relative_error(out, expected) < 1e-4


def test_the_segmentation_task_builds_torch_padding_for_a_torch_checkpoint(checkpoint, tmp_path):
  """voc_hamnet:cpu (depth 14, width 1/8, the 7×7 stem) with init_from = a torchvision .pth:
  the task builds its backbone with torch padding and fills it from the file; without
  init_from the same config builds 'SAME'."""
  from attention_lab.train import state as state_lib, tasks  # pylint: disable=g-import-not-at-top
  from attention_lab.train.tasks import base  # pylint: disable=g-import-not-at-top
  from configs.hamburger import voc_hamnet  # pylint: disable=g-import-not-at-top
  state_dict, path = checkpoint
  config = voc_hamnet.get_config("cpu")
  assert config.model.padding == "auto"

  def task_for(init_from):
    config.init_from = init_from
    env = base.Environment(state_lib.make_mesh(config), str(tmp_path), config.batch_size)
    return tasks.create(config, env)

  assert nnx.eval_shape(lambda: task_for("").net.build(nnx.Rngs(0))).backbone.pool_padding == (
      "SAME")
  task = task_for(path)
  model = nnx.eval_shape(lambda: task.net.build(nnx.Rngs(0)))
  assert model.backbone.pool_padding == ((1, 1), (1, 1))
  assert model.backbone.stem.conv.padding == ((3, 3), (3, 3))
  _, params, rest = nnx.split(model, nnx.Param, ...)  # zeros: init_state compiles for a minute
  params, rest = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (params, rest))
  loaded = task.from_pretrained({"params": params, "non_params": rest})
  np.testing.assert_array_equal(loaded["params"]["backbone"]["stem"]["conv"]["kernel"][...],
                                state_dict["conv1.weight"].transpose(2, 3, 1, 0))
