"""`voc_segmentation`: PASCAL VOC 2012 semantic segmentation + SBD (manual download).

TFDS's `voc/2012` has boxes only. This builder reads the usual manual_dir
layout (`--config.dataset.manual_dir=DIR`, or TFDS's default manual dir):

  DIR/VOCdevkit/VOC2012/JPEGImages/<id>.jpg
  DIR/VOCdevkit/VOC2012/SegmentationClass/<id>.png        palette PNGs (VOC)
  DIR/VOCdevkit/VOC2012/ImageSets/Segmentation/{train,val}.txt
  DIR/VOCdevkit/VOC2012/SegmentationClassAug/<id>.png     SBD masks, DeepLab's
      "SegmentationClassAug" (class indices as grey levels)

Splits: `train` (1,464) and `val` (1,449) from ImageSets/Segmentation with the
VOC masks; `train_aug` (10,582): every id with a SegmentationClassAug mask or
in VOC train, minus the val ids (`ImageSets/SegmentationAug/train_aug.txt` is
used instead when present), with the SBD mask where there is one. Masks keep
their indices: 0 background, 1-20 classes, 255 the "void" object borders
(the ignore label). Features: `image` (H, W, 3) uint8 (the JPEG bytes,
unchanged), `segmentation_mask` (H, W, 1) uint8, `image_id`.
"""

import os

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
           "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
           "sheep", "sofa", "train", "tvmonitor")


def read_indices(path: str) -> np.ndarray:
  """A mask PNG as (H, W, 1) uint8 class indices: palette PNGs give their palette indices
  (not colours), grey PNGs their values."""
  with Image.open(path) as image:
    if image.mode not in ("P", "L"):
      raise ValueError(f"mask {path} must be a palette or greyscale PNG, got mode {image.mode}")
    return np.asarray(image, np.uint8)[..., None]


def _ids(path: str) -> list[str]:
  with open(path) as f:
    return [line.split()[0] for line in f if line.strip()]


class VocSegmentation(tfds.core.GeneratorBasedBuilder):
  """PASCAL VOC 2012 + SBD semantic segmentation, 21 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "VOC2012 train/val and SBD train_aug from a manual_dir."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
            "segmentation_mask": tfds.features.Image(shape=(None, None, 1),
                                                     encoding_format="png"),
            "image_id": tfds.features.Text(),
        }),
        homepage="http://host.robots.ox.ac.uk/pascal/VOC/voc2012/",
    )

  def _split_generators(self, dl_manager):
    root = os.path.join(dl_manager.manual_dir, "VOCdevkit", "VOC2012")
    sets = os.path.join(root, "ImageSets")
    train, val = (_ids(os.path.join(sets, "Segmentation", f"{s}.txt")) for s in ("train", "val"))
    aug_dir = os.path.join(root, "SegmentationClassAug")
    aug_list = os.path.join(sets, "SegmentationAug", "train_aug.txt")
    if os.path.exists(aug_list):
      train_aug = _ids(aug_list)
    else:
      aug = {f[:-4] for f in os.listdir(aug_dir) if f.endswith(".png")} \
          if os.path.isdir(aug_dir) else set()
      train_aug = sorted((aug | set(train)) - set(val))
    return {"train": self._generate_examples(root, train, aug=False),
            "val": self._generate_examples(root, val, aug=False),
            "train_aug": self._generate_examples(root, train_aug, aug=True)}

  def _generate_examples(self, root, ids, aug):
    for image_id in ids:
      mask = os.path.join(root, "SegmentationClassAug", f"{image_id}.png")
      if not (aug and os.path.exists(mask)):
        mask = os.path.join(root, "SegmentationClass", f"{image_id}.png")
      yield image_id, {"image": os.path.join(root, "JPEGImages", f"{image_id}.jpg"),
                       "segmentation_mask": read_indices(mask), "image_id": image_id}
