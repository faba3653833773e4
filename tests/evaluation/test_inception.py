import numpy as np
import pytest

from attention_lab.evaluation import inception
from tests import peers


def test_parameter_count_is_torchvision_inception_v3_with_1008_logits():
  shapes = inception.parameter_shapes()
  learned = sum(int(np.prod(s)) for k, s in shapes.items() if "running" not in k)
  # torchvision.models.inception_v3(aux_logits=False) has 23,834,568 parameters with a
  # 1000-way fc; the FID network's fc is 1008-way.
  assert learned == 23_834_568 + 8 * 2048 + 8
  assert shapes["Mixed_7c.branch_pool.conv.weight"] == (192, 2048, 1, 1)
  assert shapes["Mixed_6b.branch7x7dbl_2.conv.weight"] == (128, 128, 7, 1)


def _naive_basic_conv(x, w, gamma, beta, mean, var, stride):
  """NCHW conv (no padding) + BatchNorm(eps 1e-3) + ReLU with explicit loops, float64."""
  n, cin, h, wd = x.shape
  cout, _, kh, kw = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  out = np.zeros((n, cout, oh, ow))
  for i in range(oh):
    for j in range(ow):
      patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
      out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
  out = (out - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * gamma[:, None, None]
  return np.maximum(out + beta[:, None, None], 0)


def test_folded_conv_bn_matches_a_naive_nchw_reference():
  weights = inception.random_weights(1)
  params = inception.prepare(weights)
  x = np.random.default_rng(0).normal(size=(2, 3, 9, 11))
  got = inception._conv(params, "Conv2d_1a_3x3", x.transpose(0, 2, 3, 1).astype(np.float32),
                        stride=2)
  w = {k.split(".", 1)[1]: v.astype(np.float64) for k, v in weights.items()
       if k.startswith("Conv2d_1a_3x3.")}
  want = _naive_basic_conv(x, w["conv.weight"], w["bn.weight"], w["bn.bias"],
                           w["bn.running_mean"], w["bn.running_var"], 2)
  np.testing.assert_allclose(np.asarray(got).transpose(0, 3, 1, 2), want, rtol=1e-4, atol=1e-5)


def test_average_pool_leaves_padding_out_of_the_count():
  x = np.arange(2 * 4 * 5, dtype=np.float32).reshape(1, 4, 5, 2)
  got = np.asarray(inception._avg_pool_valid_count(x))
  for i in range(4):
    for j in range(5):
      window = x[0, max(i - 1, 0):i + 2, max(j - 1, 0):j + 2]
      np.testing.assert_allclose(got[0, i, j], window.mean((0, 1)), rtol=1e-6)


def test_features_shape_and_determinism():
  params = inception.prepare(inception.random_weights(0))
  images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
  a = np.asarray(inception.pool_features(params, images))
  assert a.shape == (2, inception.POOL_FEATURES) and np.isfinite(a).all()
  assert (a >= 0).all()  # an average of ReLU outputs
  assert np.abs(a[0] - a[1]).max() > 0


def test_bad_weights_and_images_are_rejected():
  weights = inception.random_weights(0)
  del weights["fc.bias"]
  with pytest.raises(ValueError, match="lack 1 tensors"):
    inception.prepare(weights)
  weights = inception.random_weights(0)
  weights["fc.weight"] = weights["fc.weight"][:10]
  with pytest.raises(ValueError, match="fc.weight must be"):
    inception.prepare(weights)
  with pytest.raises(ValueError, match="images must be"):
    inception.pool_features({}, np.zeros((2, 32, 32)))


def test_equals_pytorch_fid_on_the_same_weights(tmp_path, monkeypatch):
  """Our port against pytorch-fid's own InceptionV3([3]) (resize_input and normalize_input
  on), both with the same random weights: pytorch-fid builds its network as always, with
  its weight download replaced by our tensors; we read the file torch saved. Needs the
  peers extra (torch, pytorch-fid)."""
  torch = peers.require("torch")
  fid_module = peers.require("pytorch_fid.inception", "pytorch-fid")
  weights = inception.random_weights(3)
  state = {k: torch.from_numpy(v) for k, v in weights.items()}
  monkeypatch.setattr(fid_module, "load_state_dict_from_url", lambda *a, **k: state)
  reference = fid_module.InceptionV3([3], resize_input=True, normalize_input=True).eval()
  path = tmp_path / "pt_inception.pth"
  torch.save(state, path)
  images = np.random.default_rng(0).uniform(0, 255, (3, 40, 56, 3)).astype(np.float32)
  with torch.no_grad():
    want = reference(torch.from_numpy(images.transpose(0, 3, 1, 2) / 255.0))[0]
  want = want.numpy().reshape(3, -1)
  got = np.asarray(inception.fid_inception(str(path))(images))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
