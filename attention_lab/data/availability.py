"""Is a config's dataset prepared? What preparing it takes, and the one-line error if it is not.

Every dataset of the facts table (data/info.py) has a `Source`: embedded (generated
locally from pip packages), downloaded by TFDS, or built from files a person downloads
into a manual_dir (TFDS's `<data_dir>/downloads/manual` unless `dataset.manual_dir` says
otherwise). `require_prepared(config)` runs when a task is built, before it reads any
data, and needs neither TensorFlow nor a builder's code: an unknown dataset name, or a
dataset that is neither prepared as ArrayRecord in its data_dir nor preparable on first
use (data/sources.py prepares embedded datasets, and manual ones from files that are all
there), raises `cli.ConfigError` with one line naming the dataset, the data_dir searched
and the command that prepares (or converts) it (`python -m attention_lab.data.prepare`,
which says what to download when files are missing).
"""

import contextlib
import dataclasses
import shlex
import sys

import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from attention_lab import cli
from attention_lab.data import info
from attention_lab.data.builders import BUILDERS, ade20k_challenge, pascal_context, voc_segmentation


@dataclasses.dataclass(frozen=True)
class Source:
  """How a dataset is obtained.

  how: "embedded" | "download" (TFDS fetches it) | "manual" (files in the manual_dir).
  files: paths under the manual_dir that preparing needs.
  split_files: further paths needed when a config reads that split.
  optional_splits: split → (paths, step): splits the builder adds only when these
    paths are there at preparation (a benchmark's test images), and how to get them.
  steps: what to download and where, `{manual}` standing for the manual_dir.
  """

  how: str
  files: tuple[str, ...] = ()
  split_files: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
  optional_splits: dict[str, tuple[tuple[str, ...], str]] = dataclasses.field(
      default_factory=dict)
  steps: tuple[str, ...] = ()


_VOC = voc_segmentation.LAYOUT.root
_CARE = "https://publications.mpi-cbg.de/publications-sites/7207/"
SOURCES = {
    "digits": Source("embedded"),
    "digit_scenes": Source("embedded"),
    "restoration_photos": Source("embedded"),
    "synthetic_volumes": Source("embedded"),
    "cifar10": Source("download", steps=(
        "TFDS downloads https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (163 MB)",)),
    "cifar100": Source("download", steps=(
        "TFDS downloads https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz (161 MB)",)),
    "coco": Source("download", steps=(
        "TFDS downloads train2017.zip, val2017.zip, test2017.zip, annotations_trainval2017.zip "
        "and image_info_test2017.zip from http://images.cocodataset.org/ (~26 GB)",)),
    "celeb_a": Source("download", steps=(
        "TFDS downloads CelebA from Google Drive (often refused: quota or checksum); "
        "otherwise download img_align_celeba.zip from "
        "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html, unzip it anywhere and run with "
        "--config.dataset.image_dir=<the img_align_celeba folder> (nothing to prepare)",)),
    "imagenet2012": Source(
        "manual", files=("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"),
        steps=("download ILSVRC2012_img_train.tar (138 GB) and ILSVRC2012_img_val.tar "
               "(6.3 GB) from https://image-net.org/challenges/LSVRC/2012/2012-downloads.php "
               "(an ImageNet account) into {manual}/ (as they are, not unpacked)",)),
    "cityscapes": Source(
        "manual", files=("leftImg8bit_trainvaltest.zip", "gtFine_trainvaltest.zip"),
        steps=("download leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip from "
               "https://www.cityscapes-dataset.com/downloads/ (an account) into {manual}/",)),
    "voc_segmentation": Source(
        "manual", files=voc_segmentation.LAYOUT.required(("train", "val")),
        split_files={"train_aug": (f"{_VOC}/{voc_segmentation.SBD_LABELS}",)},
        optional_splits={"test": ((voc_segmentation.TEST_LIST,),
                                  "download VOC2012test.tar from the evaluation server "
                                  "(http://host.robots.ox.ac.uk:8080/, an account) and unpack "
                                  "it in {manual}/ over the trainval files")},
        steps=("download http://host.robots.ox.ac.uk/pascal/VOC/voc2012/"
               "VOCtrainval_11-May-2012.tar (2 GB) and unpack it in {manual}/ (it holds "
               f"{_VOC}/)",
               "for train_aug: the SBD masks (benchmark.tgz from http://www.eecs.berkeley.edu/"
               "Research/Projects/CS/vision/grouping/semantic_contours/benchmark.tgz) as "
               "class-index PNGs, DeepLab's SegmentationClassAug, in "
               f"{{manual}}/{_VOC}/SegmentationClassAug/")),
    "ade20k_challenge": Source(
        "manual",
        files=tuple(f"{ade20k_challenge.ROOT}/{kind}/{folder}"
                    for kind in ("images", "annotations")
                    for folder in ade20k_challenge.FOLDERS.values()),
        steps=("download http://data.csail.mit.edu/places/ADEchallenge/"
               "ADEChallengeData2016.zip (923 MB) and unzip it in {manual}/",)),
    "pascal_context": Source(
        "manual", files=pascal_context.LAYOUT.required(pascal_context.SPLITS),
        steps=("download http://host.robots.ox.ac.uk/pascal/VOC/voc2010/"
               "VOCtrainval_03-May-2010.tar (1.3 GB) and unpack it in {manual}/ (it holds "
               f"{pascal_context.LAYOUT.root}/JPEGImages)",
               "download https://codalabuser.blob.core.windows.net/public/trainval_merged.json "
               "and write the 59-class label maps and lists with the Detail API "
               "(pip install git+https://github.com/zhanghang1989/detail-api.git#subdirectory="
               "PythonAPI) and mmseg's tools/dataset_converters/pascal_context.py: "
               "python pascal_context.py {manual}/VOCdevkit trainval_merged.json")),
    "care": Source(
        "manual", files=("train_data/data_label.npz", "test_data/GT"),
        steps=(f"download the archive from {_CARE} (planaria: Denoising_Planaria.tar.gz, "
               "tribolium: Denoising_Tribolium.tar.gz, flywing: Projection_Flywing.tar.gz), "
               "unpack it and pass --config.dataset.manual_dir=<the unpacked folder> "
               "(here {manual})",)),
}


def source(name: str) -> Source:
  """The Source of the dataset `name` of the facts table ("coco/2017" → "coco",
  "care/flywing" → "care"); ValueError (one line) for a name without facts."""
  info.lookup(name)
  return SOURCES.get(name) or SOURCES[name.partition("/")[0]]


@contextlib.contextmanager
def quiet_tfds():
  """TFDS warns while it looks for a dataset that is not there ("Variant folder ... has no
  dataset_info.json"); unless logging is verbose, that is not the console's business."""
  level = logging.get_verbosity()
  if level <= logging.WARNING:
    logging.set_verbosity(logging.ERROR)
  try:
    yield
  finally:
    logging.set_verbosity(level)


def builder(name: str, data_dir: str | None = None) -> tfds.core.DatasetBuilder:
  """The (unprepared or prepared) TFDS builder of `name`, without preparing anything."""
  family, _, variant = name.partition("/")
  with quiet_tfds():
    if family not in BUILDERS:
      return tfds.builder(name, data_dir=data_dir or None)
    return BUILDERS[family](data_dir=data_dir or None, **({"config": variant} if variant else {}))


def data_dir_root(data_dir: str | None) -> str:
  """The TFDS data directory searched ("" / None: TFDS's default)."""
  return str(epath.Path(data_dir or tfds.core.constants.DATA_DIR).expanduser())


def manual_dir(dataset) -> str:
  """`dataset.manual_dir`, or TFDS's default `<data_dir>/downloads/manual`."""
  return (dataset.manual_dir or
          str(epath.Path(data_dir_root(dataset.data_dir)) / "downloads" / "manual"))


def split_names(split: str) -> set[str]:
  """The split names a TFDS split string reads ("train_aug+val[:10%]" → train_aug, val)."""
  return {part.split("[")[0].strip() for part in str(split or "").split("+")} - {""}


def splits_read(dataset) -> set[str]:
  """The split names a dataset config reads (its train_split and eval_split)."""
  return split_names(dataset.train_split) | split_names(dataset.eval_split)


def missing_files(name: str, manual: str, splits=()) -> list[str]:
  """The paths under `manual` that preparing `name` (for `splits`) needs and lacks."""
  spec = source(name)
  wanted = list(spec.files) + [f for s in splits for f in spec.split_files.get(s, ())]
  return [f for f in wanted if not (epath.Path(manual) / f).exists()]


def prepare_command(dataset, config_spec: str | None = None) -> str:
  """The command that prepares it: --config as this process was started, with the
  dataset's directory overrides; `--dataset=NAME` when no config file is known."""
  if config_spec is None:
    config_spec = cli._config_argument(sys.argv[1:])  # pylint: disable=protected-access
  args = ["python", "-m", "attention_lab.data.prepare"]
  prefix = "--config.dataset." if config_spec else "--"
  args.append(f"--config={config_spec}" if config_spec else f"--dataset={dataset.name}")
  for key in ("data_dir", "manual_dir", "image_dir"):
    if dataset.get(key):
      args.append(f"{prefix}{key}={dataset.get(key)}")
  return " ".join(shlex.quote(a) for a in args)


def not_prepared_message(name: str, data_dir: str, command: str, *, manual: str = "",
                         missing=()) -> str:
  """One line: the dataset, the data_dir searched, what is missing, the command."""
  line = f"dataset {name!r} is not prepared in data_dir {data_dir}"
  if missing:
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    line += f" and its manual_dir {manual} lacks {missing[0]}{more}"
  return f"{line}; prepare it with: {command}"


def not_array_record_message(dataset, found, config_spec: str | None = None) -> str:
  """One line: `found` (prepared, TFRecord only) must be converted, and the command."""
  return (f"dataset {dataset.name!r} in {found.data_dir} is stored as TFRecord, which is read "
          "only in order; convert it to ArrayRecord (random access) with: "
          f"{prepare_command(dataset, config_spec)}")


def find_prepared(name: str, data_dir: str):
  """The read-only TFDS builder of `name`'s prepared files under `data_dir` ("" = TFDS's
  default), or None where there are none."""
  root = epath.Path(data_dir or tfds.core.constants.DATA_DIR).expanduser()
  if not (root / name.partition(":")[0]).exists():  # (TFDS's own search fails on gs://)
    return None
  with quiet_tfds():
    try:
      return tfds.core.read_only_builder.builder_from_files(name, data_dir=data_dir or None)
    except tfds.core.registered.DatasetNotFoundError:
      return None


def has_array_record(builder) -> bool:
  formats = builder.info.available_file_formats()
  return tfds.core.file_adapters.FileFormat.ARRAY_RECORD in formats


def require_prepared(config, config_spec: str | None = None) -> None:
  """Raises cli.ConfigError (one line) when config.dataset has no facts (data/info.py) for
  config.task, or can neither be read nor be prepared on first use. Reads no builder
  code and needs no TensorFlow."""
  dataset = config.dataset
  if not dataset.name:
    return
  try:
    spec = source(info.lookup(dataset.name, config.get("task") or None).name)
  except ValueError as e:
    raise cli.ConfigError(str(e)) from e
  name = dataset.name
  if spec.how == "embedded" or (name == "celeb_a" and dataset.image_dir):
    return  # generated on first use; read from the JPEG folder
  found = find_prepared(name, dataset.data_dir)
  if found is not None:
    if has_array_record(found):
      return
    raise cli.ConfigError(not_array_record_message(dataset, found, config_spec))
  missing, manual = [], ""
  if spec.how == "manual":
    manual = manual_dir(dataset)
    missing = missing_files(name, manual, splits_read(dataset))
    if not missing:
      return  # the data layer prepares it from these files on first use
  raise cli.ConfigError(not_prepared_message(
      name, data_dir_root(dataset.data_dir), prepare_command(dataset, config_spec),
      manual=manual, missing=missing))


def require_split(dataset, found: tfds.core.DatasetBuilder, split: str) -> None:
  """Raises cli.ConfigError (one line) when the prepared `found` lacks a split that `split`
  reads ("test[:10]" → test), naming the files that add it where they are optional."""
  absent = sorted(split_names(split) - set(found.info.splits))
  if not absent:
    return
  name = absent[0]
  spec = source(dataset.name)
  line = (f"split = {split!r}: dataset {dataset.name!r} as prepared in {found.data_dir} has "
          f"no split {name!r} (it has {', '.join(sorted(found.info.splits))})")
  if spec and name in spec.optional_splits:
    needs, step = spec.optional_splits[name]
    manual = manual_dir(dataset)
    line += (f"; it is added when {', '.join(needs)} is in the manual_dir at preparation: "
             f"{step.format(manual=manual)}, delete {found.data_dir} and run "
             f"{prepare_command(dataset)}")
  raise cli.ConfigError(line)
