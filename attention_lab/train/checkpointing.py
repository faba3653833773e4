"""The workdir's checkpoints: an orbax CheckpointManager over `<workdir>/checkpoints`, and
what happens when saving or restoring fails.

- Saving is asynchronous; a failure (no space, no permission, quota) surfaces in the save
  call or while waiting for the write, and becomes one `errors.SaveError` line naming the
  step, the directory, the cause and what to do. orbax does not finalise the failed step,
  so the latest checkpoint stays the last good one; its partial
  `<step>.orbax-checkpoint-tmp*` folder is removed at once, and any left by a killed run
  when the next run starts.
- Restoring: the newest step that restores wins. Newer steps that fail to restore are moved
  aside to `<step>.damaged` (one warning line each), but only once an older step has
  restored: when none restores nothing is moved and `errors.RestoreError` says so.
- A step saved before a key of the state was renamed (`RENAMED_KEYS`) restores under the
  new name.
"""

from collections.abc import Mapping

import orbax.checkpoint as ocp
from etils import epath

from attention_lab.train import console, errors, multihost, workdir as workdir_lib

# Keys of a model's state (the dict holding its "params") that were renamed, as (old, new).
RENAMED_KEYS = (("rest", "non_params"),)


def keys_as_saved(target, saved):
  """`target` with each key of a model's state that `saved` (a step's tree of metadata)
  holds only under its old name (`RENAMED_KEYS`) renamed to that."""
  if not isinstance(target, dict) or not isinstance(saved, Mapping):
    return target
  old = {new: old for old, new in RENAMED_KEYS
         if "params" in target and new not in saved and old in saved}
  return {old.get(key, key): keys_as_saved(value, saved.get(old.get(key, key)))
          for key, value in target.items()}


def current_keys(tree):
  """`tree` (as saved) with the old names of `RENAMED_KEYS` in each model's state as the
  new ones."""
  if not isinstance(tree, dict):
    return tree
  new = dict(RENAMED_KEYS) if "params" in tree else {}
  return {new.get(key, key): current_keys(value) for key, value in tree.items()}


class _Manager(ocp.CheckpointManager):
  """orbax's manager without its own question to jax's preemption sync point at each save
  (with the step number): the loop asks it before every step with a count that every
  process passes through in turn (train/signals.py), and another asker would break that."""

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


class Checkpoints:
  """An orbax CheckpointManager over `workdir/checkpoints` with the policy above. It keeps
  the manager's names the loop uses: `directory`, `latest_step()`, `save(...)`,
  `wait_until_finished()`."""

  def __init__(self, workdir: str, *, max_to_keep: int = 1, save_interval_steps: int = 1,
               read_only: bool = False):
    self.manager = _Manager(
        workdir_lib.resolve(workdir) / "checkpoints",
        item_handlers=ocp.StandardCheckpointHandler(),  # a step's tree is read before restoring
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            read_only=read_only, create=not read_only,
            cleanup_tmp_directories=not read_only))  # partial steps of a killed or failed run
    self.directory = self.manager.directory
    self._in_flight = None  # the step whose asynchronous write has not been waited for
    self._failed = False

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def _save_error(self, step: int, error: BaseException) -> errors.SaveError:
    self._failed = True
    latest = self.latest_step()  # the manager's memory: the storage may be what failed
    try:
      self._remove_partial(step)
    except Exception:  # pylint: disable=broad-except  (the next start removes it)
      pass
    return errors.SaveError(f"saving checkpoint step {step} in {self.directory} failed: "
                            f"{errors.reason(error)}{errors.what_to_do(error, latest)}")

  def _remove_partial(self, step: int) -> None:
    if multihost.is_primary():
      for path in epath.Path(self.directory).glob(f"{step}.orbax-checkpoint-tmp*"):
        path.rmtree(missing_ok=True)
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

  def restore_step(self, step: int, target) -> tuple[object, int]:
    """Step `step` restored into `target` (abstract arrays with shardings), and `step`."""
    saved = self.manager.item_metadata(step)
    as_saved = keys_as_saved(target, getattr(saved, "tree", saved))
    restored = self.manager.restore(step, args=ocp.args.StandardRestore(as_saved))
    return current_keys(restored), step

  def restore(self, target, warn=console.warn) -> tuple[object, int] | None:
    """The newest step that restores into `target` (abstract arrays with shardings) as
    (state, step); None when the workdir has no checkpoint. Newer steps that fail are moved
    aside as `<step>.damaged`, each with one `warn(line)`. Raises `RestoreError` when no
    step restores."""
    steps = self.all_steps()[::-1]
    failures = []
    for step in steps:
      try:
        restored = self.restore_step(step, target)
      except Exception as e:  # pylint: disable=broad-except
        failures.append((step, errors.reason(e)))
        continue
      for bad, reason in failures:
        moved = self._move_aside(bad)
        warn(f"warning: checkpoint step {bad} in {self.directory} does not restore ({reason}); "
             f"moved it to {moved}, resuming from step {step}")
      if failures:
        self.manager.reload()
      return restored
    if not steps:
      return None
    shown = "; ".join(f"step {s}: {r}" for s, r in failures)
    raise errors.RestoreError(
        f"no checkpoint in {self.directory} restores ({shown}); nothing was moved. Start "
        "afresh with a new --workdir, or move the steps aside to start this one again")

  def _move_aside(self, step: int) -> str:
    source = epath.Path(self.directory) / str(step)
    target = source.with_name(f"{step}.damaged")
    if multihost.is_primary():
      suffix = 1
      while target.exists():  # an earlier damaged copy of the same step
        target, suffix = source.with_name(f"{step}.damaged.{suffix}"), suffix + 1
      source.rename(target)
    multihost.sync(f"checkpointing_move_aside_{step}")
    return str(target)
