"""The workdir as a place: a user's path resolved (local or `gs://...`, always through
etils.epath), the directory created and checked for write access, and files written whole
or not at all. What lives in it has its own module: checkpoints (train/checkpointing.py),
the config record (train/config_record.py), the run summary (train/run_summary.py),
TensorBoard events (train/metric_writing.py)."""

import jax
from etils import epath


def resolve(path: str) -> epath.Path:
  """A user's path as an epath.Path: a local one made absolute, a URI (gs://...) as it is."""
  path = epath.Path(path).expanduser()
  return path if "://" in str(path) else path.resolve()


def write_text(path: epath.Path, text: str) -> None:
  """Writes `text` whole or not at all: a temporary file renamed over `path`."""
  temporary = path.with_name(path.name + ".tmp")
  temporary.write_text(text)
  temporary.replace(path)


def prepare(workdir: str) -> epath.Path:
  """Creates `workdir` and checks that it can be written; ValueError when it cannot."""
  path = resolve(workdir)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f".writable.{jax.process_index()}"
    probe.write_text("")
    probe.unlink()
  except OSError as e:
    raise ValueError(f"workdir {workdir!r} cannot be written: {e}") from None
  return path
