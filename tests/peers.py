"""The peer libraries the `peers` extra installs (torch, torchvision, pytorch-fid,
torch-fidelity), which tests hold our ports to. A test skips where its peer is not
installed and fails where it is installed but does not import, so that a broken install
never reads as a skip."""

import importlib
import importlib.metadata

import pytest


def require(module: str, distribution: str | None = None):
  """`module`, imported; a skip when `distribution` (by default the module's top-level
  package) is not installed."""
  distribution = distribution or module.split(".")[0]
  try:
    importlib.metadata.distribution(distribution)
  except importlib.metadata.PackageNotFoundError:
    pytest.skip(f"{distribution} is not installed (pip install -e '.[peers]')")
  return importlib.import_module(module)
