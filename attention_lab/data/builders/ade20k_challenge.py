"""`ade20k_challenge`: the ADE20K scene-parsing benchmark, 150 classes (manual download).

TFDS's `scene_parse150` gives instance annotations, not these masks. Layout of
the MIT Scene Parsing Benchmark archive (ADEChallengeData2016.zip) under the
manual_dir:

  DIR/ADEChallengeData2016/images/{training,validation}/ADE_*.jpg
  DIR/ADEChallengeData2016/annotations/{training,validation}/ADE_*.png

Splits `train` (20,210) and `validation` (2,000). The annotation PNGs hold 0
("other", not evaluated) and classes 1-150; the stored `segmentation_mask` is
shifted as in the benchmark code (mmseg `reduce_zero_label`): 0 → 255 (the
ignore label), k → k − 1, so classes are 0-149. Features:
data/builders/segmentation_files.py.
"""

import os

import tensorflow_datasets as tfds

from attention_lab.data.builders import segmentation_files as files

NUM_CLASSES = 150
ROOT = "ADEChallengeData2016"
FOLDERS = {"train": "training", "validation": "validation"}  # split → folder


class Ade20kChallenge(files.SegmentationFiles):
  """ADEChallengeData2016, 150 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "ADEChallengeData2016 from a manual_dir, zero label reduced."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__
  HOMEPAGE = "http://sceneparsing.csail.mit.edu/"
  REDUCE_ZERO_LABEL = True

  def _split_generators(self, dl_manager):
    root = os.path.join(dl_manager.manual_dir, ROOT)
    return {split: self._generate_examples(_items(root, folder))
            for split, folder in FOLDERS.items()}


def _items(root, folder):
  """(image_id, image, mask) of every JPEG in images/`folder`, sorted by name."""
  images = os.path.join(root, "images", folder)
  for name in sorted(f for f in os.listdir(images) if f.endswith(".jpg")):
    image_id = name[:-4]
    yield (image_id, os.path.join(images, name),
           os.path.join(root, "annotations", folder, f"{image_id}.png"))
