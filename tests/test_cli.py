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


def _main(tmp_path, *args):
  return subprocess.run(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/default.py:tiny",
       f"--workdir={tmp_path / 'workdir'}", f"--config.dataset.data_dir={tmp_path / 'tfds'}",
       *args],
      cwd=REPO, capture_output=True, text=True, timeout=300)


def test_main_reports_a_bad_model_field_in_one_line_and_debug_shows_the_traceback(tmp_path):
  result = _main(tmp_path, "--config.model.attention=softmx")
  assert result.returncode == 2 and "Traceback" not in result.stdout
  assert result.stderr.startswith("error: model.attention = 'softmx': attention must be one of")
  assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
  debug = _main(tmp_path, "--config.model.attention=softmx", "--debug")
  assert debug.returncode != 0 and "Traceback" in debug.stderr
  typed = _main(tmp_path, "--config.batch_size=abc")
  assert typed.returncode == 2 and typed.stderr.count("\n") == 1
  assert typed.stderr.startswith("error: flag --config.batch_size=abc:")
