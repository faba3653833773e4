"""Prepares the datasets a config reads: python -m attention_lab.data.prepare --config=CONFIG.

  python -m attention_lab.data.prepare --config=configs/kanet/voc_deeplab.py \\
      [--config.dataset.data_dir=DIR] [--config.dataset.manual_dir=DIR]
  python -m attention_lab.data.prepare --dataset=imagenet2012 [--data_dir=DIR] [--manual_dir=DIR]

The datasets are the config's `dataset` and those of the runs it starts from
(`init_from` or `eval.classifier_config` naming a config file). Each is prepared
into its TFDS data_dir (`dataset.data_dir`, "" = TFDS's default) as the run will
read it: embedded datasets are generated locally; TFDS downloads the downloadable
ones (CIFAR, COCO, CelebA); manual ones (ImageNet, VOC + SBD, ADE20K,
PASCAL-Context, Cityscapes, CARE) are built from the files in the manual_dir
(`dataset.manual_dir`, default `<data_dir>/downloads/manual`). When files are
missing it says which, what to download and where to put it, and exits 2; a failed
download exits 1. A prepared dataset is left as it is.
"""

import os
import sys

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
  """Prepares one dataset config (name, data_dir, manual_dir); returns a line saying what
  is there. Raises MissingFiles, DownloadFailed, or cli.ConfigError for an unknown name."""
  import tensorflow_datasets as tfds
  from attention_lab.data import availability
  name = dataset.name
  spec = availability.source(name)
  if spec is None:
    raise cli.ConfigError(f"dataset.name = {name!r}: no known way to prepare it (known: "
                          f"{', '.join(sorted(availability.SOURCES))})")
  if name == "celeb_a" and dataset.image_dir:
    return _celeba_folder(dataset)
  builder = availability.builder(name, dataset.data_dir)
  if not availability.is_prepared(builder):
    download_config = None
    if spec.how == "manual":
      manual = availability.manual_dir(dataset)
      splits = availability.splits_read(dataset) or set(spec.split_files)  # --dataset: all
      missing = availability.missing_files(name, manual, splits)
      if missing:
        raise MissingFiles(missing_files_message(name, manual, missing))
      download_config = tfds.download.DownloadConfig(manual_dir=manual)
    try:
      builder.download_and_prepare(download_config=download_config)
    except Exception as e:  # pylint: disable=broad-except
      if spec.how != "download":
        raise
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise DownloadFailed(f"dataset {name!r}: the download failed ({first[:300]}); "
                           + " ".join(spec.steps)) from e
  sizes = ", ".join(f"{split} {info.num_examples:,}"
                    for split, info in sorted(builder.info.splits.items()))
  return f"{name}: prepared in {builder.data_dir} ({sizes})"


def _config_from_flags() -> ml_collections.ConfigDict:
  if (_CONFIG.value is None) == (_DATASET.value is None):
    raise cli.ConfigError("give --config=CONFIG or --dataset=NAME (one of them)")
  if _CONFIG.value is not None:
    return _CONFIG.value
  # The fields of a config that dataset_configs and prepare read; no splits: all of them.
  return ml_collections.ConfigDict({
      "task": "", "init_from": "",
      "dataset": {"name": _DATASET.value, "data_dir": _DATA_DIR.value,
                  "manual_dir": _MANUAL_DIR.value, "image_dir": "", "train_split": "",
                  "eval_split": ""}})


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
