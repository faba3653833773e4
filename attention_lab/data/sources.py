"""Random access to prepared datasets, without TensorFlow: one split's examples by index.

Datasets are stored as TFDS ArrayRecord files (`python -m attention_lab.data.prepare`
writes them; it converts a TFRecord directory too). Reading needs neither TensorFlow nor
a builder's code: the prepared folder's dataset_info.json and features.json describe the
records (`tfds.builder_from_directory`), and `Records` decodes them with numpy and PIL.

- `version_dir(dataset)`: the prepared folder of `config.dataset`, found under its
  data_dir. Embedded datasets, and manual ones whose files are in the manual_dir, are
  prepared on first use (that needs TensorFlow, as every TFDS builder does).
- A gs:// data_dir: ArrayRecord files are read by local (C++) file readers, so the
  prepared folder is copied once into a local cache (`CACHE`, keyed by its URL) and read
  there; a pod reads its bucket through gcsfuse instead (README).
- `Records(folder, split)`: the decoded examples of `split` ("train", "a+b", "test[:10%]")
  as numpy dicts (a small dataset's kept once decoded); a record that fails its checksum
  raises `DamagedRecord`, naming the file.
"""

from __future__ import annotations

import collections.abc
import io
import os

import numpy as np
from absl import logging
from etils import epath, epy

with epy.lazy_imports():
  import tensorflow_datasets as tfds
  from PIL import Image

from attention_lab import cli

CACHE = epath.Path("~/.cache/attention_lab/datasets").expanduser()
# Datasets stored in at most this many bytes are decoded once per process (TFDS's
# as_dataset caches the same ones: CIFAR, the embedded datasets).
CACHE_BYTES = 250 * 2**20
_COPIED = ".copied"  # written last into a cached folder: the copy is whole


class DamagedRecord(Exception):
  """A record whose bytes fail ArrayRecord's checksums: the file, and the reader's words."""

  def __init__(self, path: str, detail: str):
    super().__init__(f"{path}: {detail}")
    self.path, self.detail = path, detail

  def __reduce__(self):  # raised in worker processes, re-raised here
    return DamagedRecord, (self.path, self.detail)


def decode_image(data: bytes) -> np.ndarray:
  """PNG / JPEG bytes → uint8 (H, W, C), C = 1 for grey levels."""
  with Image.open(io.BytesIO(data)) as image:
    array = np.asarray(image)
  return array[..., None] if array.ndim == 2 else array


def _frozen(value):
  """`value` with every numpy array in it read-only (a cached example is shared)."""
  if isinstance(value, dict):
    return {k: _frozen(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_frozen(v) for v in value]
  if isinstance(value, np.ndarray):
    value.setflags(write=False)
  return value


class Records(collections.abc.Sequence):
  """The examples of `split` of the prepared dataset in `folder`, by index (0 .. len − 1),
  as dicts of numpy values (images uint8 (H, W, C)); O(1) per example, in any order.

  A dataset of at most CACHE_BYTES (its stored size) is decoded once per process and its
  examples kept, read-only, as TFDS's `as_dataset` caches such datasets: later epochs
  neither read nor decode. Pickles as (folder, split): worker processes open their own
  readers and caches."""

  def __init__(self, folder: str, split: str):
    self.folder, self.split = str(folder), split
    builder = tfds.builder_from_directory(self.folder)
    self._source = builder.as_data_source(  # switches a converted dataset to ArrayRecord
        split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    self._files = builder.info.splits[split].file_instructions
    self._features = builder.info.features
    self._images = [k for k, f in self._features.items() if isinstance(f, tfds.features.Image)]
    self._decoders = {k: tfds.decode.SkipDecoding() for k in self._images}
    self._cache = {} if 0 < builder.info.dataset_size <= CACHE_BYTES else None

  def __reduce__(self):
    return Records, (self.folder, self.split)

  def __len__(self) -> int:
    return len(self._source)

  def file_of(self, index: int) -> str:
    """The ArrayRecord file that holds example `index`."""
    for instruction in self._files:
      if index < instruction.take:
        return instruction.filename
      index -= instruction.take
    raise IndexError(f"index {index} is past the end of {self.split!r}")

  def raw(self, index: int) -> bytes:
    """The serialized record of example `index` (DamagedRecord if it fails its checks)."""
    index = int(index) % len(self)
    try:
      return self._source[index]
    except RuntimeError as e:  # riegeli: "Corrupted Riegeli/records file: ... hash mismatch"
      raise DamagedRecord(self.file_of(index), str(e).splitlines()[0]) from e

  def __getitem__(self, index):
    index = int(index) % len(self)
    if self._cache is not None and index in self._cache:
      return self._cache[index]
    example = self._features.deserialize_example_np(self.raw(index), decoders=self._decoders)
    for key in self._images:
      example[key] = decode_image(example[key])
    if self._cache is not None:
      self._cache[index] = example = _frozen(example)
    return example


class ImageFiles(collections.abc.Sequence):
  """Image files (any epath) as examples {"image": uint8 (H, W, C)}, by index."""

  def __init__(self, paths):
    self.paths = [str(p) for p in paths]

  def __len__(self) -> int:
    return len(self.paths)

  def __getitem__(self, index):
    return {"image": decode_image(epath.Path(self.paths[int(index)]).read_bytes())}


# Finding (and making) the prepared folder --------------------------------------------------

def _is_remote(path: str) -> bool:
  return "://" in str(path)


def version_dir(dataset) -> str:
  """The local folder of `dataset` (config.dataset) prepared as ArrayRecord: prepared on
  first use where the data layer may (prepare.prepare_on_first_use), copied from a gs://
  data_dir into CACHE; cli.ConfigError (one line) when it cannot be read."""
  from attention_lab.data import availability, prepare  # pylint: disable=g-import-not-at-top
  builder = availability.find_prepared(dataset.name, dataset.data_dir)
  if builder is None or not availability.has_array_record(builder):
    prepare.prepare_on_first_use(dataset)
    builder = availability.find_prepared(dataset.name, dataset.data_dir)
  if builder is None or not availability.has_array_record(builder):
    availability.require_prepared(_run_config(dataset))  # its one line, where it has one
    raise cli.ConfigError(
        availability.not_array_record_message(dataset, builder) if builder is not None
        else availability.not_prepared_message(
            dataset.name, availability.data_dir_root(dataset.data_dir),
            availability.prepare_command(dataset)))
  folder = str(builder.data_dir)
  return local_copy(folder) if _is_remote(folder) else folder


def _run_config(dataset):
  """A run config around a dataset config (what availability reads)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  return ml_collections.ConfigDict({"dataset": dataset})


def local_copy(url: str) -> str:
  """The files of the prepared folder at `url`, copied once into CACHE/<host>/<path>
  (a whole copy is marked; a partial one is copied again)."""
  from attention_lab.data import prepare  # pylint: disable=g-import-not-at-top
  scheme, _, rest = url.partition("://")
  target = CACHE / scheme / rest
  if (target / _COPIED).exists():
    return str(target)
  source = epath.Path(url)
  files = [f for f in source.iterdir() if not f.is_dir()]
  total = sum(f.stat().length for f in files)
  logging.warning("copying %s (%.1f MB) to %s to read it (on a pod: mount the bucket with "
                  "gcsfuse instead)", url, total / 2**20, target)
  partial = target.parent / f"{target.name}.partial-{os.getpid()}"
  partial.mkdir(parents=True, exist_ok=True)
  for f in files:
    prepare.copy_file(f, partial / f.name)
  (partial / _COPIED).write_text(url)
  try:
    partial.rename(target)
  except OSError:  # another process on this host finished first
    if not (target / _COPIED).exists():
      raise
    for f in partial.iterdir():
      f.unlink()
    partial.rmdir()
  return str(target)


def records(dataset, split: str) -> Records:
  """The examples of `split` of `dataset` (config.dataset)."""
  return Records(version_dir(dataset), split)
