"""The config record: `<workdir>/config.json`, the config a workdir was started with
(written by process 0 at the first start). A resume whose config differs from it fails
with `errors.WorkdirMismatchError` naming the fields, unless every differing field is on
an allow-list of operational fields (how long, how often, where the files are, how many
devices), which are logged in one line. It is an allow-list on purpose: a field nobody has
classified (a new model option) counts as part of the run.

Records outlive the config's schema, so two tables migrate them: a record's fields under
their old names (`RENAMED_FIELDS`) compare as the new, and a field a record lacks
(`ADDED_FIELDS`) compares as the value that reproduces the runs made before it existed.
"""

import json

import ml_collections

from attention_lab.train import console, errors, multihost, workdir as workdir_lib

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


def check_or_write(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes `workdir/config.json` at the first start (process 0). Later: raises
  `WorkdirMismatchError` naming the fields that differ from it, unless all of them are
  operational; those are reported in one console line and the record is kept."""
  path = workdir_lib.resolve(workdir) / CONFIG_FILE
  exists = path.exists()
  multihost.sync("checkpointing_config_json_seen")  # every process looked before process 0 writes
  if not exists:
    if multihost.is_primary():
      text = config.to_json_best_effort(indent=2, sort_keys=True)
      workdir_lib.write_text(path, text + "\n")
    multihost.sync("checkpointing_config_json")
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
    console.print_line(f"Resuming with changed run settings: {shown(operational)}")
