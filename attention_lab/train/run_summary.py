"""The run summary: `<workdir>/run.json`, kept by process 0. A resumed run reads it instead
of the TensorBoard event files, which are written and never read back."""

import json

import numpy as np

from attention_lab.train import multihost, workdir as workdir_lib


class RunSummary:
  """For each TensorBoard tag the last step written (`written`), the last log step's train
  metrics (`train`), each log interval's perf/ scalars (`perf`: tag -> [[step, value],
  ...]) and the final metrics (`final`)."""

  FILE = "run.json"

  def __init__(self, workdir: str, start_step: int = 0):
    self.path = workdir_lib.resolve(workdir) / self.FILE
    data = json.loads(self.path.read_text()) if self.path.exists() else {}
    self.written: dict[str, int] = data.get("written", {})
    self.train: dict = data.get("train", {})
    # A killed run's intervals after the step this run resumes from are measured again.
    self.perf = {tag: [p for p in points if p[0] <= start_step]
                 for tag, points in data.get("perf", {}).items()}
    self.final: dict[str, float] = data.get("final", {})

  def is_new(self, tag: str, step: int) -> bool:
    return step > self.written.get(tag, -1)

  def wrote(self, step: int, tags) -> None:
    for tag in tags:
      self.written[tag] = max(step, self.written.get(tag, -1))

  def last_step(self, prefix: str) -> int:
    """The last step written of any tag starting with `prefix`; -1 for none."""
    return max((s for t, s in self.written.items() if t.startswith(prefix)), default=-1)

  def add_perf(self, step: int, scalars: dict[str, float]) -> None:
    for tag, value in scalars.items():
      self.perf.setdefault(tag, []).append([step, float(np.float32(value))])

  def perf_medians(self) -> dict[str, float]:
    """The median of each perf/ scalar over the run's log intervals (resumes included)."""
    return {tag: float(np.median([v for _, v in points]))
            for tag, points in self.perf.items() if points}

  def save(self) -> None:
    if multihost.is_primary():
      workdir_lib.write_text(self.path, json.dumps(
          {"written": self.written, "train": self.train, "perf": self.perf,
           "final": self.final}, indent=1, sort_keys=True))
