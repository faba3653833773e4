"""`digits`: scikit-learn's 1,797 real 8×8 handwritten digits as a 32×32 TFDS dataset.

The images ship inside scikit-learn (UCI optical recognition of handwritten
digits, 4-bit grey levels 0..16), so building needs no network. Each image is
rescaled to 0..255 and upsampled to 32×32 bilinearly. The split is fixed: a
permutation from seed 0, the first 1,497 images for `train`, the last 300 for
`test`.
"""

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

NUM_TEST = 300
SIZE = 32


def _examples():
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top

  digits = load_digits()
  order = np.random.default_rng(0).permutation(len(digits.images))
  images = (digits.images[order] * (255.0 / 16.0)).round().astype(np.uint8)
  return images, digits.target[order].astype(np.int64), order


class Digits(tfds.core.GeneratorBasedBuilder):
  """Embedded handwritten digits, 32×32×1, 10 classes."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "scikit-learn load_digits, bilinear 8→32, fixed 1497/300 split."}

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(SIZE, SIZE, 1)),
            "label": tfds.features.ClassLabel(num_classes=10),
        }),
        supervised_keys=("image", "label"),
        homepage="https://scikit-learn.org/stable/datasets/toy_dataset.html#digits-dataset",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    num_train = len(_examples()[0]) - NUM_TEST
    return {"train": self._generate_examples(0, num_train),
            "test": self._generate_examples(num_train, None)}

  def _generate_examples(self, start, stop):
    images, labels, order = _examples()
    for image, label, index in zip(images[start:stop], labels[start:stop], order[start:stop]):
      big = Image.fromarray(image).resize((SIZE, SIZE), Image.BILINEAR)
      yield int(index), {"image": np.asarray(big)[..., None], "label": int(label)}
