"""JAX's persistent compilation cache, on by default (`config.compilation_cache_dir`).

A restarted run (a preempted job, a second experiment with the same shapes) reads its
compiled programs from disk instead of compiling them again. Where the directory comes
from, first match wins:
  1. JAX's own environment variable JAX_COMPILATION_CACHE_DIR (set to "": off);
  2. `config.compilation_cache_dir`; "" turns the cache off;
  the configs' default is `default_dir()`, a per-user directory.

JAX's documentation warns that whoever can write the cache can make the process run
code (an entry is an executable). A local directory is therefore created mode 0700, and
one that another user owns or can write is refused.
"""

import os
import stat

import jax

ENV = "JAX_COMPILATION_CACHE_DIR"
# Programs that compile faster than this are not written. JAX's default (1 s) leaves out
# most of a CPU run's programs, which compile in well under a second; reading an entry
# takes milliseconds (experiments/results/compilation_cache.md).
MIN_COMPILE_SECS = 0.1


def default_dir() -> str:
  """$XDG_CACHE_HOME/attention_lab/jax_compilation_cache, or under ~/.cache."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "attention_lab", "jax_compilation_cache")


def _is_local(path: str) -> bool:
  return "://" not in path


def _make_private(path: str, field: str) -> None:
  """Creates `path` mode 0700, or checks that an existing one is this user's alone."""
  try:
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.stat(path)
  except OSError as e:
    raise ValueError(f"{field} = {path!r}: cannot be created: {e}") from None
  if not stat.S_ISDIR(info.st_mode):
    raise ValueError(f"{field} = {path!r}: not a directory")
  if hasattr(os, "getuid") and info.st_uid != os.getuid():
    raise ValueError(f"{field} = {path!r}: owned by another user (uid {info.st_uid}); whoever "
                     "can write the cache can make this process run code; use your own "
                     "directory, or '' for no cache")
  if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    raise ValueError(f"{field} = {path!r}: writable by other users (mode "
                     f"{stat.S_IMODE(info.st_mode):o}); whoever can write the cache can make "
                     f"this process run code: chmod 700 it, or use '' for no cache")


def enable(config_dir: str | None) -> str | None:
  """Turns the persistent cache on in `config_dir` (unless JAX_COMPILATION_CACHE_DIR says
  otherwise) before anything compiles; returns the directory, or None when it is off.
  Raises ValueError naming the setting when the directory is not private."""
  if ENV in os.environ:
    path, field = os.environ[ENV], ENV
  else:
    path, field = config_dir, "compilation_cache_dir"
  if not path:
    jax.config.update("jax_enable_compilation_cache", False)
    return None
  if _is_local(path):
    path = os.path.abspath(os.path.expanduser(path))
    _make_private(path, field)
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
  # No size floor: a local directory loses nothing by small files (JAX's 0 lets it pick
  # a floor for remote file systems; that choice stays JAX's).
  return path
