"""Fixtures for the gs:// tests: one emulator and one proxy per test session (so per xdist
worker), a fresh bucket per test (fake-gcs-server has no wipe). See tests/gcs/emulator.py."""

import pytest

from tests.gcs import emulator as emulator_lib


@pytest.fixture(scope="session")
def gcs_servers(tmp_path_factory):
  """(Emulator, Proxy) on free ports of 127.0.0.1, stopped at the session's end."""
  emulator, proxy = emulator_lib.start(str(tmp_path_factory.mktemp("gcs")))
  yield emulator, proxy
  proxy.stop()
  emulator.stop()


@pytest.fixture
def gcs(gcs_servers) -> emulator_lib.Bucket:
  """A fresh bucket: `.url(path)` is gs://bucket/path, `.env()` what a subprocess needs."""
  emulator, proxy = gcs_servers
  return emulator_lib.Bucket(emulator.create_bucket(), emulator, proxy)


@pytest.fixture(scope="module")
def gcs_module(gcs_servers) -> emulator_lib.Bucket:
  """One bucket for a module whose tests use their own prefixes."""
  emulator, proxy = gcs_servers
  return emulator_lib.Bucket(emulator.create_bucket(), emulator, proxy)


@pytest.fixture(scope="module")
def gcs_in_process(gcs_module):
  """This process's GCS clients pointed at the emulator for the module's tests: the
  variables of `env()` set (TensorFlow's client and libcurl read them per request,
  tensorstore when it first opens gs://), gcsfs's import-time flag too."""
  with pytest.MonkeyPatch.context() as patch:
    for key, value in gcs_module.env().items():
      patch.setenv(key, value)
    yield gcs_module
