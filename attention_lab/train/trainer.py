"""THE train loop, for every task: a train step, then hooks (train/hooks.py: progress,
evaluation, checkpoints, profile). It knows no model and no loss: `config.task` names a
module of attention_lab/train/tasks/ that owns those (tasks/base.py states the contract).
The state, its shardings and the jitted step come from train/state.py, the checkpoints,
config record and run summary from train/workdir.py.

Preemption is handled in one place: SIGTERM raises a flag (train/signals.py) that the loop
reads after every step (all processes agree on it); inside waiting for data and
evaluation (one process) it also aborts them, so the step reached is saved at once.
"""

import contextlib

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from attention_lab.data import synthetic
from attention_lab.train import (console, data_faults, errors, hooks, metric_writing, state,
                                 tasks, workdir as workdir_lib)
from attention_lab.train.parameters import count_parameters, write_table
from attention_lab.train.signals import PREEMPTION, Interrupted
from attention_lab.train.validation import validate_config

NonFiniteError = errors.NonFiniteError


class Trainer:
  """Builds the task, mesh, state and checkpoints from a config; `run()` trains.

  `dependencies`: the runs the task needs, resolved beforehand (train/dependencies.py).
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, dependencies=None):
    self.config, self.workdir, self.preempted = config, workdir, False
    validate_config(config)
    workdir_lib.prepare(workdir)
    self.mesh = state.make_mesh(config)
    self.local_batch = state.check_batch(config, self.mesh)
    self.env = tasks.Environment(self.mesh, workdir, self.local_batch, dependencies or {})
    self.task = tasks.create(config, self.env)
    self.total_steps = self.task.total_steps
    if self.total_steps <= 0:
      raise ValueError(
          f"num_train_steps = {config.num_train_steps}, num_epochs = {config.num_epochs}: "
          f"give {self.total_steps} train steps; set num_train_steps > 0 or num_epochs > 0")
    self.synthetic = bool(config.dataset.synthetic)
    if not self.synthetic:
      from attention_lab.data import availability  # pylint: disable=g-import-not-at-top
      availability.require_prepared(config)  # before any data is read: one line
    self.train_state = state.TrainState(self.task, self.mesh, config.mesh.param_sharding)
    self.train_step = self.train_state.train_step
    with self.write_faults():
      workdir_lib.check_workdir_config(config, workdir, self.say)
      self.checkpoints = workdir_lib.Checkpoints(
          workdir, max_to_keep=config.keep_checkpoints,
          save_interval_steps=config.checkpoint_every_steps)
      restored = self.train_state.restore(self.checkpoints)
      if restored is None:
        self.state = self.train_state.init()
      else:
        self.state = restored[0]
        self.say(f"Resumed from {self.checkpoints.directory} at step {restored[1]}")
      self.num_parameters = count_parameters(self.state)
      table = write_table(self.state, workdir) if jax.process_index() == 0 else None
    self.say(f"Parameters: {self.num_parameters:,}" + (f" (table: {table})" if table else ""))

  say = staticmethod(console.say)

  def global_batch(self, batch):
    """This process's numpy batch → global arrays sharded over the mesh's "data" axis."""
    return self.env.global_batch(batch)

  def evaluate(self) -> dict[str, float]:
    return self.task.evaluate(self.state)

  def save(self, *, force: bool = True) -> None:
    """Saves the current state as its step (and waits for the write)."""
    self.checkpoints.save(int(self.state["step"]), state.storable(self.state), force=force)
    self.checkpoints.wait_until_finished()

  def agree(self, *flags: bool) -> tuple[bool, ...]:
    """Each flag, true if it is true on any process (an all-gather when there are several)."""
    if jax.process_count() == 1:
      return tuple(bool(f) for f in flags)
    gathered = multihost_utils.process_allgather(np.asarray(flags, np.int32))
    return tuple(bool(f) for f in np.asarray(gathered).reshape(-1, len(flags)).max(axis=0))

  def interruptible(self):
    """A region a SIGTERM aborts (one process: several must agree on where they stop)."""
    return PREEMPTION.interruptible(jax.process_count() == 1)

  @contextlib.contextmanager
  def write_faults(self):
    """A full disk (quota, read-only filesystem) met writing the workdir: one line."""
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      checkpoints = getattr(self, "checkpoints", None)
      fault = errors.write_fault(e, self.workdir, checkpoints and checkpoints.latest_step())
      if fault is None:
        raise
      raise fault from e

  def batches(self, start: int):
    """Global batches from step `start` on: the task's data, or synthetic ones."""
    if self.synthetic:
      yield from synthetic.batches(self.task.batch_spec(), self.env.data_sharding,
                                   seed=self.config.seed,
                                   num_classes=getattr(self.task, "num_classes", 0))
    else:
      for batch in self.task.train_batches(start):
        yield self.global_batch(batch)

  def run(self, until_step: int | None = None) -> dict[str, float]:
    """Trains from the workdir's last checkpoint to `total_steps`, or only to `until_step`
    (a session budget: the schedule still spans `total_steps`); saves and returns the last
    metrics (for a finished workdir: the last step's, with a fresh evaluation). On SIGTERM
    it saves the step reached, sets `self.preempted` and returns."""
    start = step = int(self.state["step"])
    last = self.total_steps if until_step is None else min(until_step, self.total_steps)
    self.record = workdir_lib.RunSummary(self.workdir, start)
    writer = metric_writing.Writer(self.workdir, self.record, self.checkpoints.latest_step)
    progress = hooks.Progress(self, writer, start, last)
    evaluation = hooks.Evaluation(self, writer, progress)
    checkpoint, profile = hooks.Checkpoint(self, progress, last), hooks.Profile(self, start)
    installed = PREEMPTION.install()
    try:
      with self.write_faults():
        summary = self._owed_summary(start, last, evaluation)
        try:
          data = self.batches(start) if start < last else None
          while step < last and not self.agree(PREEMPTION.requested)[0]:
            with self.interruptible():
              batch = next(data)
            if step == start:
              progress.before_first_step(self.state, batch)
            profile.before_step(step)
            self.state, metrics = self.train_step(self.state, batch)
            step += 1
            for hook in (profile, progress, evaluation):
              summary.update(hook(step, metrics))
            checkpoint(step, metrics, stop=PREEMPTION.requested)
        except Interrupted:  # SIGTERM in evaluation or data loading: `step` is complete
          if step > start:
            checkpoint.save(step)
        except Exception as e:  # pylint: disable=broad-except
          if not data_faults.is_data_loss(e):
            raise
          where = self._saved_line()
          if step > start:  # a damaged dataset file: `step` is complete
            checkpoint.save(step)
            self.checkpoints.wait_until_finished()
            where = f"saved step {step} (the step reached) in {self.checkpoints.directory}"
          raise data_faults.corruption_error(self.config, e, where) from e
        self.checkpoints.wait_until_finished()
        if PREEMPTION.requested:
          self._preempted()
        elif step == self.total_steps:
          self.record.final = summary
    finally:
      profile.close()
      self.checkpoints.wait_until_finished()
      if installed:
        PREEMPTION.uninstall()
      writer.close()
    return summary

  def _saved_line(self) -> str:
    latest = self.checkpoints.latest_step()
    return (f"the latest checkpoint is step {latest}, in {self.checkpoints.directory}"
            if latest is not None else "no checkpoint saved yet")

  def _preempted(self) -> None:
    PREEMPTION.requested, self.preempted = False, True
    latest = self.checkpoints.latest_step()
    self.say(f"SIGTERM: saved step {latest} in {self.checkpoints.directory}; run the same "
             "command again to resume" if latest is not None else
             "SIGTERM before the first step: nothing to save")

  def median_examples_per_second(self) -> float | None:
    """The median perf/examples_per_second of the run's log intervals (a resumed or
    finished workdir's include the earlier runs'); None before the first."""
    return getattr(self, "record", None) and self.record.perf_medians().get(
        "perf/examples_per_second")

  def _owed_summary(self, start: int, last: int, evaluation) -> dict[str, float]:
    """What a run owes before its first step. The evaluation of step `start`, if a SIGTERM
    cut it short. And for a finished workdir (a re-run, or a SIGTERM after the last step),
    the summary that finished it: the last step's train metrics as recorded, its learning
    rates and a fresh evaluation."""
    is_eval_step = start % self.config.eval_every_steps == 0 or start == self.total_steps
    owed = bool(start) and is_eval_step and self.agree(
        self.record.last_step("eval_") < start)[0]
    summary = {}
    if start >= last:
      recorded = self.record.train
      summary = dict(recorded["metrics"]) if recorded.get("step") == start else {}
      summary = {k: v for k, v in summary.items() if k.startswith("train_")}
      summary.update(self.task.learning_rates(start))
    if owed or start >= last:
      summary.update(evaluation.evaluate(start, write=owed))
    return summary
