"""Shared fixtures for the train tests."""

import pytest


@pytest.fixture(scope="session")
def digit_scenes_dir(tmp_path_factory):
  """One TFDS data_dir per test session (per xdist worker) in which `digit_scenes` is
  prepared once: building its 4,500 scenes is the slowest part of a detection test."""
  from attention_lab.data import pipeline  # pylint: disable=g-import-not-at-top
  path = str(tmp_path_factory.mktemp("tfds_digit_scenes"))
  pipeline.get_builder("digit_scenes", path)
  return path
