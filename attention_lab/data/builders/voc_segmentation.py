"""`voc_segmentation`: PASCAL VOC 2012 semantic segmentation + SBD (manual download).

TFDS's `voc/2012` has boxes only. This builder reads the usual manual_dir
layout (`--config.dataset.manual_dir=DIR`, or TFDS's default manual dir):

  DIR/VOCdevkit/VOC2012/JPEGImages/<id>.jpg
  DIR/VOCdevkit/VOC2012/SegmentationClass/<id>.png        palette PNGs (VOC)
  DIR/VOCdevkit/VOC2012/ImageSets/Segmentation/{train,val}.txt
  DIR/VOCdevkit/VOC2012/SegmentationClassAug/<id>.png     SBD masks, DeepLab's
      "SegmentationClassAug" (class indices as grey levels)
  DIR/VOCdevkit/VOC2012/ImageSets/Segmentation/test.txt   optional: the test images
      (VOC2012test.tar from the evaluation server, unpacked over the same folders)

Splits: `train` (1,464) and `val` (1,449) from ImageSets/Segmentation with the
VOC masks; `train_aug` (10,582): every id with a SegmentationClassAug mask or
in VOC train, minus the val ids (`ImageSets/SegmentationAug/train_aug.txt` is
used instead when present), with the SBD mask where there is one; `test`
(1,456, when test.txt is there): images without ground truth, their mask all
255, for the server's predictions (attention_lab.predict). Masks keep their
indices: 0 background, 1-20 classes, 255 the "void" object borders (the ignore
label). Features: data/builders/segmentation_files.py.
"""

import os

import tensorflow_datasets as tfds

from attention_lab.data import info
from attention_lab.data.builders import segmentation_files as files

CLASSES = info.VOC_CLASSES
LAYOUT = files.VocLayout(os.path.join("VOCdevkit", "VOC2012"), "SegmentationClass",
                         os.path.join("ImageSets", "Segmentation"))
SBD_LABELS = "SegmentationClassAug"
SBD_LIST = os.path.join(LAYOUT.root, "ImageSets", "SegmentationAug", "train_aug.txt")
TEST_LIST = LAYOUT.list_path("test")


class VocSegmentation(files.SegmentationFiles):
  """PASCAL VOC 2012 + SBD semantic segmentation, 21 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "VOC2012 train/val/test and SBD train_aug from a manual_dir."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__
  HOMEPAGE = "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/"

  def _split_generators(self, dl_manager):
    manual = dl_manager.manual_dir
    train, val = (files.read_ids(os.path.join(manual, LAYOUT.list_path(s)))
                  for s in ("train", "val"))
    aug_dir = os.path.join(manual, LAYOUT.root, SBD_LABELS)
    if os.path.exists(os.path.join(manual, SBD_LIST)):
      train_aug = files.read_ids(os.path.join(manual, SBD_LIST))
    else:
      aug = {f[:-4] for f in os.listdir(aug_dir) if f.endswith(".png")} \
          if os.path.isdir(aug_dir) else set()
      train_aug = sorted((aug | set(train)) - set(val))
    splits = {"train": self._generate_examples(LAYOUT.items(manual, train)),
              "val": self._generate_examples(LAYOUT.items(manual, val)),
              "train_aug": self._generate_examples(_with_sbd(LAYOUT.items(manual, train_aug),
                                                             aug_dir))}
    if os.path.exists(os.path.join(manual, TEST_LIST)):
      test = files.read_ids(os.path.join(manual, TEST_LIST))
      splits["test"] = self._generate_examples(LAYOUT.items(manual, test, masks=False))
    return splits


def _with_sbd(items, aug_dir):
  """The SBD mask in place of the VOC one wherever SBD has it."""
  for image_id, image, mask in items:
    sbd = os.path.join(aug_dir, f"{image_id}.png")
    yield image_id, image, sbd if os.path.exists(sbd) else mask
