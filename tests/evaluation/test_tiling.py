"""Tiled prediction equals untiled prediction for a convolutional U-Net (and for projection)."""

import jax
import numpy as np
import pytest
from flax import nnx

from attention_lab import models
from attention_lab.evaluation.tiling import _axis_windows, predict_tiled


def test_windows_cover_every_position_once():
  for size, tile, overlap in [(50, 16, 4), (48, 16, 4), (16, 16, 4), (10, 32, 8), (64, 24, 2)]:
    covered = np.zeros(size, int)
    for window, start, stop in _axis_windows(size, tile, overlap):
      assert window <= start and stop <= window + min(tile, size)
      covered[start:stop] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize("shape", [(40, 52), (37, 45)])
def test_unet2d_tiled_equals_untiled(shape):
  model = models.create("unet2d", num_classes=1, features=4, depth=2, rngs=nnx.Rngs(0))
  model.eval()
  apply = jax.jit(lambda x: model(x))
  image = np.random.default_rng(0).normal(size=shape + (1,)).astype(np.float32)
  padded = np.pad(image, [(0, -s % 2) for s in shape] + [(0, 0)], mode="reflect")
  whole = np.asarray(apply(padded[None]))[0][:shape[0], :shape[1]]
  # receptive-field radius of this U-Net ≈ 11 px < overlap 12
  tiled = predict_tiled(lambda b: np.asarray(apply(b)), image, tile=(32, 32), overlap=(12, 12),
                        multiple=(2, 2), batch_size=3)
  assert tiled.shape == shape + (1,)
  np.testing.assert_allclose(tiled, whole, atol=2e-5)
  # with too little overlap the seams show: the check above is not vacuous
  rough = predict_tiled(lambda b: np.asarray(apply(b)), image, tile=(16, 16), overlap=(2, 2),
                        multiple=(2, 2), batch_size=4)
  assert np.abs(rough - whole).max() > 1e-3


def test_projection_tiled_equals_untiled():
  model = models.create("unet_projection", num_classes=1, features=4, depth=2, proj_depth=1,
                        proj_features=2, rngs=nnx.Rngs(1))
  model.eval()
  apply = jax.jit(lambda x: model(x))
  stack = np.random.default_rng(1).normal(size=(5, 40, 36, 1)).astype(np.float32)
  whole = np.asarray(apply(stack[None]))[0]
  assert whole.shape == (40, 36, 1)
  tiled = predict_tiled(lambda b: np.asarray(apply(b)), stack, tile=(5, 32, 32),
                        overlap=(0, 14, 14), multiple=(1, 2, 2), batch_size=2,
                        reduce_first_axis=True)
  np.testing.assert_allclose(tiled, whole, atol=2e-5)


def test_bad_tiles():
  with pytest.raises(ValueError, match="multiples"):
    predict_tiled(lambda b: b, np.zeros((20, 20, 1)), tile=(15, 16), overlap=(2, 2),
                  multiple=(2, 2), batch_size=1)
  with pytest.raises(ValueError, match="one entry per spatial axis"):
    predict_tiled(lambda b: b, np.zeros((20, 20, 1)), tile=(16,), overlap=(2, 2),
                  multiple=(2, 2), batch_size=1)
