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
data/builders/segmentation_files.py.
"""

import os

import tensorflow_datasets as tfds

from attention_lab.data import info
from attention_lab.data.builders import segmentation_files as files

CLASSES = info.PASCAL_CONTEXT_CLASSES
LAYOUT = files.VocLayout(os.path.join("VOCdevkit", "VOC2010"), "SegmentationClassContext",
                         os.path.join("ImageSets", "SegmentationContext"))
SPLITS = ("train", "val")


class PascalContext(files.SegmentationFiles):
  """PASCAL-Context (VOC2010), 59 classes, 255 = ignore."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Detail-API label maps from a manual_dir, zero label reduced."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = __doc__
  HOMEPAGE = "https://cs.stanford.edu/~roozbeh/pascal-context/"
  REDUCE_ZERO_LABEL = True

  def _split_generators(self, dl_manager):
    manual = dl_manager.manual_dir
    return {split: self._generate_examples(LAYOUT.items(
                manual, files.read_ids(os.path.join(manual, LAYOUT.list_path(split)))))
            for split in SPLITS}
