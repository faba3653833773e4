"""The one table of dataset facts (`FACTS`), read by every pipeline, task and check.

What a task needs to know of its dataset before reading it: classes, channels, spatial
ranks, split sizes, the families that read it, per-channel statistics, the names of a
segmentation mask's values and the stored feature keys. The facts come from the
datasets' TFDS metadata, papers and download pages, so a task, `attention_lab.aot` and a
synthetic speed run exist without TensorFlow, TFDS or prepared data.
tests/data/test_info.py checks the embedded datasets' entries against their TFDS
builders.
"""

import dataclasses
from typing import Mapping

FAMILIES = ("classification", "segmentation", "restoration", "gan", "detection")

# Per-channel (mean, std) of pixels in [0, 1].
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

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
CITYSCAPES_CLASSES = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic_light", "traffic_sign",
    "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
    "motorcycle", "bicycle")
DIGITS = tuple(map(str, range(10)))


@dataclasses.dataclass(frozen=True)
class DataInfo:
  """One dataset's facts.

  num_classes: image or object classes (0: unlabelled).
  channels: of the stored images / volumes.
  splits: split name -> number of examples (None where it depends on the files).
  tasks: the families (FAMILIES) whose pipelines read it.
  input_rank, target_rank: spatial axes of a restoration pair (a projection drops one).
  stats: per-channel (mean, std) of its pixels in [0, 1] (None: not an image dataset).
  mask_classes: the names of a segmentation mask's values 0, 1, ... (255 = ignore).
  image_key, label_key: the stored features a segmentation pipeline reads.
  """

  name: str
  num_classes: int
  channels: int
  splits: Mapping[str, int | None]
  tasks: tuple[str, ...]
  input_rank: int = 2
  target_rank: int = 2
  stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None
  mask_classes: tuple[str, ...] = ()
  image_key: str = "image"
  label_key: str = "segmentation_mask"

  def check_split(self, split: str, field: str) -> None:
    """ValueError naming `field` unless every part of `split` ("a+b[:10%]") is one of ours."""
    for part in split.split("+"):
      if part.split("[")[0].strip() not in self.splits:
        raise ValueError(f"{field} = {split!r}: {self.name} has the splits "
                         f"{sorted(self.splits)}")

  def num_examples(self, split: str, field: str = "dataset.train_split") -> int:
    """Examples of `split` ("a+b" adds two splits); ValueError naming `field` for a split
    the dataset lacks or whose size only its files know."""
    self.check_split(split, field)
    total = 0
    for part in split.split("+"):
      if "[" in part or self.splits[part] is None:
        raise ValueError(f"{field} = {split!r}: the size of {self.name}'s {part!r} split "
                         "depends on its files; set num_train_steps instead of num_epochs")
      total += self.splits[part]
    return total


_CARE_TEST = {f"test_condition_{k}": None for k in (1, 2, 3)} | {"test": None}
_IMAGES = ("classification", "gan")
_SCENES = ("segmentation", "detection")

FACTS = {info.name: info for info in (
    # Embedded (attention_lab/data/builders): sizes fixed by the builders' seeds.
    DataInfo("digits", 10, 1, {"train": 1497, "test": 300}, _IMAGES,
             stats=((0.16,), (0.28,))),
    DataInfo("digit_scenes", 10, 3, {"train": 4000, "test": 500}, _SCENES,
             # measured on 1,000 train scenes
             stats=((0.173, 0.172, 0.178), (0.132, 0.131, 0.130)),
             mask_classes=("background",) + DIGITS, label_key="mask"),
    DataInfo("restoration_photos", 0, 1, {"train": 14, "test": 3}, ("restoration",)),
    DataInfo("synthetic_volumes/denoising", 0, 1, {"train": 8, "test": 2}, ("restoration",),
             3, 3),
    DataInfo("synthetic_volumes/projection", 0, 1, {"train": 8, "test": 2}, ("restoration",),
             3, 2),
    # TFDS catalogue.
    DataInfo("cifar10", 10, 3, {"train": 50_000, "test": 10_000}, _IMAGES,
             stats=((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))),
    DataInfo("cifar100", 100, 3, {"train": 50_000, "test": 10_000}, ("classification",),
             stats=((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))),
    DataInfo("imagenet2012", 1000, 3, {"train": 1_281_167, "validation": 50_000}, _IMAGES,
             stats=IMAGENET_STATS),
    DataInfo("celeb_a", 0, 3, {"train": 162_770, "validation": 19_867, "test": 19_962},
             ("gan",)),
    DataInfo("coco/2017", 80, 3, {"train": 118_287, "validation": 5_000, "test": 40_670},
             ("detection",), stats=IMAGENET_STATS),
    DataInfo("cityscapes/semantic_segmentation", 19, 3,
             {"train": 2_975, "validation": 500, "test": 1_525}, ("segmentation",),
             stats=IMAGENET_STATS, mask_classes=CITYSCAPES_CLASSES, image_key="image_left",
             label_key="segmentation_label"),
    # Manual-download builders (attention_lab/data/builders).
    DataInfo("voc_segmentation", 20, 3,
             {"train": 1_464, "val": 1_449, "train_aug": 10_582, "test": 1_456},
             ("segmentation",), stats=IMAGENET_STATS, mask_classes=VOC_CLASSES),
    DataInfo("ade20k_challenge", 150, 3, {"train": 20_210, "validation": 2_000},
             ("segmentation",), stats=IMAGENET_STATS,
             mask_classes=tuple(f"class{k}" for k in range(1, 151))),
    DataInfo("pascal_context", 59, 3, {"train": 4_998, "val": 5_105}, ("segmentation",),
             stats=IMAGENET_STATS, mask_classes=PASCAL_CONTEXT_CLASSES),
    # CARE (Weigert et al. 2018): training patches as published; test stacks per folder.
    DataInfo("care/planaria", 0, 1, {"train": 17_005, **_CARE_TEST}, ("restoration",), 3, 3),
    DataInfo("care/tribolium", 0, 1, {"train": 14_725, **_CARE_TEST}, ("restoration",), 3, 3),
    DataInfo("care/flywing", 0, 1, {"train": 16_891, **_CARE_TEST}, ("restoration",), 3, 2),
)}


def names(task: str | None = None) -> list[str]:
  """The datasets `task` reads (every dataset when None), sorted."""
  return sorted(n for n, facts in FACTS.items() if task is None or task in facts.tasks)


def lookup(name: str, task: str | None = None) -> DataInfo:
  """The facts of dataset `name`; ValueError naming `dataset.name` and the allowed names
  for a dataset without facts or one `task` does not read."""
  allowed = names(task)
  if name not in allowed:
    reader = f" for the {task} task" if task else ""
    raise ValueError(f"dataset.name = {name!r}: must be one of {allowed}{reader}")
  return FACTS[name]


def data_info(config) -> DataInfo:
  """The DataInfo of `config.dataset.name` for `config.task` (ValueError otherwise)."""
  return lookup(config.dataset.name, config.get("task") or None)
