"""Runs a config as its own process, times it and reads its `Final:` line.

`train(spec, overrides, workdir)` is `python -m attention_lab.main --config=SPEC
--workdir=WORKDIR --config.<key>=<value>...` in a fresh workdir; `untrained(...)` is the
same config's evaluation before any step (experiments/untrained.py). Each returns a `Run`:
the metrics of the last `Final:` line, the wall time end to end (process start, data,
compilation, training, evaluation), the CPU time of the process and its threads (user +
system; on a shared machine the wall time grows, the CPU time much less) and the
1-minute load average before and after.
"""

import dataclasses
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent


class RunError(RuntimeError):
  """A run that exited with a non-zero status (its last output line in the message)."""


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
    if self.returncode == 0:
      return None
    lines = [l for l in self.output.splitlines() if l.strip()]
    return lines[-1] if lines else f"exit status {self.returncode}"

  def check(self) -> "Run":
    if self.returncode:
      raise RunError(f"{' '.join(self.command[2:])}: exit {self.returncode}: {self.error}")
    return self

  def record(self) -> dict:
    """The JSON-ready fields (the output left out)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if k != "output"}


def parse_final(text: str) -> dict[str, float]:
  """{key: value} of the last `Final: key=value, ...` line of a run's output ({} if none).
  Keys may hold '/', values are floats as `main` prints them (nan and inf included)."""
  lines = [l for l in text.splitlines() if l.startswith("Final:")]
  if not lines:
    return {}
  return {k: float(v) for k, v in re.findall(r"([\w/]+)=([-+\w.]+)", lines[-1][len("Final:"):])}


def run_module(module: str, args, *, log: pathlib.Path | None = None) -> Run:
  """`python -m module *args` from the repository root; its output to `log` if given."""
  command = [sys.executable, "-m", module, *map(str, args)]
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(
      filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
  load_before = os.getloadavg()[0]
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  done = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, check=False)
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if log is not None:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(command) + "\n\n" + done.stdout)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return Run(command, done.returncode, wall, cpu, load_before, os.getloadavg()[0],
             parse_final(done.stdout), done.stdout)


def _args(spec: str, overrides, workdir) -> list[str]:
  return [f"--config={spec}", f"--workdir={workdir}",
          *(o if o.startswith("--") else f"--config.{o}" for o in overrides)]


def train(spec: str, overrides=(), *, workdir, fresh: bool = True,
          log: pathlib.Path | None = None) -> Run:
  """`attention_lab.main` for `spec` (FILE[:preset]) with `overrides` ('key=value' or
  '--flag=value'); `fresh` empties the workdir first."""
  if fresh:
    shutil.rmtree(workdir, ignore_errors=True)
  return run_module("attention_lab.main", _args(spec, overrides, workdir), log=log)


def untrained(spec: str, overrides=(), *, workdir, log: pathlib.Path | None = None) -> Run:
  """The evaluation of the config's model before its first step, in a fresh workdir."""
  shutil.rmtree(workdir, ignore_errors=True)
  return run_module("experiments.untrained", _args(spec, overrides, workdir), log=log)


def slug(text: str) -> str:
  """A folder name for a preset or a set of overrides."""
  return re.sub(r"[^\w.]+", "_", text).strip("_")
