"""Faults a real run meets, made as a user meets them, through `python -m attention_lab.main`:
a full disk while saving, a damaged latest checkpoint, a workdir reused with another
config (or batch size), a corrupt dataset file. Each is one line with exit status 2 (or a
warning and a resume), and nothing is lost: the resumed run ends where a run that never
faulted ends.
"""

import errno
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import orbax.checkpoint as ocp
import pytest

from attention_lab.data import pipeline, prepare, sources
from attention_lab.train import checkpointing, config_record, errors
from configs import default
from tests.train.test_system import _env

REPO = pathlib.Path(__file__).parents[2]
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("tfds"))
  prepare.prepare(prepare.dataset_config("digits", path))
  return path


def _start(workdir, data_dir, *args):
  return subprocess.Popen(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={workdir}", f"--config.dataset.data_dir={data_dir}", *args],
      cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process):
  out, err = process.communicate(timeout=600)
  return process.returncode, out, err


def _main(workdir, data_dir, *args):
  return _finish(_start(workdir, data_dir, *args))


def _final(out: str) -> dict[str, str]:
  """The Final: line's values as printed, without the timing."""
  line = [l for l in out.splitlines() if l.startswith("Final: ")][-1]
  values = dict(kv.split("=") for kv in line[len("Final: "):].split(", "))
  values.pop("examples_per_second", None)
  return values


def _lines(err: str) -> list[str]:
  """stderr without TensorFlow's AutoGraph notes (printed while tracing tf.data maps)."""
  lines, skip = [], False
  for line in err.splitlines():
    if "AutoGraph could not transform" in line:
      skip = True
    if not skip and line.strip():
      lines.append(line)
    if "do_not_convert" in line:
      skip = False
  return lines


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
  """A run that never faulted, started at once so that it runs beside the first test's
  own: `reference()` waits for it and gives its workdir (checkpoints at steps 2 and 4) and
  its Final: line."""
  workdir = tmp_path_factory.mktemp("reference") / "w"
  process, result = _start(workdir, data_dir), []

  def finished():
    if not result:
      code, out, err = _finish(process)
      assert code == 0, err[-3000:]
      result.append((workdir, _final(out)))
    return result[0]

  yield finished
  if process.poll() is None:
    process.kill()
    process.communicate()


def _tmpfs(path, size: str) -> bool:
  path.mkdir()
  done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                        capture_output=True, check=False)
  return done.returncode == 0


def test_full_disk_while_saving(tmp_path, data_dir, reference, monkeypatch):
  """A workdir on a 256 KiB filesystem holds step 2's checkpoint, not step 4's too."""
  disk = tmp_path / "disk"
  if not _tmpfs(disk, "256k"):
    _full_disk_stubbed(tmp_path, data_dir, monkeypatch)
    return
  try:
    workdir = disk / "w"
    code, out, err = _main(workdir, data_dir)
    lines = _lines(err)
    assert code == 2, err[-3000:]
    assert lines == [
        f"error: saving checkpoint step 4 in {workdir}/checkpoints failed: No space left on "
        "device (ENOSPC); the latest checkpoint is still step 2. Free space (or raise the "
        "quota) and run the same command again to resume from step 2"], err[-3000:]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["2"]  # no partial step 4

    subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
    code, out, err = _main(workdir, data_dir)
    assert code == 0, err[-3000:]
    assert f"Resumed from {workdir}/checkpoints at step 2" in out
    assert _final(out) == reference()[1]
  finally:
    subprocess.run(["umount", str(disk)], check=False)


def _full_disk_stubbed(tmp_path, data_dir, monkeypatch):
  """Where mounting is not permitted: orbax's save raises ENOSPC from step 4 on."""
  from attention_lab.train.trainer import Trainer  # pylint: disable=g-import-not-at-top
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  real_save = ocp.CheckpointManager.save

  def full_disk_save(self, step, *args, **kwargs):
    if step >= 4:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_save(self, step, *args, **kwargs)

  monkeypatch.setattr(ocp.CheckpointManager, "save", full_disk_save)
  workdir = tmp_path / "w"
  with pytest.raises(errors.SaveError, match=r"step 4 .* No space left on device "
                     r"\(ENOSPC\); the latest checkpoint is still step 2\."):
    Trainer(config, str(workdir)).run()
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2"]


def test_full_disk_writing_the_workdir_files(tmp_path, data_dir, monkeypatch):
  """The parameter table (an OSError without a file name) and TensorBoard's writer (a
  TensorFlow error naming the file in its message) on a full disk: one line each."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from attention_lab.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  config = default.get_config("tiny")
  config.dataset.data_dir = data_dir
  workdir = tmp_path / "w"

  def full_disk_table(state, workdir):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(trainer_lib, "write_table", full_disk_table)
  with pytest.raises(errors.WriteError) as raised:
    trainer_lib.Trainer(config, str(workdir))
  assert str(raised.value) == (
      f"writing a file in {workdir} failed: No space left on device (ENOSPC); no checkpoint "
      "was saved before it. Free space (or raise the quota) and run the same command again "
      "to start again")

  events = workdir / "events.out.tfevents.1"
  events.touch()
  error = tf.errors.ResourceExhaustedError(
      None, None, f"{{{{function_node __wrapped__CreateSummaryFileWriter_device_/job:localhost}}}}"
      f" {events}; No space left on device\n\tCould not initialize events writer.")
  assert str(errors.write_fault(error, str(workdir), 2)) == (
      f"writing {events} failed: No space left on device (ENOSPC); the latest checkpoint is "
      "still step 2. Free space (or raise the quota) and run the same command again to "
      "resume from step 2")
  assert errors.write_fault(OSError(errno.ENOENT, "No such file"), str(workdir), 2) is None
  assert errors.write_fault(ValueError("bad"), str(workdir), 2) is None


def test_damaged_latest_checkpoint_falls_back(tmp_path, data_dir, reference):
  workdir = tmp_path / "w"
  shutil.copytree(reference()[0], workdir)
  data = workdir / "checkpoints" / "4" / "default" / "ocdbt.process_0" / "d"
  largest = max(data.iterdir(), key=lambda p: p.stat().st_size)
  with open(largest, "r+b") as f:
    f.write(np.random.default_rng(0).bytes(100))

  code, out, err = _main(workdir, data_dir)
  assert code == 0, err[-3000:]
  warnings = [l for l in _lines(err) if l.startswith("warning:")]
  assert len(warnings) == 1 and warnings[0].startswith(
      f"warning: checkpoint step 4 in {workdir}/checkpoints does not restore ("), err[-3000:]
  assert warnings[0].endswith(f"moved it to {workdir}/checkpoints/4.damaged, resuming from "
                              "step 2")
  assert len(_lines(err)) == 1, err[-3000:]
  assert f"Resumed from {workdir}/checkpoints at step 2" in out
  assert _final(out) == reference()[1]
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4", "4.damaged"]


def test_no_checkpoint_restores(tmp_path):
  """Every step damaged: one line naming each, and nothing is moved."""
  state = {"w": np.arange(6.0, dtype=np.float32)}
  checkpoints = checkpointing.Checkpoints(str(tmp_path), max_to_keep=3, save_interval_steps=1)
  for step in (1, 2):
    checkpoints.save(step, state)
  checkpoints.wait_until_finished()
  for step in (1, 2):
    for path in (tmp_path / "checkpoints" / str(step)).rglob("*"):
      if path.is_file() and path.parent.name == "d":
        path.write_bytes(b"\0" * path.stat().st_size)
  fresh = checkpointing.Checkpoints(str(tmp_path), max_to_keep=3, save_interval_steps=1)
  with pytest.raises(errors.RestoreError,
                     match=r"^no checkpoint in .* restores \(step 2: .*; step 1: .*\); "
                     r"nothing was moved\.") as raised:
    fresh.restore({"w": np.zeros(6, np.float32)}, warn=pytest.fail)
  assert "\n" not in str(raised.value)
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]


def test_restore_returns_the_newest_step(tmp_path):
  checkpoints = checkpointing.Checkpoints(str(tmp_path), max_to_keep=3, save_interval_steps=1)
  for step in (1, 2):
    checkpoints.save(step, {"w": np.full(3, step, np.float32)})
  checkpoints.wait_until_finished()
  state, step = checkpoints.restore({"w": np.zeros(3, np.float32)}, warn=pytest.fail)
  assert step == 2 and np.array_equal(state["w"], [2, 2, 2])
  assert checkpointing.Checkpoints(str(tmp_path / "empty"), max_to_keep=1,
                                   save_interval_steps=1).restore({}, warn=pytest.fail) is None


def test_a_step_saved_under_an_old_state_key_restores_under_the_new(tmp_path):
  """A step saved when a model's non-parameter variables were its state's "rest" restores
  them as "non_params", here nested as the GAN's models are; a model's own variable named
  "rest" keeps its name. A step saved under the new name restores as it is."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  def state(key, value):
    return {"step": np.asarray(value, np.int32), "generator": {
        "params": nnx.State({"w": np.full(2, value, np.float32)}),
        key: nnx.State({"rest": np.full(3, value, np.float32)})}}

  checkpoints = checkpointing.Checkpoints(str(tmp_path), max_to_keep=3, save_interval_steps=1)
  checkpoints.save(1, state("rest", 1))
  checkpoints.wait_until_finished()
  fresh = checkpointing.Checkpoints(str(tmp_path), max_to_keep=3, save_interval_steps=1)
  for step in (1, 2):
    restored, restored_step = fresh.restore(state("non_params", 0), warn=pytest.fail)
    assert restored_step == step and int(restored["step"]) == step
    assert isinstance(restored["generator"]["non_params"], nnx.State)
    np.testing.assert_array_equal(restored["generator"]["non_params"]["rest"], [step] * 3)
    np.testing.assert_array_equal(restored["generator"]["params"]["w"], [step] * 2)
    fresh.save(2, state("non_params", 2))
    fresh.wait_until_finished()


def test_workdir_reused_with_another_config(tmp_path, data_dir, reference):
  # Two copies of the finished reference run, one per command, run side by side.
  workdir, changed = tmp_path / "w", tmp_path / "changed"
  shutil.copytree(reference()[0], workdir)
  shutil.copytree(reference()[0], changed)
  before = sorted(str(p.relative_to(workdir)) for p in (workdir / "checkpoints").rglob("*"))
  record = (workdir / "config.json").read_text()

  other = _start(workdir, data_dir, "--config.model.attention=hamburger")
  # Operational fields may change: said in one line, and the run is the same run.
  operational = _start(changed, data_dir, "--config.eval_every_steps=2",
                       "--config.keep_checkpoints=3")
  code, out, err = _finish(other)
  assert code == 2
  assert _lines(err) == [
      f"error: --workdir {workdir} holds a run with another config (model.attention "
      f"'softmax' -> 'hamburger'; recorded in {workdir}/config.json); use a new --workdir "
      "for this config, or the recorded values to resume (--debug shows the traceback)"], err
  assert sorted(str(p.relative_to(workdir))
                for p in (workdir / "checkpoints").rglob("*")) == before
  assert (workdir / "config.json").read_text() == record

  code, out, err = _finish(operational)
  assert code == 0, err[-3000:]
  assert ("Resuming with changed run settings: eval_every_steps 4 -> 2, keep_checkpoints "
          "2 -> 3") in out.splitlines()
  assert _final(out) == reference()[1]


def test_config_changes_use_an_allow_list():
  config = default.get_config("tiny")
  recorded = config_record._as_json(config)  # pylint: disable=protected-access
  config.num_train_steps = 8
  config.dataset.data_dir = "/elsewhere"
  config.mesh.num_devices = 2
  config.optimizer.name = "adam"
  config.batch_size = 32
  recorded["model"]["unclassified_option"] = 1  # a field the code no longer has
  operational, others = config_record.config_changes(recorded, config)
  assert operational == {"num_train_steps": (4, 8), "dataset.data_dir": ("", "/elsewhere"),
                         "mesh.num_devices": (-1, 2)}
  assert others == {"batch_size": (16, 32), "optimizer.name": ("sgd", "adam"),
                    "model.unclassified_option": (1, "<absent>")}


def test_workdir_recorded_under_renamed_fields_resumes(tmp_path, capsys):
  """A config.json with the evaluation options' old names (restoration's evaluation.*,
  detection's inference.* and eval_max_batches) is the same run; a changed value is named
  by its new name."""
  from configs.detection import default as detection  # pylint: disable=g-import-not-at-top
  from configs.restoration import default as restoration  # pylint: disable=g-import-not-at-top
  config = restoration.get_config("tiny")
  recorded = config_record._as_json(config)  # pylint: disable=protected-access
  recorded["evaluation"] = recorded.pop("eval")
  (tmp_path / "config.json").write_text(json.dumps(recorded))
  config_record.check_or_write(config, str(tmp_path))
  assert not capsys.readouterr().out  # nothing changed, nothing said
  recorded["evaluation"]["protocol"] = "care"
  assert config_record.config_changes(recorded, config) == (
      {}, {"eval.protocol": ("care", "plain")})

  config = detection.get_config("tiny")
  recorded = config_record._as_json(config)  # pylint: disable=protected-access
  evaluation = recorded.pop("eval")
  recorded["eval_max_batches"] = evaluation.pop("max_batches")
  recorded["inference"] = evaluation
  assert config_record.config_changes(recorded, config) == ({}, {})
  recorded["eval"] = {"max_batches": 7}  # the new name, recorded too, is the one compared
  assert config_record.config_changes(recorded, config) == (
      {}, {"eval.max_batches": (7, config.eval.max_batches)})


def _first_step_reading(indices, config) -> int:
  """The first step of `config`'s train stream whose batch reads one of `indices`."""
  positions = [{"index": np.int64(i)} for i in range(1497)]
  stream = pipeline.resumable_batches(positions, lambda example, _: example, seed=config.seed,
                                      batch_shape=(config.batch_size,))
  step = 0
  while not set(next(stream)["index"].tolist()) & indices:
    step += 1
  return step


def test_corrupt_array_record(tmp_path, data_dir):
  """64 bytes flipped in the middle of the digits train file: the run stops at the first
  step whose batch reads a damaged record, saves the step reached, and says which file;
  prepared again, the same command resumes and ends as a run that never faulted."""
  bad_dir = tmp_path / "tfds"
  shutil.copytree(data_dir, bad_dir)
  version = bad_dir / "digits" / "1.0.0"
  train_file = version / "digits-train.array_record-00000-of-00001"
  data = bytearray(train_file.read_bytes())
  middle = len(data) // 2
  data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
  train_file.write_bytes(bytes(data))
  records, damaged = sources.Records(version, "train"), set()
  for i in range(len(records)):
    try:
      records.raw(i)
    except sources.DamagedRecord:
      damaged.add(i)
  step = _first_step_reading(damaged, default.get_config("tiny"))
  assert damaged and step > 0
  run = [f"--config.num_train_steps={step + 5}", "--config.log_every_steps=20",
         f"--config.eval_every_steps={step + 5}", "--config.checkpoint_every_steps=20"]

  workdir, never_faulted = tmp_path / "w", tmp_path / "reference"
  faulted = _start(workdir, bad_dir, *run)
  clean = _start(never_faulted, data_dir, *run)
  (code, out, err), (clean_code, _, clean_err) = _finish(faulted), _finish(clean)
  assert clean_code == 0, clean_err[-3000:]
  assert code == 2, err[-3000:]
  lines = _lines(err)
  assert len(lines) == 1 and re.fullmatch(
      rf"error: dataset 'digits' is damaged: corrupted record at byte \d+ in {train_file}; "
      rf"saved step {step} \(the step reached\) in {workdir}/checkpoints\. Prepare the "
      rf"dataset again: rm -r {version} and run the same command again \(it is prepared on "
      r"first use\)", lines[0]), err[-3000:]

  shutil.rmtree(version)  # as the line says
  code, out, err = _main(workdir, bad_dir, *run)
  assert code == 0, err[-3000:]
  assert f"Resumed from {workdir}/checkpoints at step {step}" in out
  assert _checkpoint(workdir, step + 5) == _checkpoint(never_faulted, step + 5)


def _checkpoint(workdir, step) -> list[bytes]:
  """Every array of a saved step, as bytes."""
  restored = ocp.PyTreeCheckpointer().restore(
      str(pathlib.Path(workdir, "checkpoints", str(step), "default").absolute()))
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x).tobytes() for x in jax.tree.leaves(restored)]


def test_a_damaged_record_names_its_file_among_several(tmp_path, data_dir):
  """The digits train split re-written as three ArrayRecord shards: a record that fails its
  checksum is a DamagedRecord naming its own shard; a dataset that is not embedded gets
  the prepare command in its one line."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  from attention_lab.train import data_faults  # pylint: disable=g-import-not-at-top
  folder = tmp_path / "digits" / "1.0.0"
  shutil.copytree(pathlib.Path(data_dir) / "digits" / "1.0.0", folder)
  original = sources.Records(folder, "train")
  raw = [original.raw(i) for i in range(len(original))]
  (folder / "digits-train.array_record-00000-of-00001").unlink()
  lengths, paths, start = [500, 500, len(raw) - 1000], [], 0
  for k, length in enumerate(lengths):
    paths.append(folder / f"digits-train.array_record-0000{k}-of-00003")
    writer = array_record_module.ArrayRecordWriter(str(paths[-1]), "group_size:1")
    for record in raw[start:start + length]:
      writer.write(record)
    writer.close()
    start += length
  record = json.loads((folder / "dataset_info.json").read_text())
  train = next(split for split in record["splits"] if split["name"] == "train")
  train["shardLengths"] = [str(n) for n in lengths]
  (folder / "dataset_info.json").write_text(json.dumps(record))
  data = bytearray(paths[1].read_bytes())
  data[len(data) // 2] ^= 0xFF
  paths[1].write_bytes(bytes(data))

  records, damaged = sources.Records(folder, "train"), {}
  assert [records.file_of(i) for i in (0, 499, 500, 1000)] == [
      str(paths[k]) for k in (0, 0, 1, 2)]
  for i in range(len(records)):
    try:
      assert records.raw(i) == raw[i]
    except sources.DamagedRecord as e:
      damaged[i] = e.path
  assert damaged and set(damaged.values()) == {str(paths[1])}
  assert all(500 <= i < 1000 for i in damaged)
  error = sources.DamagedRecord(str(paths[1]), "Corrupted Riegeli/records file: ...; at byte 9")
  assert data_faults.is_data_loss(error) and not data_faults.is_data_loss(ValueError())
  config = ml_collections.ConfigDict({"dataset": {"name": "cifar10", "data_dir": "/d",
                                                  "manual_dir": "", "image_dir": ""}})
  assert str(data_faults.corruption_error(config, error, "saved step 7")) == (
      f"dataset 'cifar10' is damaged: corrupted record at byte 9 in {paths[1]}; saved step 7. "
      f"Prepare the dataset again: rm -r {folder} && python -m attention_lab.data.prepare "
      "--dataset=cifar10 --data_dir=/d")


def test_another_batch_size_on_resume_is_refused(tmp_path):
  """The data position is derived from the step and the global batch: another batch size
  would read other examples, so the recorded config refuses it (in one line)."""
  config = default.get_config("tiny")
  config_record.check_or_write(config, str(tmp_path))
  config.batch_size = 32
  with pytest.raises(errors.WorkdirMismatchError, match=r"batch_size 16 -> 32"):
    config_record.check_or_write(config, str(tmp_path))


def test_workdir_recorded_before_fields_were_added_resumes():
  """A record without the fields added since (micro-batches, BN groups, synthetic data...)
  is the same run while they hold the values older runs had; another value is named."""
  config = default.get_config("tiny")
  recorded = config_record._as_json(config)  # pylint: disable=protected-access
  for name in ("microbatches", "bn_group_size"):
    del recorded[name]
  del recorded["dataset"]["synthetic"], recorded["optimizer"]["mu_dtype"]
  assert config_record.config_changes(recorded, config) == ({}, {})
  config.microbatches = 4
  assert config_record.config_changes(recorded, config) == (
      {}, {"microbatches": ("<absent>", 4)})
