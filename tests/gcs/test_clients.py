"""Every GCS client the project's paths go through, against the local emulator: etils.epath
(with TensorFlow: tf.io.gfile; without: gcsfs), orbax (tensorstore for the arrays, epath for
the folders), jax's persistent compilation cache, tf.io.gfile and clu's TensorBoard writer,
a TFDS data_dir, jax.profiler. What is written is checked by listing the bucket on the
emulator itself, not through the client that wrote it."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.gcs import epath_checks, tfevents

REPO = pathlib.Path(__file__).parents[2]


def _env(bucket, **extra) -> dict[str, str]:
  """A subprocess's environment: this one's, the emulator's variables, `extra`."""
  return {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", **bucket.env(),
          **extra}


def _check_epath_objects(bucket, prefix):
  """The objects epath_checks.check leaves, read on the emulator itself."""
  files = [n for n in bucket.names(prefix) if not n.endswith("/")]  # less folder markers
  assert files == [f"{prefix}/a/z.bin", f"{prefix}/c/x.json", f"{prefix}/w.txt"]
  assert json.loads(bucket.read(f"{prefix}/c/x.json")) == {"step": 3}
  assert bucket.read(f"{prefix}/a/z.bin") == epath_checks.PAYLOAD


def test_epath_with_tensorflow_goes_through_tf_io_gfile(gcs_in_process):
  """Where TensorFlow is installed (this project's requirements) epath serves gs:// with
  tf.io.gfile, whose requests reach the emulator through the proxy."""
  assert epath_checks.check(gcs_in_process.url("epath_tf")) == "_TfBackend"
  _check_epath_objects(gcs_in_process, "epath_tf")


def test_epath_without_tensorflow_goes_through_gcsfs(gcs):
  """EPATH_USE_TF=false (as on a host without TensorFlow): gcsfs, told by
  STORAGE_EMULATOR_HOST where the server is."""
  done = subprocess.run([sys.executable, "-m", "tests.gcs.epath_checks", gcs.url("epath_fs")],
                        cwd=REPO, env=_env(gcs, EPATH_USE_TF="false"), capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  assert json.loads(done.stdout) == {"backend": "_FileSystemSpecBackend", "tensorflow": False}
  _check_epath_objects(gcs, "epath_fs")


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "epath"])
def test_orbax_checkpoint_manager(gcs_in_process, as_path):
  """Save, keep the newest two, latest_step, restore, from a second manager: arrays through
  tensorstore (TENSORSTORE_GCS_HTTP_URL), folders and markers through epath. The root as a
  gs:// string or as an epath.Path."""
  import jax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from etils import epath  # pylint: disable=g-import-not-at-top
  prefix = "orbax_epath" if as_path else "orbax_str"
  url = gcs_in_process.url(prefix)
  root = epath.Path(url) if as_path else url
  state = {"w": np.arange(1000, dtype=np.float32), "b": {"c": np.ones((3, 5))}}
  manager = ocp.CheckpointManager(root, options=ocp.CheckpointManagerOptions(max_to_keep=2))
  for step in (1, 2, 3):
    manager.save(step, args=ocp.args.StandardSave(jax.tree.map(lambda x, s=step: x * s, state)))
  manager.wait_until_finished()
  manager.close()
  names = gcs_in_process.names(f"{prefix}/")
  assert {n.split("/")[1] for n in names} - {""} == {"2", "3"}  # step 1 deleted on the bucket
  assert f"{prefix}/3/commit_success.txt" in names

  fresh = ocp.CheckpointManager(root)
  assert fresh.latest_step() == 3 and fresh.all_steps() == [2, 3]
  restored = fresh.restore(3, args=ocp.args.StandardRestore(state))
  np.testing.assert_array_equal(restored["w"], state["w"] * 3)
  np.testing.assert_array_equal(restored["b"]["c"], state["b"]["c"] * 3)
  fresh.close()


CACHE_PROGRAM = """
import sys, jax, jax.numpy as jnp
from jax import monitoring
events = []
monitoring.register_event_listener(lambda name, **_: events.append(name))
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
print(float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((7, 5))).sum()))
print(events.count("/jax/compilation_cache/cache_hits"),
      events.count("/jax/compilation_cache/cache_misses"))
"""


def test_jax_compilation_cache_hit_in_a_second_process(gcs):
  """jax's persistent cache on gs:// (through epath; here gcsfs, EPATH_USE_TF=false, as on a
  host without TensorFlow; the CLI test covers tf.io.gfile): the first process writes its
  entry, the second reads it."""
  url = gcs.url("jax_cache")
  env = _env(gcs, EPATH_USE_TF="false")
  runs = []
  for _ in range(2):
    done = subprocess.run([sys.executable, "-c", CACHE_PROGRAM, url], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    runs.append(done.stdout.split())
  (value0, hits0, misses0), (value1, hits1, misses1) = runs
  assert value0 == value1
  entries = [n for n in gcs.names("jax_cache/") if not n.endswith("/")]
  assert int(hits0) == 0 and int(misses0) == len(entries) >= 1  # each program written
  assert (int(hits1), int(misses1)) == (len(entries), 0)  # and read by the second process


def test_clu_writer_and_tf_io_gfile(gcs_in_process):
  """clu's TensorBoard writer (tf.summary) writes its event file through TensorFlow's GCS
  client; tf.io.gfile finds it and TensorFlow reads it back; the bytes on the emulator
  parse as the same events."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from clu import metric_writers  # pylint: disable=g-import-not-at-top
  url = gcs_in_process.url("tensorboard")
  writer = metric_writers.create_default_writer(url, just_logging=False)
  for step in (1, 2, 3):
    writer.write_scalars(step, {"train_loss": 1.0 / step})
  writer.close()
  (path,) = tf.io.gfile.glob(f"{url}/events.out.tfevents.*")

  expected = [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
  read = [(e.step, float(tf.make_ndarray(v.tensor)))
          for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value]
  np.testing.assert_allclose(read, expected, rtol=1e-6)
  stored = gcs_in_process.read(path[len(gcs_in_process.url()) + 1:])
  np.testing.assert_allclose(tfevents.scalars([stored])["train_loss"], expected, rtol=1e-6)


def test_tfds_digits_prepared_and_read_on_gs(gcs_in_process):
  """The digits builder prepared in a gs:// data_dir (TFDS writes through tf.io.gfile) and
  read back with tf.data from there: the test split's 300 examples, as generated."""
  from attention_lab.data.builders import digits  # pylint: disable=g-import-not-at-top
  data_dir = gcs_in_process.url("tfds")
  builder = digits.Digits(data_dir=data_dir)
  builder.download_and_prepare()
  assert any(n.startswith("tfds/digits/1.0.0/digits-test.tfrecord")
             for n in gcs_in_process.names("tfds/"))
  reread = digits.Digits(data_dir=data_dir)
  assert reread.is_prepared()
  read = sorted((int(e["label"]), e["image"].tobytes())
                for e in reread.as_dataset(split="test").as_numpy_iterator())
  generated = sorted((e["label"], e["image"].tobytes())
                     for _, e in builder._generate_examples(  # pylint: disable=protected-access
                         len(digits._examples()[0]) - digits.NUM_TEST, None))  # pylint: disable=protected-access
  assert len(read) == digits.NUM_TEST and read == generated


def test_jax_profiler_trace_on_gs(gcs_in_process):
  """jax.profiler writes its trace through jaxlib's own GCS client (the proxy)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  jax.profiler.start_trace(gcs_in_process.url("profile"))
  jax.jit(lambda x: x @ x)(jnp.ones((16, 16))).block_until_ready()
  jax.profiler.stop_trace()
  traces = [n for n in gcs_in_process.names("profile/") if n.endswith(".xplane.pb")]
  assert len(traces) == 1 and traces[0].startswith("profile/plugins/profile/")
  assert len(gcs_in_process.read(traces[0])) > 100
