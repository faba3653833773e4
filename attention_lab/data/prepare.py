"""Prepares the datasets a config reads: python -m attention_lab.data.prepare --config=CONFIG.

  python -m attention_lab.data.prepare --config=configs/kanet/voc_deeplab.py \\
      [--config.dataset.data_dir=DIR] [--config.dataset.manual_dir=DIR]
  python -m attention_lab.data.prepare --dataset=imagenet2012 [--data_dir=DIR] [--manual_dir=DIR]

The datasets are the config's `dataset` and those of the runs it starts from
(`init_from` or `eval.classifier_config` naming a config file). Each is prepared
into its TFDS data_dir (`dataset.data_dir`, "" = TFDS's default) as TFDS ArrayRecord
files, which the input pipeline reads by index (data/sources.py): embedded datasets
are generated locally; TFDS downloads the downloadable ones (CIFAR, COCO, CelebA);
manual ones (ImageNet, VOC + SBD, ADE20K, PASCAL-Context, Cityscapes, CARE) are built
from the files in the manual_dir (`dataset.manual_dir`, default
`<data_dir>/downloads/manual`). When files are missing it says which, what to download
and where to put it, and exits 2; a failed download exits 1. A dataset prepared as
ArrayRecord is left as it is; one prepared as TFRecord (by `tfds build`, or an earlier
version of this library) is converted: its records are copied, shard by shard, into
ArrayRecord files beside the TFRecord ones (which may then be deleted), and its
dataset_info.json lists the new format. (`tfds convert_format` does the same but needs
Apache Beam installed.) A gs:// data_dir is prepared in a local folder and uploaded:
ArrayRecord files are written by local file writers. Preparing needs TensorFlow (TFDS
builders encode with it); training from the prepared files does not.
"""

import json
import os
import sys
import tempfile

if __name__ == "__main__" and not any(a.startswith(("--verbosity", "-v")) for a in sys.argv):
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # TF 2.21 logs its oneDNN notice at any TF_CPP_MIN_LOG_LEVEL

# pylint: disable=g-import-not-at-top,wrong-import-position
import ml_collections
from absl import app, flags, logging
from etils import epath
from ml_collections import config_flags

from attention_lab import cli

REPO = epath.Path(__file__).parents[2]  # relative config files are looked up here too

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", None, "Experiment config file.")
_DATASET = flags.DEFINE_string("dataset", None, "A dataset name, instead of --config.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "With --dataset: the TFDS data directory.")
_MANUAL_DIR = flags.DEFINE_string("manual_dir", "", "With --dataset: the manual_dir.")
_DEBUG = cli.define_once(flags.DEFINE_bool, "debug", False, "Show tracebacks instead of one-line errors.")


class MissingFiles(Exception):
  """Files a person must download first; the message says which and from where."""


class DownloadFailed(Exception):
  """TFDS could not download a dataset; the message says why and what else to do."""


def dataset_configs(config) -> list[ml_collections.ConfigDict]:
  """config.dataset, then the datasets of the config files it starts from (depth first)."""
  found = [config.dataset]
  specs = [config.init_from, config.eval.classifier_config if config.task == "gan" else ""]
  for spec in specs:
    if spec and spec.partition(":")[0].endswith(".py"):
      found += dataset_configs(cli.load_config(spec, "init_from", root=str(REPO)))
  unique = {}
  for dataset in found:
    key = (dataset.name, dataset.data_dir, dataset.manual_dir, dataset.image_dir)
    unique.setdefault(key, dataset)
  return list(unique.values())


def missing_files_message(name: str, manual: str, missing) -> str:
  """The few lines a person needs: what is missing, what to download, where it goes."""
  from attention_lab.data import availability
  lines = [f"dataset {name!r} needs files that are not in its manual_dir {manual}:",
           "  missing: " + ", ".join(missing)]
  lines += ["  - " + step.format(manual=manual) for step in availability.source(name).steps]
  lines.append("then run this command again.")
  return "\n".join(lines)


def _celeba_folder(dataset) -> str:
  folder = dataset.image_dir
  images = [f for f in epath.Path(folder).iterdir()
            if f.name.lower().endswith((".jpg", ".png"))] if epath.Path(folder).is_dir() else []
  if not images:
    raise MissingFiles(f"dataset.image_dir {folder!r} holds no CelebA JPEGs: download "
                       "img_align_celeba.zip from https://mmlab.ie.cuhk.edu.hk/projects/"
                       "CelebA.html and unzip it there")
  return f"celeb_a: {len(images)} images read from {folder} (nothing to prepare)"


def prepare(dataset) -> str:
  """Prepares one dataset config (name, data_dir, manual_dir) as ArrayRecord; returns a
  line saying what is there. Raises MissingFiles, DownloadFailed, or cli.ConfigError for
  an unknown name."""
  from attention_lab.data import availability
  name = dataset.name
  try:
    availability.source(name)
  except ValueError as e:
    raise cli.ConfigError(str(e)) from e
  if name == "celeb_a" and dataset.image_dir:
    return _celeba_folder(dataset)
  found = availability.find_prepared(name, dataset.data_dir)
  if found is not None and not availability.has_array_record(found):
    convert_to_array_record(str(found.data_dir))
    return _prepared_line(name, str(found.data_dir), "converted to ArrayRecord")
  if found is None:
    found = _generate(dataset)
  return _prepared_line(name, str(found.data_dir), "prepared")


def _prepared_line(name: str, folder: str, done: str) -> str:
  import tensorflow_datasets as tfds
  splits = tfds.builder_from_directory(folder).info.splits
  sizes = ", ".join(f"{split} {info.num_examples:,}" for split, info in sorted(splits.items()))
  return f"{name}: {done} in {folder} ({sizes})"


def _generate(dataset):
  """Runs the dataset's TFDS builder (downloading, or reading the manual_dir) into its
  data_dir as ArrayRecord (a gs:// one: locally, then uploaded); its read-only builder."""
  import tensorflow_datasets as tfds
  from attention_lab.data import availability
  name, spec = dataset.name, availability.source(dataset.name)
  download_config = None
  if spec.how == "manual":
    manual = availability.manual_dir(dataset)
    splits = availability.splits_read(dataset) or set(spec.split_files)  # --dataset: all
    missing = availability.missing_files(name, manual, splits)
    if missing:
      raise MissingFiles(missing_files_message(name, manual, missing))
    download_config = tfds.download.DownloadConfig(manual_dir=manual)
  remote = "://" in str(dataset.data_dir)
  with tempfile.TemporaryDirectory() as staging:
    builder = availability.builder(name, staging if remote else dataset.data_dir)
    try:
      builder.download_and_prepare(download_config=download_config, file_format="array_record")
    except Exception as e:  # pylint: disable=broad-except
      if spec.how != "download":
        raise
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise DownloadFailed(f"dataset {name!r}: the download failed ({first[:300]}); "
                           + " ".join(spec.steps)) from e
    if remote:
      folder = epath.Path(builder.data_dir)
      target = epath.Path(dataset.data_dir) / folder.relative_to(staging)
      target.mkdir(parents=True, exist_ok=True)
      for f in sorted(folder.iterdir(), key=lambda f: f.name == "dataset_info.json"):
        copy_file(f, target / f.name)  # dataset_info.json last: it marks the whole
  return availability.find_prepared(name, dataset.data_dir)


def convert_to_array_record(folder: str) -> None:
  """Writes an ArrayRecord copy of every TFRecord shard of the prepared dataset in `folder`
  (a path or URL) beside it, and lists the format in its dataset_info.json, so that TFDS
  reads either. O(dataset size) I/O; the records are copied as they are. Every file appears
  whole (written under a temporary name, then renamed) and dataset_info.json last, so a
  process that finds the format listed reads complete shards while another converts too."""
  import tensorflow as tf
  import tensorflow_datasets as tfds
  from array_record.python import array_record_module
  root = epath.Path(folder)
  tfrecord = tfds.builder_from_directory(folder, file_format="tfrecord")
  with tempfile.TemporaryDirectory() as staging:
    for split in tfrecord.info.splits.values():
      for instruction in split.file_instructions:
        shard = epath.Path(instruction.filename).name
        converted = shard.replace(".tfrecord-", ".array_record-")
        local = os.path.join(staging, converted)
        writer = array_record_module.ArrayRecordWriter(local, "group_size:1")
        for record in tf.data.TFRecordDataset(instruction.filename):
          writer.write(record.numpy())
        writer.close()
        _write_whole(root / converted, lambda f, local=local: copy_file(epath.Path(local), f))
        os.remove(local)
  info_file = root / "dataset_info.json"
  record = json.loads(info_file.read_text())
  formats = record.setdefault("alternativeFileFormats", [])
  if "array_record" not in formats:
    formats.append("array_record")
  _write_whole(info_file, lambda f: f.write_text(json.dumps(record, indent=2)))


def _write_whole(path: epath.Path, write) -> None:
  """`write(temporary)` beside `path`, then the temporary renamed to `path`."""
  temporary = path.parent / f".{path.name}.{os.getpid()}.tmp"
  write(temporary)
  temporary.replace(path)


def prepare_on_first_use(dataset) -> None:
  """Prepares `dataset` where a run may do so unasked: an embedded dataset (generated, or
  converted from TFRecord), or a manual one not yet prepared whose files are all in the
  manual_dir. Does nothing otherwise. cli.ConfigError (one line) when that needs
  TensorFlow and it is not installed."""
  from attention_lab.data import availability
  spec = availability.source(dataset.name)
  found = availability.find_prepared(dataset.name, dataset.data_dir)
  if spec.how == "manual":
    manual = availability.manual_dir(dataset)
    if found is not None or availability.missing_files(dataset.name, manual,
                                                       availability.splits_read(dataset)):
      return
  elif spec.how != "embedded":
    return
  try:
    import tensorflow_datasets as tfds
    if logging.get_verbosity() < logging.INFO:
      tfds.disable_progress_bar()
    with availability.quiet_tfds():
      prepare(dataset)
  except FileExistsError:  # another process (a run beside this one) prepared it first
    if availability.find_prepared(dataset.name, dataset.data_dir) is None:
      raise
  except ImportError as e:
    if "tensorflow" not in str(e):
      raise
    raise cli.ConfigError(
        f"dataset {dataset.name!r} is not prepared as ArrayRecord in data_dir "
        f"{availability.data_dir_root(dataset.data_dir)} and preparing it needs TensorFlow; "
        f"prepare it where TensorFlow is installed with: "
        f"{availability.prepare_command(dataset)}") from e


def copy_file(source: epath.Path, target: epath.Path, chunk: int = 16 << 20) -> None:
  """Copies one file between any two epath locations (a bucket and a local disk), in
  chunks of `chunk` bytes."""
  with source.open("rb") as reader, target.open("wb") as writer:
    while data := reader.read(chunk):
      writer.write(data)


def dataset_config(name: str, data_dir: str = "", manual_dir: str = "",
                   **fields) -> ml_collections.ConfigDict:
  """A dataset config with the fields `prepare` and the data layer read (no splits: every
  split); `fields` override them."""
  return ml_collections.ConfigDict({
      "name": name, "data_dir": str(data_dir), "manual_dir": str(manual_dir), "image_dir": "",
      "train_split": "", "eval_split": "", **fields})


def _config_from_flags() -> ml_collections.ConfigDict:
  if (_CONFIG.value is None) == (_DATASET.value is None):
    raise cli.ConfigError("give --config=CONFIG or --dataset=NAME (one of them)")
  if _CONFIG.value is not None:
    return _CONFIG.value
  return ml_collections.ConfigDict({
      "task": "", "init_from": "",
      "dataset": dataset_config(_DATASET.value, _DATA_DIR.value, _MANUAL_DIR.value)})


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  try:
    with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
      import tensorflow_datasets as tfds
    if not flags.FLAGS["verbosity"].present:
      tfds.disable_progress_bar()
    for dataset in dataset_configs(_config_from_flags()):
      print(prepare(dataset), flush=True)
  except (ValueError, MissingFiles, DownloadFailed) as e:
    if _DEBUG.value:
      raise
    message = str(e) if isinstance(e, MissingFiles) else f"{e} (--debug shows the traceback)"
    cli.fail(message, status=1 if isinstance(e, DownloadFailed) else 2)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
