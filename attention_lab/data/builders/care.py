"""`care`: the CARE datasets (Weigert et al. 2018) from a manual download (manual_dir).

Download the archives from https://publications.mpi-cbg.de/publications-sites/7207/
(Denoising_Planaria.tar.gz, Denoising_Tribolium.tar.gz, Projection_Flywing.tar.gz),
unpack one, and point `manual_dir` at the unpacked folder, which holds

  train_data/data_label.npz        training patches: X, Y and axes (CSBDeep
                                   `load_training_data` format, e.g. X of shape
                                   (N, 1, 16, 64, 64) with axes "SCZYX")
  test_data/GT/*.tif               full-size ground truth stacks
  test_data/<condition>/*.tif      the matching low-SNR stacks (same file names),
                                   e.g. condition_1..3 (Planaria, Tribolium)

Splits: "train" (the npz patches, channels last; a target whose Z axis has size 1
while the input's has more — Flywing's projection patches — loses that axis) and
one "test_<condition>" split per folder of test_data other than GT (full stacks
read with `tifffile`). Features: "input" and "target" float32 (*spatial, C) (a
projection target has one spatial axis fewer), "name".

The configs name the datasets of SAO Table 10: planaria (17,005 train patches
16×64×64, 20 test stacks 95×1024×1024), tribolium (14,725, 6 × 50×800×800),
flywing (16,891 patches 50×64×64 → 64×64, 26 × 50×520×692). The builder reads
whatever the folder holds; the counts are not enforced.
"""

import os

import numpy as np
import tensorflow_datasets as tfds

TRAIN_FILE = os.path.join("train_data", "data_label.npz")
GT = "GT"


def to_channels_last(array: np.ndarray, axes: str) -> np.ndarray:
  """(S, ...) array with CSBDeep `axes` (e.g. "SCZYX") → (S, *spatial in T/Z/Y/X order, C)."""
  axes = str(axes).upper()
  if len(axes) != array.ndim or "S" not in axes:
    raise ValueError(f"axes must name every axis of the array ({array.shape}) including S, "
                     f"got {axes!r}")
  if "C" not in axes:
    array, axes = array[..., None], axes + "C"
  spatial = [a for a in "TZYX" if a in axes]
  order = [axes.index("S")] + [axes.index(a) for a in spatial] + [axes.index("C")]
  if len(order) != array.ndim:
    raise ValueError(f"axes must use only S, C, T, Z, Y, X, got {axes!r}")
  return np.transpose(array, order)


def read_training_npz(path: str) -> tuple[np.ndarray, np.ndarray]:
  """(X, Y) channels last from a CSBDeep training npz; a size-1 reduced axis of Y is dropped."""
  with np.load(path) as data:
    x, y, axes = data["X"], data["Y"], str(data["axes"])
  x, y = to_channels_last(x, axes), to_channels_last(y, axes)
  if x.shape[0] != y.shape[0]:
    raise ValueError(f"X and Y of {path} must have as many patches, got {x.shape} and {y.shape}")
  if y.shape != x.shape and y.ndim == x.ndim and y.shape[1] == 1 and x.shape[1] > 1:
    y = y[:, 0]  # projection target: Z reduced away
  return x.astype(np.float32), y.astype(np.float32)


def _channels_last_stack(array: np.ndarray) -> np.ndarray:
  return array.astype(np.float32)[..., None]


class CareConfig(tfds.core.BuilderConfig):
  pass


class Care(tfds.core.GeneratorBasedBuilder):
  """CARE denoising / projection data (SAO Table 7, 10) from a manual_dir."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "npz training patches, TIFF test stacks per condition."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__
  BUILDER_CONFIGS = [
      CareConfig(name="planaria", description="Denoising_Planaria (3D denoising)"),
      CareConfig(name="tribolium", description="Denoising_Tribolium (3D denoising)"),
      CareConfig(name="flywing", description="Projection_Flywing (3D → 2D projection)"),
  ]

  def _info(self):
    projection = self.builder_config.name == "flywing"
    volume = tfds.features.Tensor(shape=(None, None, None, None), dtype=np.float32, encoding="bytes")
    image = tfds.features.Tensor(shape=(None, None, None), dtype=np.float32, encoding="bytes")
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "input": volume, "target": image if projection else volume,
            "name": tfds.features.Text()}),
        homepage="https://csbdeep.bioimagecomputing.com/",
    )

  def _split_generators(self, dl_manager):
    root = dl_manager.manual_dir
    npz = os.path.join(root, TRAIN_FILE)
    if not os.path.exists(npz):
      raise ValueError(f"manual_dir must hold {TRAIN_FILE} (CARE layout), not found in {root}")
    test_root = os.path.join(root, "test_data")
    conditions = sorted(d for d in os.listdir(test_root)
                        if d != GT and os.path.isdir(os.path.join(test_root, d)))
    splits = {"train": self._generate_examples(npz)}
    for condition in conditions:
      splits[f"test_{condition}"] = self._generate_examples(test_root, condition)
    return splits

  def _generate_examples(self, path, condition=None):
    """The npz patches (condition None) or the TIFF pairs of test_data/<condition>."""
    if condition is None:
      x, y = read_training_npz(path)
      for i in range(len(x)):
        yield i, {"input": x[i], "target": y[i], "name": f"patch_{i}"}
      return
    import tifffile  # pylint: disable=g-import-not-at-top

    test_root = path
    folder = os.path.join(test_root, condition)
    for name in sorted(os.listdir(folder)):
      if not name.lower().endswith((".tif", ".tiff")):
        continue
      gt_path = os.path.join(test_root, GT, name)
      if not os.path.exists(gt_path):
        raise ValueError(f"test stack {name} of {condition} has no ground truth {gt_path}")
      yield name, {"input": _channels_last_stack(tifffile.imread(os.path.join(folder, name))),
                   "target": _channels_last_stack(tifffile.imread(gt_path)), "name": name}
