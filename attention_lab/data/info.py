"""What a task needs to know of its dataset before reading it: a `DataInfo`.

Classes, channels, spatial ranks and split sizes come from the config and from `FACTS`,
the datasets' published facts (their TFDS metadata, papers and download pages), so a
task, `attention_lab.aot` and a synthetic speed run exist without TensorFlow, TFDS or
prepared data. tests/data/test_info.py checks the embedded datasets' entries against
their TFDS builders.
"""

import dataclasses
from typing import Mapping


# Class names of the segmentation datasets whose builders are ours.
VOC_CLASSES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
    "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor"
)
PASCAL_CONTEXT_CLASSES = (
    "aeroplane", "bag", "bed", "bedclothes", "bench", "bicycle", "bird", "boat", "book", "bottle",
    "building", "bus", "cabinet", "car", "cat", "ceiling", "chair", "cloth", "computer", "cow",
    "cup", "curtain", "dog", "door", "fence", "floor", "flower", "food", "grass", "ground",
    "horse", "keyboard", "light", "motorbike", "mountain", "mouse", "person", "plate", "platform",
    "pottedplant", "road", "rock", "sheep", "shelves", "sidewalk", "sign", "sky", "snow", "sofa",
    "table", "track", "train", "tree", "truck", "tvmonitor", "wall", "water", "window", "wood"
)


@dataclasses.dataclass(frozen=True)
class DataInfo:
  """One dataset's facts.

  num_classes: image or object classes (0: unlabelled; segmentation adds its own
    background and ignore conventions in data/segmentation.py).
  channels: of the stored images / volumes.
  input_rank, target_rank: spatial axes of a restoration pair (a projection drops one).
  splits: split name -> number of examples (None where it depends on the files).
  """

  name: str
  num_classes: int
  channels: int
  splits: Mapping[str, int | None]
  input_rank: int = 2
  target_rank: int = 2

  def check_split(self, split: str, field: str) -> None:
    """ValueError naming `field` unless every part of `split` ("a+b") is one of ours."""
    for part in split.split("+"):
      if part not in self.splits:
        raise ValueError(f"{field} = {split!r}: {self.name} has the splits "
                         f"{sorted(self.splits)}")

  def num_examples(self, split: str, field: str = "dataset.train_split") -> int:
    """Examples of `split` ("a+b" adds two splits); ValueError naming `field` for a split
    the dataset lacks or whose size only its files know."""
    self.check_split(split, field)
    total = 0
    for part in split.split("+"):
      if self.splits[part] is None:
        raise ValueError(f"{field} = {split!r}: the size of {self.name}'s {part!r} split "
                         "depends on its files; set num_train_steps instead of num_epochs")
      total += self.splits[part]
    return total


def _facts(name, classes, channels, splits, ranks=(2, 2)):
  return DataInfo(name, classes, channels, splits, *ranks)


_CARE_TEST = {f"test_condition_{k}": None for k in (1, 2, 3)} | {"test": None}

FACTS = {info.name: info for info in (
    # Embedded (attention_lab/data/builders): sizes fixed by the builders' seeds.
    _facts("digits", 10, 1, {"train": 1497, "test": 300}),
    _facts("digit_scenes", 10, 3, {"train": 4000, "test": 500}),
    _facts("restoration_photos", 0, 1, {"train": 14, "test": 3}),
    _facts("synthetic_volumes/denoising", 0, 1, {"train": 8, "test": 2}, (3, 3)),
    _facts("synthetic_volumes/projection", 0, 1, {"train": 8, "test": 2}, (3, 2)),
    # TFDS catalogue.
    _facts("cifar10", 10, 3, {"train": 50_000, "test": 10_000}),
    _facts("cifar100", 100, 3, {"train": 50_000, "test": 10_000}),
    _facts("imagenet2012", 1000, 3, {"train": 1_281_167, "validation": 50_000}),
    _facts("celeb_a", 0, 3, {"train": 162_770, "validation": 19_867, "test": 19_962}),
    _facts("coco/2017", 80, 3, {"train": 118_287, "validation": 5_000, "test": 40_670}),
    _facts("cityscapes/semantic_segmentation", 19, 3,
           {"train": 2_975, "validation": 500, "test": 1_525}),
    # Manual-download builders (attention_lab/data/builders).
    _facts("voc_segmentation", 21, 3,
           {"train": 1_464, "val": 1_449, "train_aug": 10_582, "test": 1_456}),
    _facts("ade20k_challenge", 150, 3, {"train": 20_210, "validation": 2_000}),
    _facts("pascal_context", 59, 3, {"train": 4_998, "val": 5_105}),
    # CARE (Weigert et al. 2018): training patches as published; test stacks per folder.
    _facts("care/planaria", 0, 1, {"train": 17_005, **_CARE_TEST}, (3, 3)),
    _facts("care/tribolium", 0, 1, {"train": 14_725, **_CARE_TEST}, (3, 3)),
    _facts("care/flywing", 0, 1, {"train": 16_891, **_CARE_TEST}, (3, 2)),
)}


def data_info(config) -> DataInfo:
  """The DataInfo of `config.dataset.name`; ValueError naming `dataset.name` for a dataset
  without facts."""
  name = config.dataset.name
  if name not in FACTS:
    raise ValueError(f"dataset.name = {name!r}: must be one of {sorted(FACTS)}")
  return FACTS[name]
