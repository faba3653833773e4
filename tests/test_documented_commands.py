"""Every `python -m attention_lab...` command of README.md, docs/ and the config docstrings runs.

Commands are collected from README.md and docs/*.md (code blocks and inline code, backslash
continuations joined) and from the docstring of every configs/**/*.py. A value
`a|b|c` of a --config override expands to one command per alternative; a bare
placeholder value (DIR, OP, K, ...) is left out; paths of data and weights
that are not on this machine (manual_dir, data_dir, init_from) are dropped.
Each command's flags must be flags of its module and its overrides fields of
its config, parsed by config_flags as the command line parses them. Then, for
the first `attention_lab.main` / `attention_lab.aot` command of each config
file, the config's task is built without data (from its DataInfo: nothing read or downloaded)
and its train step traced abstractly (jax.eval_shape: shapes only, no
compilation), at the documented size. Two run for real, one train step at
`:tiny` size: the README's quick start and Ham Table 8's learned row.
"""

import ast
import glob
import os
import re
import shlex

import jax
import pytest
from absl import flags
from ml_collections import config_flags

from attention_lab import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DROPPED = ("--config.dataset.manual_dir", "--config.dataset.data_dir", "--config.init_from",
           "--config.dataset.image_dir", "--config.eval.inception_path")
MULTI_HOST = ("--coordinator_address", "--num_processes", "--process_id")


def _sources():
  for path in ["README.md", *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
    with open(os.path.join(ROOT, path)) as f:
      yield os.path.relpath(os.path.join(ROOT, path), ROOT), f.read()
  for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)):
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read()))
    if doc:
      yield os.path.relpath(path, ROOT), doc


def _command_texts(text: str):
  """The text of each `python -m attention_lab...` command in `text`."""
  text = text.replace("\\\n", " ")
  for match in re.finditer(r"python -m attention_lab", text):
    start = match.start()
    line_start = text.rfind("\n", 0, start) + 1
    inline = text[line_start:start].count("`") % 2 == 1
    end = text.find("`", start) if inline else text.find("\n", start)
    command = text[start:end if end >= 0 else len(text)].replace("\n", " ")
    command, _, comment = re.split(r"(\s#\s)", command, maxsplit=1) + ["", ""][:0] \
        if re.search(r"\s#\s", command) else (command, "", "")
    # Options a trailing comment offers ("# digit scenes, --config.model.head=a|b") count.
    offered = [o.rstrip(".,;)") for o in re.findall(r"--config\.\S+=\S+", comment)]
    yield " ".join([command.strip().rstrip("&").rstrip('"').strip(), *offered])


def _variants(command: str):
  """(argv without the module, skipped-why) for each expansion of a command's placeholders."""
  tokens = shlex.split(command)
  module, args = tokens[2], tokens[3:]
  if any("<" in t or t.startswith("[--config=") for t in args):
    return module, []  # a template (--config=configs/<file>.py[:preset])
  kept, alternatives = [], []
  for arg in args:
    arg = arg.strip("[]")
    name, _, value = arg.partition("=")
    if name.startswith(DROPPED) or not arg.startswith("--"):
      continue
    if name == "--config":  # configs/x.py[:ROW] or :ROW: the config's default row
      value = re.sub(r"\[?:[A-Z_]+\]?$", "", value)
      if not value:
        return module, []  # `T` = python -m attention_lab.main --workdir=DIR --config=
      arg = f"--config={value}"
    if re.fullmatch(r"[A-Z_]+", value):  # DIR, OP, K, ROW_W...: a placeholder
      if name == "--workdir":
        kept.append("--workdir=WORKDIR")
      continue
    if name.startswith("--config.") and "|" in value:
      alternatives.append([f"{name}={v}" for v in value.split("|")])
      kept.append(None)
    else:
      kept.append(arg)
  expansions = [[]]
  for options in alternatives:
    expansions = [e + [o] for e in expansions for o in options]
  out = []
  for chosen in expansions:
    it = iter(chosen)
    out.append([a if a is not None else next(it) for a in kept])
  return module, out


def documented_commands():
  """pytest params (module, argv, build): `build` for the first command of each config file
  (building and tracing costs seconds; the other commands of a file differ in overrides
  that parsing checks)."""
  commands, seen, built = [], set(), set()
  for where, text in _sources():
    for command in _command_texts(text):
      module, variants = _variants(command)
      for argv in variants:
        key = (module, tuple(argv))
        if key in seen:
          continue
        seen.add(key)
        spec = next((a for a in argv if a.startswith("--config=")), None)
        build = module in ("attention_lab.main", "attention_lab.aot") and spec not in built
        if build:
          built.add(spec)
        commands.append(pytest.param(module, argv, build,
                                     id=f"{where}: {module} {' '.join(argv)}"))
  return commands


COMMANDS = documented_commands()


def _module_flags(module: str) -> set[str]:
  """The flags a module defines (read from its source: importing several of them would
  define --config twice), plus absl's own."""
  path = os.path.join(ROOT, *module.split(".")) + ".py"
  with open(path) as f:
    # flags.DEFINE_x("name", ...) or cli.define_once(flags.DEFINE_x, "name", ...)
    names = set(re.findall(r"DEFINE_\w+(?:\(|,)\s*\"(\w+)\"", f.read()))
  return names | {"verbosity", "v", "helpfull", "help"}


def parsed_config(argv):
  """The config the command line gives (config_flags, as the modules parse it); ConfigError
  for an unknown override, as `cli.parse_flags` reports it."""
  spec = next(a.split("=", 1)[1] for a in argv if a.startswith("--config="))
  overrides = [a for a in argv if a.startswith("--config.")]
  cli._check_overrides(cli.load_config(spec), overrides)  # pylint: disable=protected-access
  argv = ["prog", f"--config={spec}", *overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, sys_argv=argv)
  values(argv)
  return values.config


def test_commands_are_collected():
  modules = {c.values[0] for c in COMMANDS}
  print(f"{len(COMMANDS)} documented commands, {sum(c.values[2] for c in COMMANDS)} built")
  assert {"attention_lab.main", "attention_lab.aot", "attention_lab.data.prepare"} <= modules
  assert len(COMMANDS) >= 40, len(COMMANDS)


@pytest.mark.parametrize("module,argv,build", COMMANDS)
def test_documented_command(module, argv, build):
  known = _module_flags(module)
  for arg in argv:
    name = arg[2:].split("=", 1)[0]
    if not name.startswith("config."):
      assert name in known, f"{module} has no flag --{name}"
  if not any(a.startswith("--config=") for a in argv):
    return
  config = parsed_config(argv)
  if not build:
    return
  from attention_lab import aot
  from attention_lab.train import state as state_lib, tasks
  config.mesh.num_devices = 1
  mesh = state_lib.make_mesh(config, jax.devices()[:1])
  task = tasks.create(config, tasks.Environment(mesh, "", config.batch_size))
  state = jax.eval_shape(task.init_state)
  batch = task.batch_spec()
  new_state, _ = jax.eval_shape(task.train_step, state, batch)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)


def _run_one_step(argv, tmp_path):
  """The command at `:tiny` size for one train step (and its evaluation), in process."""
  from attention_lab.train import trainer as trainer_lib
  argv = [f"{a}:tiny" if a.startswith("--config=") and ":" not in a else a for a in argv]
  config = parsed_config(argv)
  config.num_train_steps = 1
  config.log_every_steps = config.eval_every_steps = config.checkpoint_every_steps = 1
  summary = trainer_lib.Trainer(config, str(tmp_path)).run()
  assert summary and all(v == v for v in summary.values())  # finite, no NaN
  return summary


def test_quick_start_runs(tmp_path):
  quick = next(c.values[1] for c in COMMANDS if c.values[0] == "attention_lab.main"
               and c.values[1][0] == "--config=configs/default.py" and len(c.values[1]) == 2)
  _run_one_step(quick, tmp_path)


def test_ham_table8_learned_row_runs(tmp_path):
  """The documented Table 8 override, on the VOC HamNet config at `:tiny` (digit scenes)."""
  with open(os.path.join(ROOT, "configs", "hamburger", "voc_hamnet.py")) as f:
    doc = ast.get_docstring(ast.parse(f.read()))
  overrides = re.search(r"(--config\.model\.ham_options\.init=learned[^;]*);", doc).group(1)
  argv = ["--config=configs/hamburger/voc_hamnet.py:tiny", *overrides.split()]
  assert "--config.model.ham_options.gradient=bptt" in argv
  _run_one_step(argv, tmp_path)
