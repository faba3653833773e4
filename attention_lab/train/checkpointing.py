"""The workdir's checkpoints: their format, what a run does when saving or restoring
fails, and the record of the config a workdir was started with.

- The format: the state pytree as orbax saves it, typed PRNG keys as their raw uint32 key
  data (`storable`, `unstorable`), restored replicated (`restore_target`).

- Saving (orbax, asynchronous): a failure (no space, no permission, quota) may surface in
  the save call or later, while waiting for the write; either way it becomes one
  `SaveError` line naming the step, the directory, the cause and what to do. orbax does not
  finalise the failed step, so the latest checkpoint stays the last good one; its partial
  `<step>.orbax-checkpoint-tmp*` folder is removed at once, and any left by a killed run is
  removed when the next run starts.
- Writing the workdir's other files (config record, parameter table, TensorBoard logs)
  on a full disk, over quota or on a read-only filesystem: one `WriteError` line naming
  the file, the latest checkpoint and what to do (`write_fault`).
- Restoring: the newest step that restores wins. Newer steps that fail to restore are
  moved aside to `<step>.damaged` (one warning line each), but only once an older step has
  restored: when none restores (damage everywhere, or a state structure the code no longer
  has) nothing is moved and `RestoreError` says so in one line.
- The workdir remembers its run: `config.json` is written at the first start (process 0).
  A resume whose config differs from it fails with `WorkdirMismatchError`, naming the
  fields, unless every differing field is on an allow-list of operational fields (how long,
  how often, where the files are, how many devices), which are logged in one line. It is an
  allow-list on purpose: a field nobody has classified (a new model option) counts as part
  of the run.
"""

import errno
import glob
import json
import os
import re
import shutil
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab import cli

CONFIG_FILE = "config.json"

# Fields that may change when a workdir is resumed: they say how long and how often the
# run works, where its files are and what it runs on, not what it learns. Dotted paths;
# a name ending in "." allows the whole subtree.
OPERATIONAL_FIELDS = (
    "num_train_steps", "num_epochs",
    "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "first_checkpoint_secs",
    "keep_checkpoints",
    "dataset.data_dir", "dataset.manual_dir", "dataset.image_dir",
    "mesh.num_devices", "mesh.param_sharding", "distributed",
    "compilation_cache_dir", "profile_steps", "profile_all_processes",
    "eval.batch_size", "eval.stats_dir", "eval.inception_path", "eval.classifier_workdir",
)

# Fields that were renamed, as (old, new), so that a workdir recorded under the old names
# resumes; a name ending in "." renames the whole subtree.
RENAMED_FIELDS = (
    ("evaluation.", "eval."),  # restoration
    ("inference.", "eval."),  # detection
    ("eval_max_batches", "eval.max_batches"),  # detection
)


def is_key(x) -> bool:
  """A typed PRNG key array, or its abstract ShapeDtypeStruct."""
  return jnp.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)


def storable(state):
  """`state` as saved: typed PRNG keys become their raw uint32 key data."""
  return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, state)


def unstorable(restored, like):
  """Undoes `storable`, given the (abstract) state it came from."""
  return jax.tree.map(
      lambda r, x: jax.random.wrap_key_data(r, impl=x.dtype._impl) if is_key(x) else r,  # pylint: disable=protected-access
      restored, like)


def restore_target(abstract, shardings):
  """What orbax restores `abstract` (the state's ShapeDtypeStructs) into: each array in its
  sharding, a key as its raw key data, replicated over the same mesh."""

  def target(like, sharding):
    if is_key(like):
      data = jax.eval_shape(jax.random.key_data, like)
      return jax.ShapeDtypeStruct(data.shape, data.dtype,
                                  sharding=NamedSharding(sharding.mesh, P()))
    return jax.ShapeDtypeStruct(like.shape, like.dtype, sharding=sharding)

  return jax.tree.map(target, abstract, shardings)


class CheckpointError(RuntimeError):
  """The workdir's checkpoints or files could not be written or read; the message is one
  line."""


class SaveError(CheckpointError):
  """Saving a step failed; the latest checkpoint is the last good one."""


class WriteError(CheckpointError):
  """Writing a workdir file (the config record, the parameter table, TensorBoard logs)
  failed for want of space or write access; the latest checkpoint is the last good one."""


class RestoreError(CheckpointError):
  """No checkpoint of the workdir restores."""


class WorkdirMismatchError(cli.ConfigError):
  """The config differs from the one the workdir was started with in a non-operational field."""


def _chain(error: BaseException) -> list[BaseException]:
  chain = []
  while error is not None and error not in chain:
    chain.append(error)
    error = error.__cause__ or error.__context__
  return chain


# The OS errors that writing meets on a full disk, over quota or a read-only filesystem.
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _errno(error: BaseException) -> int | None:
  """The OS error code in the chain of causes: an `errno`, tensorstore's 'os_error_code=N',
  or the OS's text of a `WRITE_FAULTS` code in the message (TensorFlow gives only that)."""
  for e in _chain(error):
    code = getattr(e, "errno", None)
    if code is None:
      match = re.search(r"os_error_code='?(\d+)", str(e))
      code = int(match.group(1)) if match else None
    if code is None:
      code = next((c for c in WRITE_FAULTS if os.strerror(c) in str(e)), None)
    if code:
      return code
  return None


def _reason(error: BaseException) -> str:
  """The cause of an I/O error in a few words: the OS error (`_errno`), else the first
  tensorstore status ('OUT_OF_RANGE: ...') in the chain of causes, else the first line of
  the message; at most 200 characters."""
  code = _errno(error)
  if code:
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
  chain = _chain(error)
  status = [e for e in chain if re.match(r"[A-Z_]{5,}: ", str(e))]
  lines = [line.strip() for line in str((status or chain)[0]).splitlines() if line.strip()]
  text = lines[0] if lines else type(error).__name__
  return text if len(text) <= 200 else text[:197] + "..."


def _advice(error: BaseException) -> str:
  reason = _reason(error)
  if "ENOSPC" in reason or "EDQUOT" in reason:
    return "free space (or raise the quota)"
  if "EACCES" in reason or "EPERM" in reason or "EROFS" in reason:
    return "make the workdir writable"
  return "fix the cause"


def _what_to_do(error: BaseException, latest: int | None) -> str:
  """'; <what is kept>. <Advice> and run the same command again to <resume>'."""
  keep = (f"the latest checkpoint is still step {latest}" if latest is not None
          else "no checkpoint was saved before it")
  resume = f"resume from step {latest}" if latest is not None else "start again"
  return (f"; {keep}. {_advice(error).capitalize()} and run the same command again to "
          f"{resume}")


def write_fault(error: BaseException, workdir: str, latest: int | None) -> WriteError | None:
  """One `WriteError` line for `error` when it is a `WRITE_FAULTS` error met writing a file
  (the file it names, else `workdir`), else None; `latest`: the latest checkpoint."""
  if isinstance(error, CheckpointError) or _errno(error) not in WRITE_FAULTS:
    return None
  paths = [e.filename for e in _chain(error) if getattr(e, "filename", None)]
  paths += [p for p in re.findall(r"/[^\s;:'\"]+", str(error)) if os.path.exists(p)]  # TF's
  where = paths[0] if paths else f"a file in {workdir}"
  return WriteError(f"writing {where} failed: {_reason(error)}{_what_to_do(error, latest)}")


def _is_primary() -> bool:
  return jax.process_index() == 0


def warn(line: str) -> None:
  """One warning line on stderr, from process 0 only."""
  if _is_primary():
    print(line, file=sys.stderr, flush=True)


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


class Checkpoints:
  """An orbax CheckpointManager over `workdir/checkpoints` with the policy above. It keeps
  the manager's names the loop uses: `directory`, `latest_step()`, `save(...)`,
  `wait_until_finished()`."""

  def __init__(self, workdir: str, *, max_to_keep: int, save_interval_steps: int):
    self.manager = ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            cleanup_tmp_directories=True))  # partial steps of a killed or failed run
    self.directory = self.manager.directory
    self._in_flight = None  # the step whose asynchronous write has not been waited for
    self._failed = False

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def _save_error(self, step: int, error: BaseException) -> SaveError:
    self._failed = True
    self._remove_partial(step)
    return SaveError(f"saving checkpoint step {step} in {self.directory} failed: "
                     f"{_reason(error)}{_what_to_do(error, self.latest_step())}")

  def _remove_partial(self, step: int) -> None:
    if _is_primary():
      for path in glob.glob(os.path.join(str(self.directory), f"{step}.orbax-checkpoint-tmp*")):
        shutil.rmtree(path, ignore_errors=True)
    self.manager.reload()

  def wait_until_finished(self) -> None:
    """Waits for the write in flight; its failure becomes a `SaveError`. After a failure
    (already raised) it does nothing."""
    if self._failed:
      return
    step, self._in_flight = self._in_flight, None
    try:
      self.manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      raise self._save_error(step if step is not None else -1, e) from e

  def save(self, step: int, state, *, force: bool = False) -> bool:
    """Starts saving `state` as `step` (asynchronously; the previous write is waited for
    first). Raises `SaveError` for this step's or the previous write's failure."""
    if self._failed:
      return False
    self.wait_until_finished()
    try:
      started = self.manager.save(step, args=ocp.args.StandardSave(state), force=force)
    except Exception as e:  # pylint: disable=broad-except
      raise self._save_error(step, e) from e
    if started:
      self._in_flight = step
    return started

  def restore(self, target, warn) -> tuple[object, int] | None:
    """The newest step that restores into `target` (abstract arrays with shardings) as
    (state, step); None when the workdir has no checkpoint. Newer steps that fail are moved
    aside as `<step>.damaged`, each with one `warn(line)`. Raises `RestoreError` when no
    step restores."""
    steps = self.all_steps()[::-1]
    failures = []
    for step in steps:
      try:
        state = self.manager.restore(step, args=ocp.args.StandardRestore(target))
      except Exception as e:  # pylint: disable=broad-except
        failures.append((step, _reason(e)))
        continue
      for bad, reason in failures:
        moved = self._move_aside(bad)
        warn(f"warning: checkpoint step {bad} in {self.directory} does not restore ({reason}); "
             f"moved it to {moved}, resuming from step {step}")
      if failures:
        self.manager.reload()
      return state, step
    if not steps:
      return None
    shown = "; ".join(f"step {s}: {r}" for s, r in failures)
    raise RestoreError(
        f"no checkpoint in {self.directory} restores ({shown}); nothing was moved. Start "
        "afresh with a new --workdir, or move the steps aside to start this one again")

  def _move_aside(self, step: int) -> str:
    source = os.path.join(str(self.directory), str(step))
    target = source + ".damaged"
    if _is_primary():
      suffix = 1
      while os.path.exists(target):  # an earlier damaged copy of the same step
        target, suffix = f"{source}.damaged.{suffix}", suffix + 1
      os.rename(source, target)
    _sync(f"checkpointing_move_aside_{step}")
    return target


def _flatten(tree, prefix="") -> dict[str, object]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def _new_name(path: str) -> str | None:
  for old, new in RENAMED_FIELDS:
    if path == old or (old.endswith(".") and path.startswith(old)):
      return new + path[len(old):]
  return None


def _renamed(flat: dict[str, object]) -> dict[str, object]:
  """`flat` (dotted paths) with the old names of `RENAMED_FIELDS` as their new ones; a
  field the record also holds under its new name keeps that value."""
  out = {path: value for path, value in flat.items() if _new_name(path) is None}
  for path, value in flat.items():
    if _new_name(path) is not None:
      out.setdefault(_new_name(path), value)
  return out


def _operational(path: str) -> bool:
  return any(path == f or (f.endswith(".") and path.startswith(f)) for f in OPERATIONAL_FIELDS)


def _as_json(config: ml_collections.ConfigDict) -> dict:
  return json.loads(config.to_json_best_effort(sort_keys=True))


def config_changes(recorded: dict, config: ml_collections.ConfigDict) -> tuple[dict, dict]:
  """The fields that differ between a workdir's recorded config and `config`, split into
  (operational, others); each maps a dotted path to (recorded value, new value), a missing
  field's value being the string '<absent>'. A record's old field names (`RENAMED_FIELDS`)
  are compared as their new ones."""
  old, new = _renamed(_flatten(recorded)), _flatten(_as_json(config))
  operational, others = {}, {}
  for path in sorted(set(old) | set(new)):
    before, after = old.get(path, "<absent>"), new.get(path, "<absent>")
    if before != after:
      (operational if _operational(path) else others)[path] = (before, after)
  return operational, others


def check_workdir_config(config: ml_collections.ConfigDict, workdir: str, say) -> None:
  """Writes `workdir/config.json` at the first start (process 0). Later: raises
  `WorkdirMismatchError` naming the fields that differ from it, unless all of them are
  operational; those are reported with one `say(line)` and the record is kept."""
  path = os.path.join(workdir, CONFIG_FILE)
  exists = os.path.exists(path)
  _sync("checkpointing_config_json_seen")  # every process looked before process 0 writes
  if not exists:
    if _is_primary():
      text = config.to_json_best_effort(indent=2, sort_keys=True)
      with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
      os.replace(path + ".tmp", path)  # never a half-written record
    _sync("checkpointing_config_json")
    return
  with open(path) as f:
    recorded = json.load(f)
  operational, others = config_changes(recorded, config)

  def shown(changes):
    return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())

  if others:
    raise WorkdirMismatchError(
        f"--workdir {workdir} holds a run with another config ({shown(others)}; recorded in "
        f"{path}); use a new --workdir for this config, or the recorded values to resume")
  if operational:
    say(f"Resuming with changed run settings: {shown(operational)}")
