"""Shared fixtures for the train tests."""

import pytest

from attention_lab.train.signals import PREEMPTION


@pytest.fixture(autouse=True)
def no_stop_left_over():
  """A test that sends itself SIGTERM leaves the stop decided (train/signals.py: a stop
  stays); the next test starts without it."""
  yield
  PREEMPTION.reset()


@pytest.fixture(scope="session")
def digit_scenes_dir(tmp_path_factory):
  """One TFDS data_dir per test session (per xdist worker) in which `digit_scenes` is
  prepared once: building its 4,500 scenes is the slowest part of a detection test."""
  from attention_lab.data import prepare  # pylint: disable=g-import-not-at-top
  path = str(tmp_path_factory.mktemp("tfds_digit_scenes"))
  prepare.prepare(prepare.dataset_config("digit_scenes", path))
  return path


@pytest.fixture(scope="package", autouse=True)
def compilation_cache(tmp_path_factory):
  """JAX's persistent compilation cache while the tests of tests/train run (one directory
  per xdist worker): they build many Trainers of the same tiny configs, and each program
  after its first compile is read from disk (milliseconds) instead of compiled again."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental.compilation_cache import compilation_cache as jax_cache  # pylint: disable=g-import-not-at-top
  from attention_lab.train import compilation_cache as cache_lib  # pylint: disable=g-import-not-at-top
  names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
           "jax_persistent_cache_min_compile_time_secs")
  saved = {name: getattr(jax.config, name) for name in names}
  cache_lib.enable(str(tmp_path_factory.mktemp("jax_compilation_cache")))
  jax_cache.reset_cache()  # whether the cache is used is decided at the first compile
  yield
  for name, value in saved.items():
    jax.config.update(name, value)
  jax_cache.reset_cache()
