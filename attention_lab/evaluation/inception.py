"""The FID Inception network (pytorch-fid's `InceptionV3([3])`) as a pure JAX function.

FID, IS and KID are only comparable with the literature when the features come
from this exact network: TF-slim's 2015-12-05 InceptionV3 graph as ported by
pytorch-fid (`pt_inception-2015-12-05-6726825d.pth`). It differs from
torchvision's InceptionV3 in its Mixed blocks (`FIDInceptionA/C/E_1`: average
pooling without padded zeros in the count; `FIDInceptionE_2`: max pooling in
the pool branch) and has 1,008 logits.

Input handling is pytorch-fid's with `resize_input=True, normalize_input=True`:
images (N, H, W, 3) in [0, 255] are divided by 255, resized bilinearly to
299×299 (half-pixel centres, no antialiasing: `F.interpolate(...,
align_corners=False)`), mapped to [−1, 1], then run through the network in
float32 (channels-last here; the weights are transposed from OIHW once).

`fid_inception(path)` reads the weights without torch (checkpoints.torch_reader)
and returns a jitted `images -> (N, 2048)` pool-feature function (with
`logits=True` also the 1,008-way classifier's logits for the Inception Score,
from the same pass); `evaluation.generative.inception_extractor` is the GAN
evaluation's use of it. About 5.7 GMAC per 299² image.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

POOL_FEATURES = 2048
NUM_LOGITS = 1008
_BN_EPS = 1e-3


def _basic(name, cin, cout, kernel):
  return (name, cin, cout, (kernel, kernel) if isinstance(kernel, int) else kernel)


def _block_a(name, cin, pool):
  return [_basic(f"{name}.branch1x1", cin, 64, 1),
          _basic(f"{name}.branch5x5_1", cin, 48, 1), _basic(f"{name}.branch5x5_2", 48, 64, 5),
          _basic(f"{name}.branch3x3dbl_1", cin, 64, 1),
          _basic(f"{name}.branch3x3dbl_2", 64, 96, 3), _basic(f"{name}.branch3x3dbl_3", 96, 96, 3),
          _basic(f"{name}.branch_pool", cin, pool, 1)]


def _block_b(name, cin):
  return [_basic(f"{name}.branch3x3", cin, 384, 3),
          _basic(f"{name}.branch3x3dbl_1", cin, 64, 1),
          _basic(f"{name}.branch3x3dbl_2", 64, 96, 3), _basic(f"{name}.branch3x3dbl_3", 96, 96, 3)]


def _block_c(name, c7):
  return [_basic(f"{name}.branch1x1", 768, 192, 1),
          _basic(f"{name}.branch7x7_1", 768, c7, 1), _basic(f"{name}.branch7x7_2", c7, c7, (1, 7)),
          _basic(f"{name}.branch7x7_3", c7, 192, (7, 1)),
          _basic(f"{name}.branch7x7dbl_1", 768, c7, 1),
          _basic(f"{name}.branch7x7dbl_2", c7, c7, (7, 1)),
          _basic(f"{name}.branch7x7dbl_3", c7, c7, (1, 7)),
          _basic(f"{name}.branch7x7dbl_4", c7, c7, (7, 1)),
          _basic(f"{name}.branch7x7dbl_5", c7, 192, (1, 7)),
          _basic(f"{name}.branch_pool", 768, 192, 1)]


def _block_d(name):
  return [_basic(f"{name}.branch3x3_1", 768, 192, 1), _basic(f"{name}.branch3x3_2", 192, 320, 3),
          _basic(f"{name}.branch7x7x3_1", 768, 192, 1),
          _basic(f"{name}.branch7x7x3_2", 192, 192, (1, 7)),
          _basic(f"{name}.branch7x7x3_3", 192, 192, (7, 1)),
          _basic(f"{name}.branch7x7x3_4", 192, 192, 3)]


def _block_e(name, cin):
  return [_basic(f"{name}.branch1x1", cin, 320, 1),
          _basic(f"{name}.branch3x3_1", cin, 384, 1),
          _basic(f"{name}.branch3x3_2a", 384, 384, (1, 3)),
          _basic(f"{name}.branch3x3_2b", 384, 384, (3, 1)),
          _basic(f"{name}.branch3x3dbl_1", cin, 448, 1),
          _basic(f"{name}.branch3x3dbl_2", 448, 384, 3),
          _basic(f"{name}.branch3x3dbl_3a", 384, 384, (1, 3)),
          _basic(f"{name}.branch3x3dbl_3b", 384, 384, (3, 1)),
          _basic(f"{name}.branch_pool", cin, 192, 1)]


CONVS = [
    _basic("Conv2d_1a_3x3", 3, 32, 3), _basic("Conv2d_2a_3x3", 32, 32, 3),
    _basic("Conv2d_2b_3x3", 32, 64, 3), _basic("Conv2d_3b_1x1", 64, 80, 1),
    _basic("Conv2d_4a_3x3", 80, 192, 3),
    *_block_a("Mixed_5b", 192, 32), *_block_a("Mixed_5c", 256, 64), *_block_a("Mixed_5d", 288, 64),
    *_block_b("Mixed_6a", 288),
    *_block_c("Mixed_6b", 128), *_block_c("Mixed_6c", 160), *_block_c("Mixed_6d", 160),
    *_block_c("Mixed_6e", 192),
    *_block_d("Mixed_7a"), *_block_e("Mixed_7b", 1280), *_block_e("Mixed_7c", 2048),
]


def parameter_shapes() -> dict[str, tuple[int, ...]]:
  """Every weight of the network under its pytorch-fid / torchvision name (OIHW kernels)."""
  shapes = {}
  for name, cin, cout, (kh, kw) in CONVS:
    shapes[f"{name}.conv.weight"] = (cout, cin, kh, kw)
    for leaf in ("weight", "bias", "running_mean", "running_var"):
      shapes[f"{name}.bn.{leaf}"] = (cout,)
  shapes["fc.weight"] = (NUM_LOGITS, POOL_FEATURES)
  shapes["fc.bias"] = (NUM_LOGITS,)
  return shapes


def random_weights(seed: int = 0) -> dict[str, np.ndarray]:
  """Random weights of the right shapes (tests and benchmarks; not a trained network)."""
  rng, weights = np.random.default_rng(seed), {}
  for name, shape in parameter_shapes().items():
    if name.endswith("running_var"):
      weights[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    elif name.endswith("conv.weight") or name == "fc.weight":
      weights[name] = (rng.normal(size=shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    else:
      weights[name] = rng.normal(0, 0.1, shape).astype(np.float32)
  return weights


def prepare(weights: dict[str, np.ndarray]) -> dict[str, jax.Array]:
  """Checks names and shapes against the architecture; OIHW kernels → HWIO; BN folded.

  Each conv + BN(eps 1e-3) pair becomes a kernel and a bias: BN in inference is
  affine, so conv(x, w)·γ/σ + (β − μγ/σ) = conv(x, w·γ/σ) + b.
  """
  expected = parameter_shapes()
  missing = sorted(set(expected) - set(weights))
  if missing:
    raise ValueError(f"Inception weights lack {len(missing)} tensors, e.g. {missing[:3]}")
  for name, shape in expected.items():
    if tuple(np.shape(weights[name])) != shape:
      raise ValueError(f"Inception weight {name} must be {shape}, got {np.shape(weights[name])}")
  params = {}
  for name, *_ in CONVS:
    w = np.asarray(weights[f"{name}.conv.weight"], np.float64)
    scale = (np.asarray(weights[f"{name}.bn.weight"], np.float64)
             / np.sqrt(np.asarray(weights[f"{name}.bn.running_var"], np.float64) + _BN_EPS))
    params[name] = {
        "kernel": jnp.asarray((w * scale[:, None, None, None]).transpose(2, 3, 1, 0), jnp.float32),
        "bias": jnp.asarray(np.asarray(weights[f"{name}.bn.bias"], np.float64)
                            - np.asarray(weights[f"{name}.bn.running_mean"], np.float64) * scale,
                            jnp.float32)}
  params["fc"] = {"kernel": jnp.asarray(np.asarray(weights["fc.weight"]).T, jnp.float32),
                  "bias": jnp.asarray(weights["fc.bias"], jnp.float32)}
  return params


def _conv(params, name, x, stride=1, padding=(0, 0)):
  p = params[name]
  y = jax.lax.conv_general_dilated(
      x, p["kernel"], (stride, stride), [(padding[0],) * 2, (padding[1],) * 2],
      dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=jax.lax.Precision.HIGHEST)
  return jax.nn.relu(y + p["bias"])


def _max_pool(x, stride, pad=0):
  return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, stride, stride, 1),
                               [(0, 0), (pad, pad), (pad, pad), (0, 0)])


def _avg_pool_valid_count(x):
  """3×3, stride 1, padding 1, the padded zeros left out of the count (count_include_pad=False)."""
  window = lambda v: jax.lax.reduce_window(v, 0.0, jax.lax.add, (1, 3, 3, 1), (1, 1, 1, 1),
                                           [(0, 0), (1, 1), (1, 1), (0, 0)])
  return window(x) / window(jnp.ones_like(x[..., :1]))


def _mixed_a(p, n, x):
  b1 = _conv(p, f"{n}.branch1x1", x)
  b5 = _conv(p, f"{n}.branch5x5_2", _conv(p, f"{n}.branch5x5_1", x), padding=(2, 2))
  b3 = _conv(p, f"{n}.branch3x3dbl_1", x)
  b3 = _conv(p, f"{n}.branch3x3dbl_3", _conv(p, f"{n}.branch3x3dbl_2", b3, padding=(1, 1)),
             padding=(1, 1))
  bp = _conv(p, f"{n}.branch_pool", _avg_pool_valid_count(x))
  return jnp.concatenate([b1, b5, b3, bp], -1)


def _mixed_b(p, n, x):
  b3 = _conv(p, f"{n}.branch3x3", x, stride=2)
  bd = _conv(p, f"{n}.branch3x3dbl_2", _conv(p, f"{n}.branch3x3dbl_1", x), padding=(1, 1))
  bd = _conv(p, f"{n}.branch3x3dbl_3", bd, stride=2)
  return jnp.concatenate([b3, bd, _max_pool(x, 2)], -1)


def _mixed_c(p, n, x):
  b1 = _conv(p, f"{n}.branch1x1", x)
  b7 = _conv(p, f"{n}.branch7x7_1", x)
  b7 = _conv(p, f"{n}.branch7x7_2", b7, padding=(0, 3))
  b7 = _conv(p, f"{n}.branch7x7_3", b7, padding=(3, 0))
  bd = _conv(p, f"{n}.branch7x7dbl_1", x)
  for i, pad in zip(range(2, 6), [(3, 0), (0, 3), (3, 0), (0, 3)]):
    bd = _conv(p, f"{n}.branch7x7dbl_{i}", bd, padding=pad)
  bp = _conv(p, f"{n}.branch_pool", _avg_pool_valid_count(x))
  return jnp.concatenate([b1, b7, bd, bp], -1)


def _mixed_d(p, n, x):
  b3 = _conv(p, f"{n}.branch3x3_2", _conv(p, f"{n}.branch3x3_1", x), stride=2)
  b7 = _conv(p, f"{n}.branch7x7x3_1", x)
  b7 = _conv(p, f"{n}.branch7x7x3_2", b7, padding=(0, 3))
  b7 = _conv(p, f"{n}.branch7x7x3_3", b7, padding=(3, 0))
  b7 = _conv(p, f"{n}.branch7x7x3_4", b7, stride=2)
  return jnp.concatenate([b3, b7, _max_pool(x, 2)], -1)


def _mixed_e(p, n, x, pool):
  b1 = _conv(p, f"{n}.branch1x1", x)
  b3 = _conv(p, f"{n}.branch3x3_1", x)
  b3 = jnp.concatenate([_conv(p, f"{n}.branch3x3_2a", b3, padding=(0, 1)),
                        _conv(p, f"{n}.branch3x3_2b", b3, padding=(1, 0))], -1)
  bd = _conv(p, f"{n}.branch3x3dbl_2", _conv(p, f"{n}.branch3x3dbl_1", x), padding=(1, 1))
  bd = jnp.concatenate([_conv(p, f"{n}.branch3x3dbl_3a", bd, padding=(0, 1)),
                        _conv(p, f"{n}.branch3x3dbl_3b", bd, padding=(1, 0))], -1)
  pooled = _avg_pool_valid_count(x) if pool == "avg" else _max_pool(x, 1, pad=1)
  return jnp.concatenate([b1, b3, bd, _conv(p, f"{n}.branch_pool", pooled)], -1)


def pool_features(params, images):
  """images (N, H, W, 3) floats in [0, 255] → (N, 2048) pool features (pytorch-fid block 3)."""
  if images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f"images must be (N, H, W, 3) in [0, 255], got shape {images.shape}")
  x = images.astype(jnp.float32) / 255.0
  x = jax.image.resize(x, (x.shape[0], 299, 299, 3), "linear", antialias=False)
  x = 2 * x - 1
  x = _conv(params, "Conv2d_1a_3x3", x, stride=2)
  x = _conv(params, "Conv2d_2a_3x3", x)
  x = _max_pool(_conv(params, "Conv2d_2b_3x3", x, padding=(1, 1)), 2)
  x = _conv(params, "Conv2d_3b_1x1", x)
  x = _max_pool(_conv(params, "Conv2d_4a_3x3", x), 2)
  for name in ("Mixed_5b", "Mixed_5c", "Mixed_5d"):
    x = _mixed_a(params, name, x)
  x = _mixed_b(params, "Mixed_6a", x)
  for name in ("Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"):
    x = _mixed_c(params, name, x)
  x = _mixed_d(params, "Mixed_7a", x)
  x = _mixed_e(params, "Mixed_7b", x, "avg")
  x = _mixed_e(params, "Mixed_7c", x, "max")
  return jnp.mean(x, axis=(1, 2))


def features_and_logits(params, images):
  """((N, 2048) pool features, (N, 1008) logits) from one pass (FID / KID and IS)."""
  feats = pool_features(params, images)
  return feats, feats @ params["fc"]["kernel"] + params["fc"]["bias"]


def fid_inception(path: str, *, logits: bool = False):
  """A jitted function images (N, H, W, 3) in [0, 255] → (N, 2048) features (with
  `logits`: (features, (N, 1008) logits)), from the weights file at `path` (pytorch-fid's
  pt_inception-2015-12-05-6726825d.pth)."""
  from attention_lab.checkpoints import torch_reader  # pylint: disable=g-import-not-at-top

  params = prepare(torch_reader.load_torch_state_dict(path))
  fn = jax.jit(features_and_logits if logits else pool_features)  # weights as arguments,
  return functools.partial(fn, params)  # not as constants folded into the program
