"""`synthetic_volumes`: SYNTHETIC 3D microscopy-like data, procedurally generated from seeds.

These volumes are not measurements: they are drawn by a seeded generator so
that the 3D restoration models (SAO Table 7) can be trained and tested on a
CPU without the CARE downloads. Two configs:

- "denoising" (stand-in for Planaria / Tribolium): a (Z, Y, X) volume of
  BLOBS random anisotropic Gaussian "nuclei" (σ_z 1-2, σ_xy 1.5-4 voxels,
  brightness 0.3-1) on a dim background (0.05), clean target in ≈ [0, 1];
  input = Poisson(PEAK·target)/PEAK + N(0, SIGMA²).
- "projection" (stand-in for Flywing): a 2D image of blobs and ridges (the
  "tissue" texture, target) lying on a smooth curved surface
  z = h(y, x) inside a (Z, Y, X) stack, blurred along z (σ 1 voxel), with
  dim out-of-surface haze; the input is the noisy stack, the target the
  2D texture (what a surface projection should recover).

Train/test volumes come from disjoint seeds. Shapes: train TRAIN_SHAPE,
test TEST_SHAPE (not multiples of the U-Net's pooling: evaluation pads and
tiles, as on real test stacks). Features: "input" float32 (Z, Y, X, 1),
"target" float32 (Z, Y, X, 1) or (Y, X, 1).
"""

import numpy as np
import tensorflow_datasets as tfds

PEAK, SIGMA = 20.0, 0.03
BLOBS = 60
TRAIN_SHAPE, TEST_SHAPE = (24, 96, 96), (20, 72, 88)
NUM_TRAIN, NUM_TEST = 8, 2


def _blobs(rng, shape, count, sigma_range):
  """Sum of `count` random Gaussian blobs on a grid of `shape` (any rank), float64."""
  grids = np.meshgrid(*[np.arange(s, dtype=np.float64) for s in shape], indexing="ij")
  out = np.zeros(shape)
  for _ in range(count):
    center = [rng.uniform(0, s) for s in shape]
    sigma = [rng.uniform(*r) for r in sigma_range]
    bright = rng.uniform(0.3, 1.0)
    d2 = sum(((g - c) / s) ** 2 for g, c, s in zip(grids, center, sigma))
    out += bright * np.exp(-0.5 * d2)
  return out


def denoising_volume(seed: int, shape=TRAIN_SHAPE) -> tuple[np.ndarray, np.ndarray]:
  """(noisy input, clean target), float32 (Z, Y, X), from `seed`."""
  rng = np.random.default_rng(seed)
  clean = 0.05 + _blobs(rng, shape, BLOBS * int(np.prod(shape)) // int(np.prod(TRAIN_SHAPE)),
                        [(1.0, 2.0), (1.5, 4.0), (1.5, 4.0)])
  clean = np.clip(clean, 0.0, 1.2)
  noisy = rng.poisson(PEAK * clean) / PEAK + rng.normal(0, SIGMA, shape)
  return noisy.astype(np.float32), clean.astype(np.float32)


def projection_stack(seed: int, shape=TRAIN_SHAPE) -> tuple[np.ndarray, np.ndarray]:
  """(noisy (Z, Y, X) stack, clean (Y, X) surface texture), float32, from `seed`."""
  rng = np.random.default_rng(seed)
  z, h, w = shape
  texture = _blobs(rng, (h, w), 2 * BLOBS * h * w // (96 * 96), [(1.0, 3.0), (1.0, 3.0)])
  yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
  for _ in range(4):  # ridges ("cell borders")
    angle, phase = rng.uniform(0, np.pi), rng.uniform(0, 2 * np.pi)
    texture += 0.3 * np.cos((np.cos(angle) * yy + np.sin(angle) * xx) / 6.0 + phase) ** 8
  texture = np.clip(texture, 0.0, 1.2)
  a, b = rng.uniform(0, 2 * np.pi, 2)
  height = z / 2 + z / 4 * np.sin(yy / h * np.pi + a) * np.cos(xx / w * np.pi + b)
  zz = np.arange(z, dtype=np.float64)[:, None, None]
  stack = texture[None] * np.exp(-0.5 * (zz - height[None]) ** 2) + 0.05
  noisy = rng.poisson(PEAK * stack) / PEAK + rng.normal(0, SIGMA, stack.shape)
  return noisy.astype(np.float32), texture.astype(np.float32)


class SyntheticVolumesConfig(tfds.core.BuilderConfig):
  pass


class SyntheticVolumes(tfds.core.GeneratorBasedBuilder):
  """Seeded synthetic 3D denoising volumes and 3D→2D projection stacks (see module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Gaussian blobs; surface texture on a curved height map."}
  BUILDER_CONFIGS = [
      SyntheticVolumesConfig(name="denoising", description="3D blobs, 3D target"),
      SyntheticVolumesConfig(name="projection", description="3D stack, 2D surface target"),
  ]

  def _info(self):
    projection = self.builder_config.name == "projection"
    volume = tfds.features.Tensor(shape=(None, None, None, 1), dtype=np.float32, encoding="bytes")
    image = tfds.features.Tensor(shape=(None, None, 1), dtype=np.float32, encoding="bytes")
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict(
            {"input": volume, "target": image if projection else volume}))

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {"train": self._generate_examples(range(NUM_TRAIN), TRAIN_SHAPE),
            "test": self._generate_examples(range(10_000, 10_000 + NUM_TEST), TEST_SHAPE)}

  def _generate_examples(self, seeds, shape):
    make = projection_stack if self.builder_config.name == "projection" else denoising_volume
    for seed in seeds:
      noisy, clean = make(seed, shape)
      yield int(seed), {"input": noisy[..., None], "target": clean[..., None]}
