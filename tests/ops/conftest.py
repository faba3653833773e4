"""Operator tests run in float64 so that comparisons with the numpy references are tight, on
whichever backend JAX picks (`JAX_PLATFORMS=` on a GPU host; tests/conftest.py defaults to the
CPU).

On Ampere / Hopper GPUs XLA's default precision runs float32 matmuls and convolutions in TF32
(10 mantissa bits), so every test here runs at `jax.default_matmul_precision("highest")`:
the float32 results compared with float64 references are then true float32 products.
test_compiled_structure.py reads XLA:CPU's optimised HLO (the copies XLA:CPU inserts), so its
programs are compiled for the CPU device wherever the tests run.
"""

import jax
import numpy as np
import pytest

CPU_ONLY_MODULES = ("test_compiled_structure",)  # tests about XLA:CPU's compiled programs


def pytest_report_header(config):  # pylint: disable=unused-argument
  device = jax.devices()[0]
  return (f"tests/ops: jax {jax.__version__} on {device.platform} ({device.device_kind}), "
          "float32 matmuls at precision 'highest'")


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


@pytest.fixture(autouse=True)
def highest_matmul_precision():
  with jax.default_matmul_precision("highest"):
    yield


@pytest.fixture(autouse=True)
def cpu_for_compiled_structure(request):
  """The CPU device as the default for the modules about XLA:CPU's programs."""
  if request.module.__name__.rsplit(".", 1)[-1] not in CPU_ONLY_MODULES:
    yield
    return
  with jax.default_device(jax.devices("cpu")[0]):
    yield


@pytest.fixture
def rng():
  return np.random.default_rng(0)
