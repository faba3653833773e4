"""The deep-stem ResNet checkpoints of the HamNet / PSPNet / mmseg line → our `stem="deep"`
ResNet, on .pth zips written here with the real key names and nesting: PyTorch-Encoding /
EMANet / Enjoy-Hamburger (`conv1.0/1/3/4/6` + `bn1`, 64-64-128), hszhao/semseg PSPNet
(`conv1..3`, `bn1..3`, 64-64-128) and mmcv ResNetV1c (`stem.0/1/3/4/6/7`, 32-32-64, inside
{"meta", "state_dict"}, or a whole mmseg model under `backbone.`). Each loads through
backbone_weights.load_into and its whole backbone equals the independent NCHW reference at an
even input size under torch padding; every tensor of the file lands, once, where it belongs."""

import numpy as np
import pytest
from flax import nnx

from attention_lab.checkpoints import backbone_weights, torch_reader, torch_resnet
from attention_lab.models.resnet import ResNetBackbone
from tests.checkpoints import resnet_reference as ref
from tests.checkpoints.test_torchvision_resnet import features, load

C = ref.C
# layout → (stem widths in the file at our width 0.125, our stem_widths at width 1).
LAYOUTS = {"encoding": ((C, C, 2 * C), (64, 64, 128)), "semseg": ((C, C, 2 * C), (64, 64, 128)),
           "mmcv": ((C // 2, C // 2, C), (32, 32, 64))}
# Where each layout's third stem BatchNorm (the input of layer1) is in the file.
LAST_STEM_BN = {"encoding": "bn1", "semseg": "bn3", "mmcv": "stem.7"}


def written(tmp_path, layout, seed=0):
  """(state dict, path of the .pth written as that line's tools write it)."""
  state = ref.state_dict(np.random.default_rng(seed), layout, LAYOUTS[layout][0])
  if layout == "mmcv":  # mmcv's save_checkpoint: {"meta": ..., "state_dict": ...}
    obj = {"meta": {"mmcv_version": "1.3.0", "time": "Thu Jan  7 18:20:59 2021"},
           "state_dict": state}
  elif layout == "encoding":  # trained under DataParallel
    obj = {f"module.{k}": v for k, v in state.items()}
  else:
    obj = state
  path = str(tmp_path / f"{layout}.pth")
  ref.write_pth(path, obj)
  return state, path


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_deep_stem_checkpoint_gives_the_reference_features(tmp_path, layout):
  state, path = written(tmp_path, layout)
  read = torch_resnet.unwrap(torch_reader.load_torch_state_dict(path))
  assert torch_resnet.layout(read) == layout
  options = torch_resnet.stem_options(read)
  assert options == {"stem": "deep", "stem_widths": LAYOUTS[layout][0]}
  model = load(path, stem="deep", stem_widths=LAYOUTS[layout][1], padding="torch")
  x = np.random.default_rng(1).normal(size=(2, 3, 32, 64))  # even: torch padding matters
  stem_ref, out_ref = ref.forward(x, state, layout)
  stem, out = features(model, x)
  np.testing.assert_allclose(stem, stem_ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(out, out_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_tensor_lands_once(tmp_path, layout):
  state, _ = written(tmp_path, layout)
  converted = torch_resnet.convert(state, prefix=("backbone",))
  dropped = [k for k in state if k.startswith("fc.") or k.endswith("num_batches_tracked")]
  assert len(converted) == len(state) - len(dropped) and len(dropped) == 2 + 19
  bn = LAST_STEM_BN[layout]
  stem = ("backbone", "stem", "layers")
  np.testing.assert_array_equal(converted[stem + ("2", "norm", "mean")],
                                state[f"{bn}.running_mean"])
  np.testing.assert_array_equal(converted[stem + ("2", "norm", "scale")], state[f"{bn}.weight"])
  first_conv = {"encoding": "conv1.0", "semseg": "conv1", "mmcv": "stem.0"}[layout]
  np.testing.assert_array_equal(converted[stem + ("0", "conv", "kernel")],
                                state[f"{first_conv}.weight"].transpose(2, 3, 1, 0))
  np.testing.assert_array_equal(converted[("backbone", "blocks", "0", "reduce", "conv", "kernel")],
                                state["layer1.0.conv1.weight"].transpose(2, 3, 1, 0))
  model = nnx.eval_shape(lambda: ResNetBackbone(depth=14, width=0.125, stem="deep",
                                                 stem_widths=LAYOUTS[layout][1],
                                                 rngs=nnx.Rngs(0)))
  _, params, rest = nnx.split(model, nnx.Param, ...)
  ours = {("backbone",) + k[1:] for k, v in backbone_weights.flatten([params, rest]).items()
          if np.issubdtype(np.dtype(v.dtype), np.floating)}
  assert ours == set(converted)  # no leftovers, nothing missing


def test_whole_mmseg_model_checkpoint_gives_its_backbone(tmp_path):
  state = ref.state_dict(np.random.default_rng(2), "mmcv", LAYOUTS["mmcv"][0])
  model = {f"backbone.{k}": v for k, v in state.items()}
  model["decode_head.conv_seg.weight"] = np.zeros((150, 64, 1, 1), np.float32)
  path = str(tmp_path / "ham_r101.pth")
  ref.write_pth(path, {"meta": {"CLASSES": ["wall", "building"]}, "state_dict": model})
  read = torch_resnet.unwrap(torch_reader.load_torch_state_dict(path))
  assert set(read) == set(state)
  weights = backbone_weights.read(path)
  assert len(weights) == len(torch_resnet.convert(state))


def test_a_stem_mismatch_names_the_options_the_checkpoint_needs(tmp_path):
  _, path = written(tmp_path, "mmcv")
  with pytest.raises(ValueError, match=r"stem_widths=\"\(4,4,8\)\""):
    load(path, stem="deep")  # 64-64-128, the Encoding / PSPNet stem
  with pytest.raises(ValueError, match="stem=deep"):
    load(path)  # the 7×7 stem
