"""Python as on the lent GPU image, where TensorFlow is not installed: a process (and every
process it starts) in which `import tensorflow` / `import tensorflow_datasets` raise
ModuleNotFoundError; or, with `blocked=TENSORFLOW_ONLY`, a host where TFDS is installed
without TensorFlow (it reads prepared ArrayRecord datasets without it).

A `sitecustomize.py` on PYTHONPATH installs a meta-path finder that raises for those names;
child processes inherit PYTHONPATH, so a command's own subprocesses (the accelerator report's
parts, pytest in a subprocess, grain's decoding workers) are blocked too.

  from tests import no_tensorflow
  done = no_tensorflow.run(["-m", "attention_lab.main", ...], cwd=REPO)
"""

import functools
import os
import pathlib
import subprocess
import sys
import tempfile

BLOCKED = ("tensorflow", "tensorflow_datasets")
TENSORFLOW_ONLY = ("tensorflow",)

SITECUSTOMIZE = '''"""Written by tests/no_tensorflow.py: {names} cannot be imported."""
import sys


class _NoTensorFlow:
  """A meta-path finder that reports the blocked packages (and their submodules) missing."""

  blocked = {blocked!r}

  @classmethod
  def find_spec(cls, name, path=None, target=None):
    if name.split(".", 1)[0] in cls.blocked:
      raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by tests/no_tensorflow.py)",
                                name=name)
    return None


sys.meta_path.insert(0, _NoTensorFlow)

# Where a package is absent, importlib.util.find_spec answers None rather than raising
# (etils.epath asks it whether TensorFlow is installed).
import importlib.util  # pylint: disable=g-import-not-at-top,wrong-import-position

_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".", 1)[0] in _NoTensorFlow.blocked else _find_spec(name, package))
'''


def write_sitecustomize(directory, blocked=BLOCKED) -> pathlib.Path:
  """Writes the `sitecustomize.py` blocking `blocked` into `directory`; returns it."""
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  text = SITECUSTOMIZE.format(names=", ".join(blocked), blocked=tuple(blocked))
  (directory / "sitecustomize.py").write_text(text)
  return directory


@functools.cache
def _default_directory(blocked=BLOCKED) -> pathlib.Path:
  return write_sitecustomize(tempfile.mkdtemp(prefix="no_tensorflow_"), blocked)


def environ(directory=None, base=None, blocked=BLOCKED) -> dict:
  """`base` (default os.environ) with the blocking sitecustomize's folder first on PYTHONPATH
  (written into `directory`, or a temporary folder made once per process)."""
  base = dict(os.environ if base is None else base)
  folder = (write_sitecustomize(directory, blocked) if directory
            else _default_directory(tuple(blocked)))
  base["PYTHONPATH"] = os.pathsep.join(filter(None, (str(folder), base.get("PYTHONPATH"))))
  return base


def run(args, *, cwd=None, env=None, timeout=None, directory=None, blocked=BLOCKED
        ) -> subprocess.CompletedProcess:
  """`python *args` (this interpreter) with `blocked` unimportable; output captured as text
  (stdout and stderr apart), never raising on a non-zero exit."""
  return subprocess.run([sys.executable, *map(str, args)], cwd=cwd,
                        env=environ(directory, env, blocked), capture_output=True, text=True,
                        timeout=timeout, check=False)
