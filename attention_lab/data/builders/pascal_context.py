"""`pascal_context`: PASCAL-Context, 59 classes (Mottaghi et al. 2014; manual download).

The VOC2010 images with the label maps that the Detail API writes (mmseg's
`tools/dataset_converters/pascal_context.py` over `trainval_merged.json`), in
the layout mmseg reads, under the manual_dir:

  DIR/VOCdevkit/VOC2010/JPEGImages/<id>.jpg
  DIR/VOCdevkit/VOC2010/SegmentationClassContext/<id>.png    grey PNGs: 0 background,
      1-59 the 59 classes in Detail-id order (which is alphabetical, `CLASSES`)
  DIR/VOCdevkit/VOC2010/ImageSets/SegmentationContext/{train,val}.txt

Splits `train` (4,998) and `val` (5,105: the benchmark's evaluation set). The
59-class benchmark does not score background, so the stored
`segmentation_mask` is shifted as mmseg's PascalContextDataset59 does
(`reduce_zero_label`): 0 → 255 (ignore), k → k − 1, classes 0-58. Features:
`image` (H, W, 3) uint8 (the JPEG bytes, unchanged), `segmentation_mask`
(H, W, 1) uint8, `image_id`.
"""

import os

import tensorflow_datasets as tfds

from attention_lab.data.builders.ade20k_challenge import reduce_zero_label
from attention_lab.data.builders.voc_segmentation import read_indices

CLASSES = ("aeroplane", "bag", "bed", "bedclothes", "bench", "bicycle", "bird", "boat", "book",
           "bottle", "building", "bus", "cabinet", "car", "cat", "ceiling", "chair", "cloth",
           "computer", "cow", "cup", "curtain", "dog", "door", "fence", "floor", "flower",
           "food", "grass", "ground", "horse", "keyboard", "light", "motorbike", "mountain",
           "mouse", "person", "plate", "platform", "pottedplant", "road", "rock", "sheep",
           "shelves", "sidewalk", "sign", "sky", "snow", "sofa", "table", "track", "train",
           "tree", "truck", "tvmonitor", "wall", "water", "window", "wood")
ROOT = os.path.join("VOCdevkit", "VOC2010")
LABELS = "SegmentationClassContext"
LISTS = os.path.join("ImageSets", "SegmentationContext")


def _ids(path: str) -> list[str]:
  with open(path) as f:
    return [line.split()[0] for line in f if line.strip()]


class PascalContext(tfds.core.GeneratorBasedBuilder):
  """PASCAL-Context (VOC2010), 59 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Detail-API label maps from a manual_dir, zero label reduced."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
            "segmentation_mask": tfds.features.Image(shape=(None, None, 1),
                                                     encoding_format="png"),
            "image_id": tfds.features.Text(),
        }),
        homepage="https://cs.stanford.edu/~roozbeh/pascal-context/",
    )

  def _split_generators(self, dl_manager):
    root = os.path.join(dl_manager.manual_dir, ROOT)
    return {split: self._generate_examples(root, _ids(os.path.join(root, LISTS, f"{split}.txt")))
            for split in ("train", "val")}

  def _generate_examples(self, root, ids):
    for image_id in ids:
      mask = read_indices(os.path.join(root, LABELS, f"{image_id}.png"))
      yield image_id, {"image": os.path.join(root, "JPEGImages", f"{image_id}.jpg"),
                       "segmentation_mask": reduce_zero_label(mask), "image_id": image_id}
