"""Operator tests run in float64 so that comparisons with the numpy references are tight."""

import jax
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


@pytest.fixture
def rng():
  return np.random.default_rng(0)
