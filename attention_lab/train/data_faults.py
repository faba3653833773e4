"""A damaged dataset file, reported in one line: which TFRecord file, the record offset,
and how to prepare the dataset again.

tf.data's `DataLossError` says only "corrupted record at OFFSET". The file is found by
reading the record at that offset in each of the dataset's TFRecord files (one small
random read per file): the file whose record there fails is the damaged one. When that
does not single out one file, the line names the dataset's directory and the offset.
"""

import re
import sys

from etils import epath, epy

from attention_lab.train.errors import DataCorruptionError

with epy.lazy_imports():  # TensorFlow is only here when a pipeline was built
  import tensorflow as tf
  import tensorflow_datasets as tfds


def is_data_loss(error: BaseException) -> bool:
  """Whether `error` is tf.data's DataLossError (never, when TensorFlow was not imported)."""
  tf_module = sys.modules.get("tensorflow")
  return tf_module is not None and isinstance(error, tf_module.errors.DataLossError)


def _dataset_dir(name: str, data_dir: str) -> str:
  """`data_dir/<name>` ('name:1.0.0' → name/1.0.0; '' data_dir → the TFDS default)."""
  base, _, version = name.partition(":")
  return str(epath.Path(data_dir or tfds.core.constants.DATA_DIR) / base / version)


def _fails_at(path: str, offset: int) -> bool:
  """Whether the record at byte `offset` of TFRecord file `path` is corrupted."""
  from tensorflow.python.lib.io import tf_record  # pylint: disable=g-import-not-at-top
  if epath.Path(path).stat().length <= offset:
    return False
  try:
    tf_record.tf_record_random_reader(path).read(offset)
  except tf.errors.DataLossError:
    return True
  except Exception:  # pylint: disable=broad-except  (not a record boundary, unreadable)
    return False
  return False


def damaged_file(name: str, data_dir: str, offset: int | None) -> str | None:
  """The one TFRecord file of dataset `name` whose record at `offset` is corrupted."""
  if offset is None:
    return None
  root = epath.Path(_dataset_dir(name, data_dir))  # <name>[/<config>]/<version>/ files
  files = sorted(str(f) for depth in range(3)
                 for f in root.glob("/".join(["*"] * depth + ["*.tfrecord*"])))
  found = [f for f in files if _fails_at(f, offset)]
  return found[0] if len(found) == 1 else None


def _prepare_command(name: str, data_dir: str, version_dir: str) -> str:
  builder_module = ""
  try:
    builder_module = tfds.builder_cls(name.partition(":")[0]).__module__
  except Exception:  # pylint: disable=broad-except  (a name TFDS does not know)
    pass
  remove = f"rm -r {version_dir}"
  if builder_module.startswith("attention_lab."):  # ours: prepared on first use
    return f"{remove} and run the same command again (it is prepared on first use)"
  data_dir_arg = f", data_dir={data_dir!r}" if data_dir else ""
  return (f"{remove} && python -c \"import tensorflow_datasets as tfds; "
          f"tfds.builder({name!r}{data_dir_arg}).download_and_prepare()\"")


def corruption_error(config, error: Exception, saved: str) -> DataCorruptionError:
  """One line for a `DataLossError` met reading `config.dataset`; `saved` says what was
  saved before stopping (e.g. 'saved step 47')."""
  name, data_dir = config.dataset.name, config.dataset.data_dir
  match = re.search(r"corrupted record at (\d+)", str(error))
  offset = int(match.group(1)) if match else None
  path = damaged_file(name, data_dir, offset)
  where = path or _dataset_dir(name, data_dir)
  version_dir = str(epath.Path(path).parent) if path else where
  at = f"corrupted record at offset {offset}" if offset is not None else (
      str(error).strip().splitlines()[0] if str(error).strip() else "corrupted data")
  return DataCorruptionError(
      f"dataset {name!r} is damaged: {at} in {where}; {saved}. Prepare the dataset again: "
      f"{_prepare_command(name, data_dir, version_dir)}")
