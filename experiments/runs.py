"""A config as its own process, timed: `python -m attention_lab.main --config=SPEC
--workdir=DIR --json=DIR/final.json --config.<key>=<value>...`; its metrics from that JSON
(the final line's and each perf/ scalar's median). Wall time: the process end to end; CPU
time: user + system of all its threads (on a shared machine it grows far less than the wall).
"""

import dataclasses
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Run:
  command: list[str]
  returncode: int
  wall_s: float
  cpu_s: float
  load_before: float
  load_after: float
  final: dict[str, float]
  output: str  # stdout and stderr, joined

  @property
  def error(self) -> str | None:
    """The last non-empty output line of a failed run (None when it succeeded)."""
    lines = [l for l in self.output.splitlines() if l.strip()]
    return None if not self.returncode else lines[-1] if lines else f"exit {self.returncode}"

  def record(self) -> dict:
    """The JSON-ready fields (the output left out)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if k != "output"}


def run_module(module: str, args, *, log: pathlib.Path | None = None,
               final: pathlib.Path | None = None, env: dict | None = None) -> Run:
  """`python -m module *args` from the repository root, with `env` added to this process's
  environment; its output to `log` if given, its metrics read from the JSON file `final` if
  given."""
  command = [sys.executable, "-m", module, *map(str, args)]
  env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
      filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
  load_before, before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  done = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, check=False)
  wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
  if log is not None:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(command) + "\n\n" + done.stdout)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  metrics = json.loads(final.read_text()) if final and final.exists() else {}
  return Run(command, done.returncode, wall, cpu, load_before, os.getloadavg()[0], metrics,
             done.stdout)


def train(spec: str, overrides=(), *, workdir, fresh: bool = True,
          log: pathlib.Path | None = None, env: dict | None = None) -> Run:
  """`attention_lab.main` for `spec` (FILE[:preset]) with `overrides` ('key=value' or
  '--flag=value') and `env` (see run_module); `fresh` empties the workdir first."""
  workdir = pathlib.Path(workdir)
  if fresh:
    shutil.rmtree(workdir, ignore_errors=True)
  final = workdir / "final.json"
  final.unlink(missing_ok=True)
  return run_module("attention_lab.main", [
      f"--config={spec}", f"--workdir={workdir}", f"--json={final}",
      *(o if o.startswith("--") else f"--config.{o}" for o in overrides)], log=log, final=final,
      env=env)


def untrained(spec: str, overrides=(), *, workdir, log: pathlib.Path | None = None) -> Run:
  """The evaluation of the config's model before its first step, in a fresh workdir."""
  return train(spec, [*overrides, "--until_step=0"], workdir=workdir, log=log)


def slug(text: str) -> str:
  """A folder name for a preset or a set of overrides."""
  return re.sub(r"[^\w.]+", "_", text).strip("_")
