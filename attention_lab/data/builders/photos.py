"""`restoration_photos`: real photographs shipped inside scikit-image, with seeded noise.

The images are the PNG/JPEG files inside the scikit-image wheel
(`skimage/data/`, read directly with PIL, never through `skimage.data`'s
pooch fetcher; no network). They are converted to grey levels in [0, 1]
(ITU-R 601 luma, PIL "L"); photographs longer than 800 pixels are halved
(Lanczos). Synthetic pictures (chessboards, logo, phantom, binary horse,
colour wheel) are left out.

Noise (Poisson-Gaussian, the usual microscopy model): input = Poisson(PEAK·y)/PEAK
+ N(0, SIGMA²) with PEAK = 30 photons at white and SIGMA = 0.04, drawn once
per image from a seed derived from the image's name (so the dataset is the
same on every machine). Input PSNR ≈ 17-20 dB.

Splits (disjoint images, never the same photograph in both):
- train: TRAIN_PHOTOS (14 photos), one noisy realisation each;
- test: TEST_PHOTOS (camera, coins, chelsea).
Features: "input" and "target" float32 (H, W, 1), "name".
"""

import os
import zlib

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

TRAIN_PHOTOS = ("astronaut", "brick", "cell", "coffee", "grass", "gravel", "hubble_deep_field",
                "ihc", "moon", "motorcycle_left", "page", "retina", "rocket", "text")
TEST_PHOTOS = ("camera", "coins", "chelsea")
PEAK, SIGMA = 30.0, 0.04
MAX_SIDE = 800


def _skimage_data_dir() -> str:
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("skimage")
  if spec is None or not spec.submodule_search_locations:
    raise ImportError("restoration_photos needs scikit-image (pip install scikit-image)")
  return os.path.join(list(spec.submodule_search_locations)[0], "data")


def load_photo(name: str) -> np.ndarray:
  """The grey-level photo `name` of scikit-image's bundled data, float32 in [0, 1], (H, W)."""
  folder = _skimage_data_dir()
  for ext in (".png", ".jpg"):
    path = os.path.join(folder, name + ext)
    if os.path.exists(path):
      break
  else:
    raise ValueError(f"photo {name!r} is not bundled in {folder}")
  image = Image.open(path).convert("L")
  if max(image.size) > MAX_SIDE:
    image = image.resize((image.size[0] // 2, image.size[1] // 2), Image.LANCZOS)
  return np.asarray(image, np.float32) / 255.0


def add_noise(clean: np.ndarray, seed: int, peak: float = PEAK, sigma: float = SIGMA):
  """Poisson(peak·clean)/peak + N(0, sigma²), float32, from `seed`."""
  rng = np.random.default_rng(seed)
  noisy = rng.poisson(peak * np.clip(clean, 0, None)) / peak
  return (noisy + rng.normal(0.0, sigma, clean.shape)).astype(np.float32)


class RestorationPhotos(tfds.core.GeneratorBasedBuilder):
  """Noisy/clean pairs of scikit-image's bundled photographs (2D denoising)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "14 train / 3 test photos, Poisson (peak 30) + Gaussian (0.04)."}

  def _info(self):
    image = tfds.features.Tensor(shape=(None, None, 1), dtype=np.float32, encoding="bytes")
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict(
            {"input": image, "target": image, "name": tfds.features.Text()}),
        homepage="https://scikit-image.org/docs/stable/api/skimage.data.html",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {"train": self._generate_examples(TRAIN_PHOTOS),
            "test": self._generate_examples(TEST_PHOTOS)}

  def _generate_examples(self, names):
    for name in names:
      clean = load_photo(name)
      noisy = add_noise(clean, zlib.crc32(name.encode()))
      yield name, {"input": noisy[..., None], "target": clean[..., None], "name": name}
