"""The run's typed errors, and faults of the disk put in one line.

Tasks, the loop and the workdir raise these; only the entry points (`attention_lab.main`,
`predict`, `aot`) print them, through `one_line`. Every message is one line that names
what failed, what is kept and what to do.
"""

import errno
import os
import re

from etils import epath

from attention_lab import cli


class NonFiniteError(RuntimeError):
  """A train step gave a non-finite metric or state; the run stopped before saving it."""


class CheckpointError(RuntimeError):
  """The workdir's checkpoints or files could not be written or read."""


class SaveError(CheckpointError):
  """Saving a step failed; the latest checkpoint is the last good one."""


class WriteError(CheckpointError):
  """Writing a workdir file (the config record, the parameter table, TensorBoard logs, the
  run summary) failed for want of space or write access."""


class RestoreError(CheckpointError):
  """No checkpoint of the workdir restores."""


class WorkdirMismatchError(cli.ConfigError):
  """The config differs from the one the workdir was started with in a field that is part
  of the run."""


class DataCorruptionError(RuntimeError):
  """A dataset file is damaged."""


def chain(error: BaseException) -> list[BaseException]:
  """`error` and its causes and contexts, outermost first."""
  out = []
  while error is not None and error not in out:
    out.append(error)
    error = error.__cause__ or error.__context__
  return out


# The OS errors that writing meets on a full disk, over quota or a read-only filesystem.
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def os_error_code(error: BaseException) -> int | None:
  """The OS error code in the chain of causes: an `errno`, tensorstore's 'os_error_code=N',
  or the OS's text of a `WRITE_FAULTS` code in the message (TensorFlow gives only that)."""
  for e in chain(error):
    code = getattr(e, "errno", None)
    if code is None:
      match = re.search(r"os_error_code='?(\d+)", str(e))
      code = int(match.group(1)) if match else None
    if code is None:
      code = next((c for c in WRITE_FAULTS if os.strerror(c) in str(e)), None)
    if code:
      return code
  return None


def reason(error: BaseException) -> str:
  """The cause of an I/O error in a few words: the OS error, else the first tensorstore
  status ('OUT_OF_RANGE: ...') in the chain of causes, else the first line of the message;
  at most 200 characters."""
  code = os_error_code(error)
  if code:
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
  causes = chain(error)
  status = [e for e in causes if re.match(r"[A-Z_]{5,}: ", str(e))]
  lines = [line.strip() for line in str((status or causes)[0]).splitlines() if line.strip()]
  text = lines[0] if lines else type(error).__name__
  return text if len(text) <= 200 else text[:197] + "..."


def _advice(error: BaseException) -> str:
  why = reason(error)
  if "ENOSPC" in why or "EDQUOT" in why:
    return "free space (or raise the quota)"
  if "EACCES" in why or "EPERM" in why or "EROFS" in why:
    return "make the workdir writable"
  return "fix the cause"


def what_to_do(error: BaseException, latest: int | None) -> str:
  """'; <what is kept>. <Advice> and run the same command again to <resume>'."""
  keep = (f"the latest checkpoint is still step {latest}" if latest is not None
          else "no checkpoint was saved before it")
  resume = f"resume from step {latest}" if latest is not None else "start again"
  return (f"; {keep}. {_advice(error).capitalize()} and run the same command again to "
          f"{resume}")


def write_fault(error: BaseException, workdir: str, latest: int | None) -> WriteError | None:
  """One `WriteError` line for `error` when it is a `WRITE_FAULTS` error met writing a file
  (the file it names, else `workdir`), else None; `latest`: the latest checkpoint."""
  if isinstance(error, CheckpointError) or os_error_code(error) not in WRITE_FAULTS:
    return None
  paths = [e.filename for e in chain(error) if getattr(e, "filename", None)]
  paths += [p for p in re.findall(r"/[^\s;:'\"]+", str(error)) if epath.Path(p).exists()]
  where = paths[0] if paths else f"a file in {workdir}"
  return WriteError(f"writing {where} failed: {reason(error)}{what_to_do(error, latest)}")


def one_line(error: BaseException, config=None) -> tuple[str, int] | None:
  """(the line an entry point prints, its exit status) for the faults of configuration,
  disk and data; None for anything else (a bug: its traceback is shown)."""
  if isinstance(error, NonFiniteError):
    return str(error), 1
  if isinstance(error, (CheckpointError, DataCorruptionError)):
    return str(error), 2
  if isinstance(error, ValueError):  # configuration, cli.ConfigError included
    text = cli.name_field(str(error), config) if config is not None else str(error)
    return f"{text} (--debug shows the traceback)", 2
  return None
