"""The one input recipe (data/pipeline.py): the global stream as a pure function of (seed,
step), each process's rows of it, a resume in constant time, padded evaluation batches;
and the digits classification pipeline on its prepared ArrayRecord files."""

import time

import jax
import numpy as np
import pytest

from attention_lab.data import pipeline, prepare, sources
from attention_lab.train import state, tasks
from configs import default


class Logged(list):
  """Records 0..n−1 as {"x": i}, logging every index read."""

  def __init__(self, n):
    super().__init__({"x": np.int64(i)} for i in range(n))
    self.read = []

  def __getitem__(self, index):
    self.read.append(index)
    return super().__getitem__(index)


def _draw(example, rng):
  return {"x": example["x"], "u": rng.random()}


def _stream(records, batch_shape, start=0, seed=3):
  return pipeline.resumable_batches(records, _draw, seed=seed, batch_shape=batch_shape,
                                    start_step=start)


def _take(stream, n):
  return [next(stream) for _ in range(n)]


def test_every_epoch_is_a_fresh_permutation_and_draws_depend_on_the_position():
  batches = _take(_stream(Logged(12), (4,)), 9)  # 3 epochs
  xs = np.concatenate([b["x"] for b in batches])
  epochs = xs.reshape(3, 12)
  for epoch in epochs:
    assert sorted(epoch) == list(range(12))
  assert len({tuple(e) for e in epochs}) == 3 and list(epochs[0]) != list(range(12))
  draws = np.concatenate([b["u"] for b in batches])
  assert len(set(draws)) == len(draws)  # each position its own draw, every epoch afresh
  other = np.concatenate([b["x"] for b in _take(_stream(Logged(12), (4,), seed=4), 3)])
  assert list(other) != list(epochs[0])


def test_a_resumed_stream_is_the_same_stream_and_reads_nothing_before_it():
  fresh = _take(_stream(Logged(12), (2, 3)), 8)
  assert fresh[0]["x"].shape == (2, 3)
  records = Logged(12)
  resumed = _take(_stream(records, (2, 3), start=1000), 1)[0]
  far = _take(_stream(Logged(12), (2, 3)), 1001)[-1]
  for key in far:
    np.testing.assert_array_equal(resumed[key], far[key])
  # Only the batches prefetched from step 1000 on were read.
  assert len(records.read) <= (pipeline.PREFETCH_BATCHES + pipeline.THREADS + 1) * 6
  again = _stream(Logged(12), (2, 3), start=5)
  for expected in fresh[5:]:
    got = next(again)
    for key in expected:
      np.testing.assert_array_equal(got[key], expected[key])


@pytest.mark.parametrize("batch_shape", [(2,), (2, 3)])
def test_two_processes_read_the_rows_one_process_reads(monkeypatch, batch_shape):
  """Process p takes rows [p·b, (p+1)·b) of each global batch: the order in which
  make_array_from_process_local_data lays them out."""
  one = _take(_stream(Logged(10), (2 * batch_shape[0], *batch_shape[1:])), 7)
  parts = []
  for process in (0, 1):
    monkeypatch.setattr(pipeline, "_process", lambda p=process: (p, 2))
    parts.append(_take(_stream(Logged(10), batch_shape), 7))
  for whole, first, second in zip(one, *parts):
    for key in whole:
      np.testing.assert_array_equal(whole[key], np.concatenate([first[key], second[key]]))


def test_padded_batches_split_the_examples_over_processes_and_mask_the_padding(monkeypatch):
  records = [{"x": np.int32(i), "y": np.int32(i)} for i in range(5)]
  double = lambda ex: {"x": ex["x"] * 2, "y": ex["y"] + 1}
  batches = list(pipeline.padded_batches(records, double, batch_size=2, pad_values={"y": 255}))
  np.testing.assert_array_equal(np.stack([b["x"] for b in batches]), [[0, 2], [4, 6], [8, 0]])
  np.testing.assert_array_equal(np.stack([b["y"] for b in batches]), [[1, 2], [3, 4], [5, 255]])
  np.testing.assert_array_equal(np.stack([b["mask"] for b in batches]),
                                [[True, True], [True, True], [True, False]])
  limited = list(pipeline.padded_batches(records, double, batch_size=2, limit=3))
  assert [b["mask"].sum() for b in limited] == [2, 1]
  shares = []
  for process in (0, 1):  # shares of 3 and 2 examples, two batches each
    monkeypatch.setattr(pipeline, "_process", lambda p=process: (p, 2))
    shares.append(list(pipeline.padded_batches(records, double, batch_size=2)))
  assert [len(s) for s in shares] == [2, 2]
  seen = [int(x) for s in shares for b in s for x in b["x"][b["mask"]]]
  assert seen == [0, 2, 4, 6, 8]


# The digits pipeline, through the task as the loop reads it ---------------------------------

@pytest.fixture(scope="module")
def config(tmp_path_factory):
  config = default.get_config()
  config.dataset.data_dir = str(tmp_path_factory.mktemp("tfds"))
  prepare.prepare(prepare.dataset_config("digits", config.dataset.data_dir))
  return config


def _task(config):
  return tasks.create(config, tasks.Environment(state.make_mesh(config), "", config.batch_size))


def test_digits_are_prepared_as_array_record(config):
  folder = sources.version_dir(config.dataset)
  train, test = sources.Records(folder, "train"), sources.Records(folder, "test")
  assert (len(train), len(test)) == (1497, 300)
  images = np.stack([test[i]["image"] for i in range(300)])
  assert images.shape == (300, 32, 32, 1) and images.dtype == np.uint8 and images.max() > 200
  assert sorted({int(test[i]["label"]) for i in range(300)}) == list(range(10))
  # A small dataset is decoded once per process; its examples are shared, so read-only.
  assert test[7] is test[7] and not test[7]["image"].flags.writeable


def test_batch_5_resumed_is_batch_5_and_a_late_resume_costs_what_step_0_costs(config):
  """The default experiment's stream through `tasks.create(config, env).train_batches`: a
  resume at step 5 gives batch 5, and the first batch at step 20,000 costs no more than
  3× the first at step 0 (CPU seconds of this process, median of 3)."""
  task = _task(config)
  stream = task.train_batches(0)
  batches = _take(stream, 6)
  assert batches[0]["image"].shape == (64, 32, 32, 1) and batches[0]["label"].dtype == np.int32
  resumed = next(task.train_batches(5))
  for key in resumed:
    np.testing.assert_array_equal(resumed[key], batches[5][key])

  def first_batch(step):
    start = time.process_time()
    next(task.train_batches(step))
    return time.process_time() - start

  at_0 = np.median([first_batch(0) for _ in range(3)])
  at_20000 = np.median([first_batch(20_000) for _ in range(3)])
  assert at_20000 < 3 * at_0, (at_0, at_20000)


def test_digits_as_rgb_at_another_size(config):
  """dataset.channels = 3: the grey digit replicated to RGB (the resize unchanged)."""
  rgb = config.copy_and_resolve_references()
  rgb.dataset.channels, rgb.dataset.image_size = 3, 48
  grey = config.copy_and_resolve_references()
  grey.dataset.image_size = 48
  a = next(pipeline.train_iterator(rgb, local_batch_size=4))["image"]
  b = next(pipeline.train_iterator(grey, local_batch_size=4))["image"]
  assert a.shape == (4, 48, 48, 3) and b.shape == (4, 48, 48, 1)
  np.testing.assert_array_equal(a, np.repeat(b, 3, axis=-1))


def test_eval_batches_cover_the_split_once_with_a_mask(config):
  batches = list(pipeline.eval_batches(config, local_batch_size=64))
  assert all(b["image"].shape == (64, 32, 32, 1) for b in batches)
  assert sum(int(b["mask"].sum()) for b in batches) == 300
  assert not batches[-1]["image"][~batches[-1]["mask"]].any()


def test_worker_processes_give_the_same_batches(config):
  with_workers = config.copy_and_resolve_references()
  with_workers.dataset.workers = 2
  expected = _take(pipeline.train_iterator(config, local_batch_size=16, start_step=7), 3)
  stream = pipeline.train_iterator(with_workers, local_batch_size=16, start_step=7)
  try:
    for want in expected:
      got = next(stream)
      for key in want:
        np.testing.assert_array_equal(got[key], want[key])
  finally:
    stream.close()
  assert jax.process_count() == 1
