"""One-line configuration errors of `attention_lab.main` (exit status 2, no traceback)."""

import pathlib
import subprocess
import sys

import pytest

from attention_lab import cli
from configs import default

REPO = pathlib.Path(__file__).parents[1]


@pytest.mark.parametrize("argv,message", [
    (["--config=configs/nope.py"], "--config = 'configs/nope.py': no such file"),
    (["--config=configs/default.py:bogus"],
     "--config = 'configs/default.py:bogus': unknown preset 'bogus'"),
    (["--config=configs/default.py", "--config.model.atention=mean"],
     "--config.model.atention: unknown field 'atention' in model; did you mean "
     "'model.attention'?"),
    (["--config=configs/default.py", "--config.batch_sise=8"],
     "--config.batch_sise: unknown field 'batch_sise' in the config; did you mean "
     "'batch_size'?"),
])
def test_bad_command_lines_are_one_line(argv, message, capsys, monkeypatch):
  monkeypatch.chdir(REPO)
  with pytest.raises(SystemExit) as exit_:
    cli.parse_flags(["main", *argv, "--workdir=/tmp/unused"])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_name_field_completes_a_model_message():
  config = default.get_config()
  config.model.attention = "softmx"
  assert cli.name_field("attention must be one of ('softmax',), got 'softmx'", config) == (
      "model.attention = 'softmx': attention must be one of ('softmax',), got 'softmx'")


def _start(folder, *args):
  return subprocess.Popen(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={folder / 'workdir'}", f"--config.dataset.data_dir={folder / 'tfds'}",
       *args],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process) -> subprocess.CompletedProcess:
  out, err = process.communicate(timeout=300)
  return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_main_reports_a_bad_model_field_in_one_line_and_debug_shows_the_traceback(tmp_path):
  # Three independent processes, started together: most of each is Python's start-up.
  started = [_start(tmp_path / "a", "--config.model.attention=softmx"),
             _start(tmp_path / "b", "--config.model.attention=softmx", "--debug"),
             _start(tmp_path / "c", "--config.batch_size=abc")]
  result, debug, typed = map(_finish, started)
  assert result.returncode == 2 and "Traceback" not in result.stdout
  assert result.stderr.startswith("error: model.attention = 'softmx': attention must be one of")
  assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
  assert debug.returncode != 0 and "Traceback" in debug.stderr
  assert typed.returncode == 2 and typed.stderr.count("\n") == 1
  assert typed.stderr.startswith("error: flag --config.batch_size=abc:")


def _counted_config(folder) -> tuple[pathlib.Path, pathlib.Path]:
  """A config file that appends one 'x' to a counter file each time it is executed: the
  default experiment's `:tiny` config on a dataset that does not exist (a run fails fast)."""
  counter, path = folder / "executions", folder / "counted.py"
  path.write_text(
      "from configs import default\n"
      f"with open({str(counter)!r}, 'a') as f:\n"
      "  f.write('x')\n\n\n"
      "def get_config(preset=None):\n"
      "  config = default.get_config('tiny')\n"
      "  config.dataset.name = preset or 'no_such_dataset'\n"
      "  return config\n")
  return path, counter


def test_parse_flags_executes_the_config_file_once_and_applies_overrides(tmp_path):
  path, counter = _counted_config(tmp_path)
  script = ("import sys; from absl import flags; from ml_collections import config_flags; "
            "from attention_lab import cli; "
            "cli.define_once(config_flags.DEFINE_config_file, 'config', None, 'c'); "
            "cli.parse_flags(sys.argv); c = flags.FLAGS.config; "
            "print(c.dataset.name, c.batch_size, c.is_locked)")
  result = subprocess.run([sys.executable, "-c", script, f"--config={path}:digits",
                           "--config.batch_size=3"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ["digits", "3", "True"]
  assert counter.read_text() == "x"


def test_main_executes_the_config_file_once(tmp_path):
  path, counter = _counted_config(tmp_path)
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.main", f"--config={path}",
       f"--workdir={tmp_path / 'workdir'}", "--config.model.width=4"],
      cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 2 and "no_such_dataset" in result.stderr, result.stderr
  assert counter.read_text() == "x"
