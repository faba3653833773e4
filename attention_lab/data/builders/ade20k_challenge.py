"""`ade20k_challenge`: the ADE20K scene-parsing benchmark, 150 classes (manual download).

TFDS's `scene_parse150` gives instance annotations, not these masks. Layout of
the MIT Scene Parsing Benchmark archive (ADEChallengeData2016.zip) under the
manual_dir:

  DIR/ADEChallengeData2016/images/{training,validation}/ADE_*.jpg
  DIR/ADEChallengeData2016/annotations/{training,validation}/ADE_*.png

Splits `train` (20,210) and `validation` (2,000). The annotation PNGs hold 0
("other", not evaluated) and classes 1-150; the stored `segmentation_mask` is
shifted as in the benchmark code (mmseg `reduce_zero_label`): 0 → 255 (the
ignore label), k → k − 1, so classes are 0-149.
"""

import os

import numpy as np
import tensorflow_datasets as tfds

from attention_lab.data.builders.voc_segmentation import read_indices

NUM_CLASSES = 150


def reduce_zero_label(mask: np.ndarray) -> np.ndarray:
  """0 → 255, k → k − 1 (uint8)."""
  return np.where(mask == 0, 255, mask.astype(np.int32) - 1).astype(np.uint8)


class Ade20kChallenge(tfds.core.GeneratorBasedBuilder):
  """ADEChallengeData2016, 150 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "ADEChallengeData2016 from a manual_dir, zero label reduced."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
            "segmentation_mask": tfds.features.Image(shape=(None, None, 1),
                                                     encoding_format="png"),
            "image_id": tfds.features.Text(),
        }),
        homepage="http://sceneparsing.csail.mit.edu/",
    )

  def _split_generators(self, dl_manager):
    root = os.path.join(dl_manager.manual_dir, "ADEChallengeData2016")
    return {split: self._generate_examples(root, folder)
            for split, folder in (("train", "training"), ("validation", "validation"))}

  def _generate_examples(self, root, folder):
    images = os.path.join(root, "images", folder)
    for name in sorted(f for f in os.listdir(images) if f.endswith(".jpg")):
      image_id = name[:-4]
      mask = read_indices(os.path.join(root, "annotations", folder, f"{image_id}.png"))
      yield image_id, {"image": os.path.join(images, name),
                       "segmentation_mask": reduce_zero_label(mask), "image_id": image_id}
