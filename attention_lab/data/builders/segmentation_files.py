"""What the builders of real segmentation datasets share: JPEG images with PNG masks read
from a manual_dir, stored as `image` (H, W, 3) uint8 (the JPEG bytes, unchanged),
`segmentation_mask` (H, W, 1) uint8 class indices (255 = ignore) and `image_id`.

A builder module keeps what differs: its layout (paths, id lists), class names and
label mapping. Images without ground truth (a benchmark's test split) get an
all-ignore mask of their size, so every split has the same features.
"""

import dataclasses
import os
from collections.abc import Iterable

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

IGNORE = 255


def read_ids(path: str) -> list[str]:
  """The ids of an id list (first word of each non-empty line)."""
  with open(path) as f:
    return [line.split()[0] for line in f if line.strip()]


def read_indices(path: str) -> np.ndarray:
  """A mask PNG as (H, W, 1) uint8 class indices: palette PNGs give their palette indices
  (not colours), grey PNGs their values."""
  with Image.open(path) as image:
    if image.mode not in ("P", "L"):
      raise ValueError(f"mask {path} must be a palette or greyscale PNG, got mode {image.mode}")
    return np.asarray(image, np.uint8)[..., None]


def reduce_zero_label(mask: np.ndarray) -> np.ndarray:
  """0 → 255, k → k − 1 (uint8): mmseg's `reduce_zero_label`, for label maps whose 0 is
  not scored."""
  return np.where(mask == 0, IGNORE, mask.astype(np.int32) - 1).astype(np.uint8)


def ignore_mask(image_path: str) -> np.ndarray:
  """An all-ignore (H, W, 1) mask of the image's size (reads the JPEG header only)."""
  with Image.open(image_path) as image:
    width, height = image.size
  return np.full((height, width, 1), IGNORE, np.uint8)


@dataclasses.dataclass(frozen=True)
class VocLayout:
  """A VOCdevkit-style layout under the manual_dir: `root`/JPEGImages/<id>.jpg,
  `root`/`labels`/<id>.png, and the id lists `root`/`lists`/<split>.txt."""

  root: str
  labels: str
  lists: str
  images: str = "JPEGImages"

  def list_path(self, split: str) -> str:
    return os.path.join(self.root, self.lists, f"{split}.txt")

  def required(self, splits: Iterable[str]) -> tuple[str, ...]:
    """Paths (relative to the manual_dir) that preparing `splits` needs."""
    return (os.path.join(self.root, self.images), os.path.join(self.root, self.labels),
            *(self.list_path(split) for split in splits))

  def items(self, manual_dir: str, ids: Iterable[str], *, masks: bool = True):
    """(image_id, image path, mask path or None) under `manual_dir`."""
    root = os.path.join(manual_dir, self.root)
    for image_id in ids:
      yield (image_id, os.path.join(root, self.images, f"{image_id}.jpg"),
             os.path.join(root, self.labels, f"{image_id}.png") if masks else None)


class SegmentationFiles(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of the manual-download segmentation builders: the features and the examples.

  Subclasses set HOMEPAGE, optionally REDUCE_ZERO_LABEL, and return
  `{split: self._generate_examples(items)}` from `_split_generators`, items being
  (image_id, image path, mask path or None for no ground truth)."""

  HOMEPAGE = ""
  REDUCE_ZERO_LABEL = False

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
            "segmentation_mask": tfds.features.Image(shape=(None, None, 1),
                                                     encoding_format="png"),
            "image_id": tfds.features.Text(),
        }),
        homepage=self.HOMEPAGE,
    )

  def _generate_examples(self, items):
    for image_id, image, mask_path in items:
      if mask_path is None:
        mask = ignore_mask(image)
      else:
        mask = read_indices(mask_path)
        if self.REDUCE_ZERO_LABEL:
          mask = reduce_zero_label(mask)
      yield image_id, {"image": image, "segmentation_mask": mask, "image_id": image_id}
