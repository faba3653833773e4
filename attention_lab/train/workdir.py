"""The workdir: its checkpoints, the record of the config it was started with, and a small
run summary. Every path goes through etils.epath, so a workdir may be local or on object
storage (`gs://bucket/run`: orbax writes every host's shards there on a pod).

- Checkpoints: an orbax CheckpointManager over `<workdir>/checkpoints`. Saving is
  asynchronous; a failure (no space, no permission, quota) surfaces in the save call or
  while waiting for the write, and becomes one `errors.SaveError` line naming the step,
  the directory, the cause and what to do. orbax does not finalise the failed step, so the
  latest checkpoint stays the last good one; its partial `<step>.orbax-checkpoint-tmp*`
  folder is removed at once, and any left by a killed run when the next run starts.
- Restoring: the newest step that restores wins. Newer steps that fail to restore are moved
  aside to `<step>.damaged` (one warning line each), but only once an older step has
  restored: when none restores nothing is moved and `errors.RestoreError` says so.
- The config record: `config.json`, written at the first start (process 0). A resume whose
  config differs from it fails with `errors.WorkdirMismatchError` naming the fields, unless
  every differing field is on an allow-list of operational fields (how long, how often,
  where the files are, how many devices), which are logged in one line. It is an
  allow-list on purpose: a field nobody has classified (a new model option) counts as part
  of the run. A record's fields under their old names (`RENAMED_FIELDS`) compare as the new.
- The run summary: `run.json`, the last step written of each TensorBoard tag, the speed of
  every log interval and the final metrics. A resumed run reads it instead of the event
  files, which are written and never read back.
"""

import json
import sys

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from attention_lab.train import errors

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


# Fields a record may lack because it was written before they existed, by leaf name, with
# the value that reproduces those runs: absent from a record, a field holding this value
# is unchanged (configs/schema.py gives every config these defaults).
ADDED_FIELDS = {
    "microbatches": 1, "bn_group_size": 0, "synthetic": False, "image_dir": "",
    "manual_dir": "", "init_from": "", "init_scope": "backbone", "task": "classification",
    "channels": 0, "warmup_epochs": 0.0, "power": 0.9, "grad_clip_norm": 0.0,
    "decay_params": "kernels", "weight_decay": 0.0, "momentum": 0.9, "nesterov": False,
    "b1": 0.9, "b2": 0.999, "eps": 1e-8, "head_lr_multiplier": 1.0,
    "backbone_name": "backbone", "mu_dtype": "", "eval_split": "test", "num_epochs": 0,
    "first_checkpoint_secs": 180, "padding": "auto", "summary_score_threshold": 0.3,
    "workers": 0,
}


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

  def __init__(self, workdir: str, *, max_to_keep: int = 1, save_interval_steps: int = 1,
               read_only: bool = False):
    self.manager = ocp.CheckpointManager(
        resolve(workdir) / "checkpoints",
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
    if _is_primary():
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
    return self.manager.restore(step, args=ocp.args.StandardRestore(target)), step

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
        failures.append((step, errors.reason(e)))
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
    raise errors.RestoreError(
        f"no checkpoint in {self.directory} restores ({shown}); nothing was moved. Start "
        "afresh with a new --workdir, or move the steps aside to start this one again")

  def _move_aside(self, step: int) -> str:
    source = epath.Path(self.directory) / str(step)
    target = source.with_name(f"{step}.damaged")
    if _is_primary():
      suffix = 1
      while target.exists():  # an earlier damaged copy of the same step
        target, suffix = source.with_name(f"{step}.damaged.{suffix}"), suffix + 1
      source.rename(target)
    _sync(f"checkpointing_move_aside_{step}")
    return str(target)


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
  are compared as their new ones, and fields it lacks at their `ADDED_FIELDS` value as
  unchanged."""
  old, new = _renamed(_flatten(recorded)), _flatten(_as_json(config))
  operational, others = {}, {}
  for path in sorted(set(old) | set(new)):
    before, after = old.get(path, "<absent>"), new.get(path, "<absent>")
    added = path.rpartition(".")[2]
    if before == "<absent>" and added in ADDED_FIELDS and after == ADDED_FIELDS[added]:
      continue
    if before != after:
      (operational if _operational(path) else others)[path] = (before, after)
  return operational, others


def check_workdir_config(config: ml_collections.ConfigDict, workdir: str, say) -> None:
  """Writes `workdir/config.json` at the first start (process 0). Later: raises
  `WorkdirMismatchError` naming the fields that differ from it, unless all of them are
  operational; those are reported with one `say(line)` and the record is kept."""
  path = resolve(workdir) / CONFIG_FILE
  exists = path.exists()
  _sync("checkpointing_config_json_seen")  # every process looked before process 0 writes
  if not exists:
    if _is_primary():
      text = config.to_json_best_effort(indent=2, sort_keys=True)
      write_text(path, text + "\n")
    _sync("checkpointing_config_json")
    return
  recorded = json.loads(path.read_text())
  operational, others = config_changes(recorded, config)

  def shown(changes):
    return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())

  if others:
    raise errors.WorkdirMismatchError(
        f"--workdir {workdir} holds a run with another config ({shown(others)}; recorded in "
        f"{path}); use a new --workdir for this config, or the recorded values to resume")
  if operational:
    say(f"Resuming with changed run settings: {shown(operational)}")


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


class RunSummary:
  """`<workdir>/run.json`, kept by process 0: for each TensorBoard tag the last step written
  (`written`), the last log step's train metrics (`train`), each log interval's perf/
  scalars (`perf`: tag -> [[step, value], ...]) and the final metrics (`final`)."""

  FILE = "run.json"

  def __init__(self, workdir: str, start_step: int = 0):
    self.path = resolve(workdir) / self.FILE
    data = json.loads(self.path.read_text()) if self.path.exists() else {}
    self.written: dict[str, int] = data.get("written", {})
    self.train: dict = data.get("train", {})
    # A killed run's intervals after the step this run resumes from are measured again.
    self.perf = {tag: [p for p in points if p[0] <= start_step]
                 for tag, points in data.get("perf", {}).items()}
    self.final: dict[str, float] = data.get("final", {})

  def is_new(self, tag: str, step: int) -> bool:
    return step > self.written.get(tag, -1)

  def wrote(self, step: int, tags) -> None:
    for tag in tags:
      self.written[tag] = max(step, self.written.get(tag, -1))

  def last_step(self, prefix: str) -> int:
    """The last step written of any tag starting with `prefix`; -1 for none."""
    return max((s for t, s in self.written.items() if t.startswith(prefix)), default=-1)

  def add_perf(self, step: int, scalars: dict[str, float]) -> None:
    for tag, value in scalars.items():
      self.perf.setdefault(tag, []).append([step, float(np.float32(value))])

  def perf_medians(self) -> dict[str, float]:
    """The median of each perf/ scalar over the run's log intervals (resumes included)."""
    return {tag: float(np.median([v for _, v in points]))
            for tag, points in self.perf.items() if points}

  def save(self) -> None:
    if _is_primary():
      write_text(self.path, json.dumps(
          {"written": self.written, "train": self.train, "perf": self.perf,
           "final": self.final}, indent=1, sort_keys=True))
