"""A damaged dataset file, reported in one line: which ArrayRecord file, where in it, and
how to prepare the dataset again.

ArrayRecord files carry checksums (riegeli's block and chunk hashes); a record that fails
them raises `sources.DamagedRecord` naming its file, in this process or in a decoding
worker (whose exception grain re-raises here).
"""

import re

from etils import epath

from attention_lab.data.sources import CACHE, DamagedRecord
from attention_lab.train.errors import DataCorruptionError


def is_data_loss(error: BaseException) -> bool:
  """Whether `error` is a record of the dataset failing its checksums."""
  return isinstance(error, DamagedRecord)


def _how_to_prepare(config, folder: epath.Path) -> str:
  from attention_lab.data import availability  # pylint: disable=g-import-not-at-top
  remove = f"rm -r {folder}"
  if str(folder).startswith(str(CACHE)):  # the local copy of a bucket's files
    return f"{remove} and run the same command again (it is copied again)"
  if availability.source(config.dataset.name).how == "embedded":
    return f"{remove} and run the same command again (it is prepared on first use)"
  return f"{remove} && {availability.prepare_command(config.dataset)}"


def corruption_error(config, error: DamagedRecord, saved: str) -> DataCorruptionError:
  """One line for a damaged record met reading `config.dataset`; `saved` says what was
  saved before stopping (e.g. 'saved step 47')."""
  at = re.search(r"at byte (\d+)", error.detail)
  what = f"corrupted record at byte {at.group(1)}" if at else error.detail
  folder = epath.Path(error.path).parent
  return DataCorruptionError(
      f"dataset {config.dataset.name!r} is damaged: {what} in {error.path}; {saved}. "
      f"Prepare the dataset again: {_how_to_prepare(config, folder)}")
