"""The commands with every path on gs://, against the local emulator, as a user on a TPU
pod runs them: `python -m attention_lab.main` with its workdir, data_dir and compilation
cache in a bucket, SIGTERM and resume, two processes sharing one workdir, `predict`
from and to a bucket, and the storage going away during a save.

Each command runs in a fresh folder (tmp_path) as its working directory, so a gs:// path
taken for a local one would show up there as a folder named `gs:`. The subprocesses see
one CPU device and the emulator's variables (tests/gcs/emulator.py: `Bucket.env`), with
etils.epath on tf.io.gfile, as wherever TensorFlow is installed. What a run leaves is
checked on the emulator itself."""

import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.gcs import emulator as emulator_lib
from tests.gcs import tfevents

REPO = pathlib.Path(__file__).parents[2]
TINY = f"--config={REPO / 'configs' / 'default.py'}:tiny"
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """A local TFDS data_dir with `digits` prepared once, before processes race for it."""
  from attention_lab.data import prepare  # pylint: disable=g-import-not-at-top
  path = str(tmp_path_factory.mktemp("tfds"))
  prepare.prepare(prepare.dataset_config("digits", path))
  return path


def _env(bucket: emulator_lib.Bucket | None, devices: int = 1, **extra) -> dict[str, str]:
  """This environment with `devices` CPU devices, the repository importable from any
  folder, jax's cache where the config says, and `bucket`'s emulator variables."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env.update(PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={devices}".strip())
  env.update(bucket.env() if bucket else {}, **extra)
  return env


_STARTED: list[subprocess.Popen] = []  # the current test's commands


@pytest.fixture(autouse=True)
def _stop_commands_left_running():
  """A test that fails while its commands run kills them."""
  yield
  while _STARTED:
    process = _STARTED.pop()
    if process.poll() is None:
      process.kill()
      process.communicate()


def _start(module: str, cwd, env, *args, owned: bool = True) -> subprocess.Popen:
  """`python -m module args` in `cwd`; killed after the test unless not `owned`."""
  os.makedirs(cwd, exist_ok=True)
  process = subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if owned:
    _STARTED.append(process)
  return process


def _main(cwd, env, *args, owned: bool = True) -> subprocess.Popen:
  return _start("attention_lab.main", cwd, env, TINY, *args, owned=owned)


def _finish(process: subprocess.Popen, timeout: float = TIMEOUT_S) -> tuple[int, str, str]:
  try:
    out, err = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    out, err = process.communicate()
    pytest.fail(f"no end in {timeout} s: {out[-2000:]} {err[-3000:]}")
  return process.returncode, out, err


def _succeeds(process: subprocess.Popen) -> str:
  code, out, err = _finish(process)
  assert code == 0, err[-3000:]
  return out


def _final(out: str) -> dict[str, str]:
  """The Final: line's values as printed, less the timing."""
  line = [l for l in out.splitlines() if l.startswith("Final: ")][-1]
  values = dict(kv.split("=") for kv in line[len("Final: "):].split(", "))
  values.pop("examples_per_second", None)
  return values


# tensorstore's note that it takes the test's token (GOOGLE_AUTH_TOKEN_FOR_TESTING), and
# absl's preamble to it: the test's credentials, not the program's output.
TEST_CREDENTIAL_NOTE = re.compile(
    r"^(I\d{4} [\d:.]+ +\d+ google_auth_provider\.cc:\d+\] Using GOOGLE_AUTH_TOKEN_FOR_TESTING"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR)$")


def _lines(err: str) -> list[str]:
  """stderr less TensorFlow's AutoGraph notes and the test credential's note."""
  lines, skip = [], False
  for line in err.splitlines():
    if "AutoGraph could not transform" in line:
      skip = True
    if not skip and line.strip() and not TEST_CREDENTIAL_NOTE.match(line):
      lines.append(line)
    if "do_not_convert" in line:
      skip = False
  return lines


def _no_local_gs_folder(*folders) -> None:
  for folder in folders:
    assert not (pathlib.Path(folder) / "gs:").exists(), f"a local gs: folder in {folder}"


def _committed(bucket: emulator_lib.Bucket, checkpoints: str) -> list[int]:
  """The steps under `checkpoints` that orbax finished: their own commit marker written
  (the last object of a save; each item's marker comes before it)."""
  marker = re.compile(re.escape(checkpoints) + r"/(\d+)/commit_success\.txt")
  return sorted(int(m.group(1)) for n in bucket.names(checkpoints + "/")
                if (m := marker.fullmatch(n)))


def _scalars(bucket: emulator_lib.Bucket, workdir: str) -> dict[str, list[tuple[int, float]]]:
  """The TensorBoard points of the workdir's event files, read on the emulator."""
  files = [n for n in bucket.names(workdir + "/")
           if re.fullmatch(re.escape(workdir) + r"/events\.out\.tfevents\.[^/]+", n)]
  return tfevents.scalars([bucket.read(n) for n in files])


def _arrays(path: str, bucket: emulator_lib.Bucket, monkeypatch) -> list[bytes]:
  """Every array of the checkpoint at `path` (local, or gs:// on `bucket`'s emulator), as
  bytes, read whole as numpy arrays (whatever devices and processes wrote them)."""
  import jax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  for key, value in bucket.env().items():
    monkeypatch.setenv(key, value)
  checkpointer = ocp.PyTreeCheckpointer()
  as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray),
                          checkpointer.metadata(path).item_metadata)
  restored = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))
  return [np.asarray(x).tobytes() for x in jax.tree.leaves(restored)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
  """The tiny run on local disk, started at once so that it runs beside the first test's
  own; `reference()` waits for it and gives its Final: values."""
  env = _env(None)
  folder = tmp_path_factory.mktemp("reference")
  process = _main(folder, env, f"--workdir={folder / 'w'}",
                  f"--config.dataset.data_dir={data_dir}", owned=False)  # the module's
  result = []

  def finished():
    if not result:
      result.append(_final(_succeeds(process)))
    return result[0]

  yield finished
  if process.poll() is None:
    process.kill()
    process.communicate()


def test_run_with_its_workdir_on_gs_then_resume(gcs, data_dir, tmp_path, reference):
  """Exit 0 with the Final: line of the same run on local disk; checkpoints, config record,
  parameter table, TensorBoard events, the profile and --json in the bucket, nothing
  local; a second command with more steps resumes from the bucket."""
  env, workdir = _env(gcs), gcs.url("run")
  out = _succeeds(_main(tmp_path, env, f"--workdir={workdir}",
                        f"--config.dataset.data_dir={data_dir}", "--config.profile_steps=(1,3)",
                        f"--json={gcs.url('final.json')}"))
  assert _final(out) == reference()
  _no_local_gs_folder(tmp_path)
  names = gcs.names("run/")
  assert _committed(gcs, "run/checkpoints") == [2, 4]
  assert "run/config.json" in names and "run/parameters.txt" in names
  assert b'"num_train_steps": 4' in gcs.read("run/config.json")
  assert any(re.fullmatch(r"run/events\.out\.tfevents\.[^/]+", n) for n in names), names
  assert any(re.fullmatch(r"run/profile/plugins/profile/[^/]+/[^/]+\.xplane\.pb", n)
             for n in names), names
  final = json.loads(gcs.read("final.json"))
  assert {k: f"{v:.4f}" for k, v in final.items() if k in reference()} == reference()

  out = _succeeds(_main(tmp_path, env, f"--workdir={workdir}",
                        f"--config.dataset.data_dir={data_dir}", "--config.num_train_steps=6"))
  assert f"Resumed from {workdir}/checkpoints at step 4" in out
  assert re.search(r"^step 6/6 ", out, re.M), out
  assert _committed(gcs, "run/checkpoints") == [4, 6]  # keep_checkpoints = 2
  _no_local_gs_folder(tmp_path)


def _until_step(process: subprocess.Popen, step: int) -> list[str]:
  """Reads the run's stdout up to its progress line `step`; the lines read."""
  seen, deadline = [], time.monotonic() + TIMEOUT_S
  while time.monotonic() < deadline:
    line = process.stdout.readline()
    if not line:
      break
    seen.append(line)
    if line.startswith(f"step {step}/"):
      break
  return seen


def test_sigkill_sigterm_then_bit_exact_resume(gcs, data_dir, tmp_path, monkeypatch):
  """SIGKILL at step 6 of 12 (past step 4's checkpoint), the same command again, SIGTERM at
  its step 9: it saves the step reached in the bucket and exits 0; the same command resumes
  from it and ends with the same arrays, bit for bit, the same Final: line and the same
  TensorBoard points as a run that was never interrupted, none written twice (the killed
  run's points after its checkpoint are in the bucket: the resumed runs must see them)."""
  env = _env(gcs)
  args = [f"--config.dataset.data_dir={data_dir}", "--config.num_train_steps=12",
          "--config.log_every_steps=1", "--config.eval_every_steps=12",
          "--config.checkpoint_every_steps=4", "--config.keep_checkpoints=5"]
  straight = _main(tmp_path / "a", env, f"--workdir={gcs.url('straight')}", *args)
  workdir = gcs.url("interrupted")
  killed = _main(tmp_path / "b", env, f"--workdir={workdir}", *args)
  assert _until_step(killed, 6)[-1].startswith("step 6/")
  killed.kill()
  killed.communicate()

  preempted = _main(tmp_path / "b", env, f"--workdir={workdir}", *args)
  seen = _until_step(preempted, 9)
  preempted.send_signal(signal.SIGTERM)
  code, out, err = _finish(preempted)
  out = "".join(seen) + out
  assert code == 0, err[-3000:]
  saved = re.search(r"SIGTERM: saved step (\d+)", out)
  assert saved, out
  step = int(saved.group(1))
  assert 9 <= step < 12 and step in _committed(gcs, "interrupted/checkpoints")

  out = _succeeds(_main(tmp_path / "b", env, f"--workdir={workdir}", *args))
  assert f"Resumed from {workdir}/checkpoints at step {step}" in out
  expected = _succeeds(straight)
  assert _final(out) == _final(expected)
  assert _arrays(f"{workdir}/checkpoints/12/default", gcs, monkeypatch) == _arrays(
      f"{gcs.url('straight')}/checkpoints/12/default", gcs, monkeypatch)
  interrupted, uninterrupted = _scalars(gcs, "interrupted"), _scalars(gcs, "straight")
  for tag in ("train_loss", "eval_loss"):
    steps = [s for s, _ in interrupted[tag]]
    assert len(steps) == len(set(steps)), f"{tag} written twice: {steps}"
    np.testing.assert_allclose(sorted(interrupted[tag]), sorted(uninterrupted[tag]),
                               rtol=0, atol=1e-6)
  _no_local_gs_folder(tmp_path / "a", tmp_path / "b")


def test_two_processes_share_one_gs_workdir(gcs, data_dir, tmp_path, monkeypatch):
  """Two processes on 127.0.0.1 (one CPU device each) write one gs:// workdir: each its
  own shards of every checkpoint, one config record and one TensorBoard file (process
  0's); the run equals the same two-process command on local disk, bit for bit."""
  import socket  # pylint: disable=g-import-not-at-top

  def pair(workdir, cwd):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      port = s.getsockname()[1]
    return [_main(cwd, env, f"--workdir={workdir}", f"--config.dataset.data_dir={data_dir}",
                  "--config.model.dropout=0.0", f"--coordinator_address=127.0.0.1:{port}",
                  "--num_processes=2", f"--process_id={i}") for i in range(2)]

  env = _env(gcs)
  local = tmp_path / "local"
  on_gs, on_disk = pair(gcs.url("run"), tmp_path / "gs"), pair(local, tmp_path / "disk")
  outs = [_succeeds(p) for p in on_gs]
  local_outs = [_succeeds(p) for p in on_disk]
  assert "2 process(es), 2 cpu device(s)" in outs[0] and "Final" not in outs[1]
  assert _final(outs[0]) == _final(local_outs[0])
  assert _committed(gcs, "run/checkpoints") == [2, 4]
  names = gcs.names("run/checkpoints/4/")
  for process in (0, 1):
    assert any(f"/ocdbt.process_{process}/" in n for n in names), names
  assert len([n for n in gcs.names("run/") if "events.out.tfevents" in n]) == 1
  assert _arrays(f"{gcs.url('run')}/checkpoints/4/default", gcs, monkeypatch) == _arrays(
      str(local / "checkpoints" / "4" / "default"), gcs, monkeypatch)
  _no_local_gs_folder(tmp_path / "gs")


def test_predict_from_a_gs_workdir_to_a_gs_out(gcs, data_dir, tmp_path):
  """`predict` restores a GAN's checkpoint from the bucket and writes its samples there:
  PNG files of the model's size, one folder per class."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  env = _env(gcs)
  gan = [f"--config={REPO / 'configs' / 'gan' / 'default.py'}:tiny",
         "--config.eval.features=none", f"--config.dataset.data_dir={data_dir}"]
  workdir, out_dir = gcs.url("gan"), gcs.url("samples")
  _succeeds(_start("attention_lab.main", tmp_path, env, *gan, f"--workdir={workdir}",
                   "--config.num_train_steps=1"))
  assert _committed(gcs, "gan/checkpoints") == [1]
  out = _succeeds(_start("attention_lab.predict", tmp_path, env, *gan, f"--workdir={workdir}",
                         f"--out={out_dir}", "--num_samples=12"))
  assert any(re.fullmatch(r"gan/images/[^/]+\.png", n) for n in gcs.names("gan/"))
  assert "wrote 12 samples" in out, out
  pngs = [n for n in gcs.names("samples/") if n.endswith(".png")]
  assert len(pngs) == 12 and {n.split("/")[1] for n in pngs} == {f"{c:04d}" for c in range(10)}
  with Image.open(io.BytesIO(gcs.read(pngs[0]))) as image:
    assert image.mode == "RGB" and image.size == (32, 32)
  _no_local_gs_folder(tmp_path)


def test_run_reads_a_gs_data_dir(gcs, tmp_path, reference):
  """digits prepared into a gs:// data_dir by `attention_lab.data.prepare` (written locally
  as ArrayRecord, then uploaded); a run reads it through one local copy (ArrayRecord is
  read by local file readers) and ends as the run on the local data_dir; the bucket is
  read, not written."""
  home = tmp_path / "home"  # the local copy goes under ~/.cache
  env = _env(gcs, HOME=str(home))
  data_dir = gcs.url("tfds")
  out = _succeeds(_start("attention_lab.data.prepare", tmp_path, env, "--dataset=digits",
                         f"--data_dir={data_dir}"))
  assert out.splitlines()[-1].startswith(f"digits: prepared in {data_dir}/digits/1.0.0 ("), out
  prepared = gcs.names("tfds/")
  assert "tfds/digits/1.0.0/digits-train.array_record-00000-of-00001" in prepared
  out = _succeeds(_main(tmp_path, env, f"--workdir={tmp_path / 'w'}",
                        f"--config.dataset.data_dir={data_dir}"))
  assert _final(out) == reference()
  assert gcs.names("tfds/") == prepared  # read, not prepared again
  copy = home / ".cache" / "attention_lab" / "datasets" / "gs" / gcs.url()[len("gs://"):] \
      / "tfds" / "digits" / "1.0.0"
  assert (copy / "digits-train.array_record-00000-of-00001").is_file()
  _no_local_gs_folder(tmp_path)


def test_compilation_cache_on_gs_hit_in_a_second_run(gcs, data_dir, tmp_path):
  """config.compilation_cache_dir on gs://: the first run writes its programs there, the
  second reads every one of them (jax says so on stderr with JAX_LOG_COMPILES). Which
  programs are written depends on their compile time (compilation_cache.MIN_COMPILE_SECS),
  so the second run may add one the first compiled faster."""
  env = _env(gcs, JAX_LOG_COMPILES="1")
  args = [f"--config.dataset.data_dir={data_dir}",
          f"--config.compilation_cache_dir={gcs.url('cache')}"]
  code, _, err = _finish(_main(tmp_path, env, f"--workdir={tmp_path / 'first'}", *args))
  assert code == 0, err[-3000:]
  entries = [n for n in gcs.names("cache/") if not n.endswith("/")]
  assert entries and "Persistent compilation cache hit" not in err
  code, _, err = _finish(_main(tmp_path, env, f"--workdir={tmp_path / 'second'}", *args))
  assert code == 0, err[-3000:]
  written = {name[len("cache/"):].rsplit("-", 2)[0] for name in entries}  # jit_<name>-<key>-cache
  read = set(re.findall(r"Persistent compilation cache hit for '([^']+)'", err))
  assert "jit_train_step" in written and written <= read, (written, read)
  assert set(entries) <= {n for n in gcs.names("cache/") if not n.endswith("/")}
  _no_local_gs_folder(tmp_path)


# TensorFlow's and jaxlib's GCS clients retry a failed request 10 times, up to 32 s apart
# (over 3 minutes in all); here 3 times, at most 0.5 s apart.
QUICK_RETRIES = {"GCS_RETRY_CONFIG_MAX_RETRIES": "3",
                 "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "100000",
                 "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "500000"}
# The faulted run reports and exits within this many seconds of the storage going away,
# not after tensorstore's own retries of its abandoned writes (32, up to 32 s apart).
FAULT_EXIT_S = 60


def test_storage_gone_during_a_save_then_back(data_dir, tmp_path):
  """The emulator stopped after step 12, step 10's checkpoint committed, before step 20's: one
  line on stderr naming step 10 as the latest, exit 2; step 10 still the newest in the
  bucket once the emulator is back (same port, its files kept); the same command resumes
  from it and ends as the run on local disk that never faulted."""
  emulator = emulator_lib.Emulator(str(tmp_path), root=str(tmp_path / "buckets")).start()
  proxy = emulator_lib.Proxy(emulator.url, str(tmp_path)).start()
  try:
    bucket = emulator_lib.Bucket(emulator.create_bucket(), emulator, proxy)
    env = _env(bucket, **QUICK_RETRIES)
    workdir = bucket.url("run")
    args = [f"--config.dataset.data_dir={data_dir}", "--config.num_train_steps=30",
            "--config.log_every_steps=1", "--config.eval_every_steps=30",
            "--config.checkpoint_every_steps=10", "--config.keep_checkpoints=5"]
    straight = _main(tmp_path / "local", env, f"--workdir={tmp_path / 'local' / 'w'}", *args)
    faulted = _main(tmp_path / "run", env, f"--workdir={workdir}", *args)
    seen, deadline = [], time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:  # until step 12 or later, with step 10 committed
      line = faulted.stdout.readline()
      if not line:
        break
      seen.append(line)
      step = re.match(r"step (\d+)/", line)
      if step and int(step.group(1)) >= 12 and _committed(bucket, "run/checkpoints") == [10]:
        emulator.stop()  # steps 13-20 to go: no save is under way
        break
    code, out, err = _finish(faulted, timeout=FAULT_EXIT_S)
    out = "".join(seen) + out
    assert emulator.process.poll() is not None, f"step 10 never committed: {out}"
    emulator.start()
    assert _committed(bucket, "run/checkpoints") == [10]
    assert code == 2, err[-3000:]
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    assert "the latest checkpoint is still step 10" in lines[0], lines[0]
    assert "Final:" not in out

    out = _succeeds(_main(tmp_path / "run", env, f"--workdir={workdir}", *args))
    assert f"Resumed from {workdir}/checkpoints at step 10" in out
    assert _final(out) == _final(_succeeds(straight))
    _no_local_gs_folder(tmp_path / "run")
  finally:
    proxy.stop()
    emulator.stop()
