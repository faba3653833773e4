"""Command-line pieces shared by `attention_lab.main` and `attention_lab.aot`: config files
checked before absl parses them (each executed once), one-line errors (exit status 2)
instead of tracebacks."""

import contextlib
import difflib
import importlib.util
import os
import re
import sys

from absl import flags


class ConfigError(ValueError):
  """A bad command line or configuration: reported as one line, exit status 2."""


class SharedFlag:
  """The value of a flag that several command modules define (see `define_once`)."""

  def __init__(self, name: str):
    self.name = name

  @property
  def value(self):
    return flags.FLAGS[self.name].value

  @property
  def present(self) -> bool:
    return bool(flags.FLAGS[self.name].present)


def define_once(define, name: str, *args, **kwargs) -> SharedFlag:
  """`define(name, *args, **kwargs)` unless a flag `name` exists. The command modules
  (main, aot, predict, data.prepare, ...) each define --config, --debug and the like;
  a process that imports several of them (the tests) shares one flag instead of
  failing with absl's DuplicateFlagError. Run as a command, a module defines its own."""
  if name not in flags.FLAGS:
    define(name, *args, **kwargs)
  return SharedFlag(name)


def fail(message: str, status: int = 2):
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def _config_argument(argv):
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      return arg[len("--config="):]
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def load_config(spec: str, field: str = "--config", root: str | None = None):
  """The config of `FILE[:preset]`, as config_flags builds it: the file's
  get_config(preset), or get_config() without a preset. A relative FILE that is not found
  from the working directory is looked up under `root` (if given). `field` names the
  flag or config field in the one-line ConfigError (a ValueError) for a missing file, a
  file without get_config() or a preset it rejects."""
  file, _, preset = spec.partition(":")
  path = file
  if root and not os.path.exists(file) and os.path.exists(os.path.join(root, file)):
    path = os.path.join(root, file)
  if not os.path.isfile(path):
    raise ConfigError(f"{field} = {file!r}: no such file (expected a configs/**.py file, "
                      "optionally with ':preset')")
  module_spec = importlib.util.spec_from_file_location("_attention_lab_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ConfigError(f"{field} = {file!r}: the file defines no get_config()")
  try:
    return module.get_config(preset) if preset else module.get_config()
  except ValueError as e:
    raise ConfigError(f"{field} = {spec!r}: {e}") from None


def _check_overrides(config, argv) -> None:
  """Every --config.a.b=... names an existing field; otherwise the closest names."""
  for arg in argv:
    if not arg.startswith("--config."):
      continue
    dotted = arg[len("--config."):].split("=", 1)[0]
    node, parents = config, []
    for part in dotted.split("."):
      keys = list(node.keys()) if hasattr(node, "keys") else []
      if part not in keys:
        where = ".".join(parents) or "the config"
        close = difflib.get_close_matches(part, keys, n=1)
        hint = f"; did you mean {'.'.join(parents + close)!r}?" if close else ""
        raise ConfigError(f"--config.{dotted}: unknown field {part!r} in {where}{hint} "
                          f"(fields: {', '.join(sorted(keys))})")
      node, parents = node[part], parents + [part]


class _LoadedConfig(flags.ArgumentParser):
  """The parser of a `--config=FILE[:preset]` flag (config_flags') with the config that
  `parse_flags` loaded and checked for `spec`: parsing `spec` once returns that config, so
  the file is executed once; anything else goes to config_flags' parser `inner`."""

  def __init__(self, inner: flags.ArgumentParser, spec: str, config):
    self.inner, self.spec, self.config = inner, spec, config

  def parse(self, argument):
    if argument != self.spec or self.config is None:
      return self.inner.parse(argument)
    config, self.config = self.config, None
    config.lock()  # as config_flags locks the configs it loads
    return config

  def flag_type(self):
    return self.inner.flag_type()


def parse_flags(argv):
  """absl flag parsing with one-line errors (exit 2) instead of tracebacks. The config
  file of `--config` is executed once: its config is checked for the `--config.x`
  overrides, then becomes the flag's value."""
  debug = "--debug" in argv
  try:
    spec = _config_argument(argv)
    if spec is not None:
      config = load_config(spec)
      _check_overrides(config, argv)
      if "config" in flags.FLAGS and flags.FLAGS["config"].flag_type() == "config object":
        flag = flags.FLAGS["config"]  # config_flags' (a command's own string flag stays)
        flag.parser = _LoadedConfig(getattr(flag.parser, "inner", flag.parser), spec, config)
    return flags.FLAGS(argv)
  except (ConfigError, flags.Error) as e:
    if debug:
      raise
    lines = [line for line in str(e).splitlines() if line.strip()]
    fail(lines[-1] if "Traceback" in str(e) else lines[0])


def config_leaves(config, prefix=""):
  """(dotted path, value) of every leaf of a (nested) config."""
  for key, value in config.items():
    if hasattr(value, "items"):
      yield from config_leaves(value, f"{prefix}{key}.")
    else:
      yield f"{prefix}{key}", value


def name_field(message: str, config) -> str:
  """'attention must be one of ...' → 'model.attention = 'x': must be one of ...' when the
  field is unambiguous in the config."""
  match = re.match(r"(\w+) must be ", message)
  if not match:
    return message
  paths = [(p, v) for p, v in config_leaves(config) if p.rsplit(".", 1)[-1] == match.group(1)]
  if len(paths) != 1 or paths[0][0] == match.group(1):
    return message
  return f"{paths[0][0]} = {paths[0][1]!r}: {message}"


@contextlib.contextmanager
def silenced_stderr(enabled: bool = True):
  """Silences file descriptor 2 (C++ start-up chatter of TensorFlow and libtpu) while
  `enabled`; Python exceptions still surface after it is restored."""
  if not enabled:
    yield
    return
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  try:
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)
