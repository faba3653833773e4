"""THE train loop, for every task: a train step, then hooks (train/hooks.py: progress,
evaluation, checkpoints, profile). It knows no model and no loss: `config.task` names a
module of attention_lab/train/tasks/ that owns those (tasks/base.py states the contract).
The state's layout, its shardings and the jitted step come from train/state.py; the
workdir's checkpoints, config record and run summary from train/checkpointing.py,
train/config_record.py and train/run_summary.py.

Preemption is train/signals.py's: the loop asks it before every step whether to stop (every
process gets the same answer, with no collective on the step), saves the step reached and
returns. Inside waiting for data and evaluation (one process) a SIGTERM also aborts them,
so the step reached is saved at once.
"""

import contextlib
from typing import NamedTuple

import jax
import ml_collections

from attention_lab.data import synthetic
from attention_lab.train import (checkpointing, config_record, console, data_faults, errors,
                                 hooks, metric_writing, multihost, perf, profiling,
                                 run_summary, state as state_lib, tasks,
                                 workdir as workdir_lib)
from attention_lab.train.parameters import count_parameters, write_table
from attention_lab.train.signals import PREEMPTION, Interrupted
from attention_lab.train.validation import validate_config

NonFiniteError = errors.NonFiniteError


class Hooks(NamedTuple):
  """A run's hooks, in the order they follow a step (the profiler also precedes it)."""
  profile: hooks.Profile
  progress: hooks.Progress
  evaluation: hooks.Evaluation
  checkpoint: hooks.Checkpoint


class Trainer:
  """Builds the task, mesh, state and checkpoints from a config; `run()` trains.

  `dependencies`: the runs the task needs, resolved beforehand (train/dependencies.py).
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, dependencies=None):
    self.config, self.workdir, self.preempted = config, workdir, False
    validate_config(config)
    workdir_lib.prepare(workdir)
    self.mesh = state_lib.make_mesh(config)
    self.local_batch = state_lib.check_batch(config, self.mesh)
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
    self.layout = state_lib.StateLayout(self.task, self.mesh, config.mesh.param_sharding)
    self.train_step = self.layout.train_step
    with self.write_faults():
      config_record.check_or_write(config, workdir)
      self.checkpoints = checkpointing.Checkpoints(
          workdir, max_to_keep=config.keep_checkpoints,
          save_interval_steps=config.checkpoint_every_steps)
      restored = self.layout.restore(self.checkpoints)
      if restored is None:
        self.state = self.layout.init()
      else:
        self.state = restored[0]
        console.print_line(f"Resumed from {self.checkpoints.directory} at step {restored[1]}")
      self.num_parameters = count_parameters(self.state)
      table = write_table(self.state, workdir) if multihost.is_primary() else None
    console.print_line(f"Parameters: {self.num_parameters:,}"
                       + (f" (table: {table})" if table else ""))

  def global_batch(self, batch):
    """This process's numpy batch → global arrays sharded over the mesh's "data" axis."""
    return self.env.global_batch(batch)

  def evaluate(self) -> dict[str, float]:
    return self.task.evaluate(self.state)

  def save(self, *, force: bool = True) -> None:
    """Saves the current state as its step (and waits for the write)."""
    self.checkpoints.save(int(self.state["step"]), state_lib.as_saved(self.state), force=force)
    self.checkpoints.wait_until_finished()

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

  @contextlib.contextmanager
  def non_finite_keeps_last_checkpoint(self):
    """A NonFiniteError (a hook's) says which checkpoint is the last finite one."""
    try:
      yield
    except NonFiniteError as e:
      raise NonFiniteError(f"{e} The latest checkpoint (step {self.checkpoints.latest_step()})"
                           " is the last finite one.") from e

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
    start = int(self.state["step"])
    last = self.total_steps if until_step is None else min(until_step, self.total_steps)
    self.record = run_summary.RunSummary(self.workdir, start)
    writer = metric_writing.Writer(self.workdir, self.record, self.checkpoints.latest_step)
    run_hooks = self._hooks(writer, hooks.Span(start, last, self.total_steps))
    installed = PREEMPTION.install()
    try:
      with self.write_faults(), self.non_finite_keeps_last_checkpoint():
        summary = self._summary_at_start(start, last, run_hooks.evaluation)
        step = self._train(start, last, run_hooks, summary)
        self.checkpoints.wait_until_finished()
        if PREEMPTION.stopped:
          self._report_preemption()
        elif step == self.total_steps:
          self.record.final = summary
    finally:
      run_hooks.profile.close()
      self.checkpoints.wait_until_finished()
      if installed:
        PREEMPTION.uninstall()
      writer.close()
    return summary

  def _train(self, start: int, last: int, run_hooks: Hooks, summary: dict) -> int:
    """The steps from `start` to `last`, each followed by the hooks (their scalars go into
    `summary`), until a stop; returns the step reached, saved if a SIGTERM stopped it."""
    step = start
    data = self.batches(start) if start < last else None
    try:
      while step < last and not PREEMPTION.should_stop():
        with PREEMPTION.interruptible():
          batch = next(data)
        if step == start:  # compiles the step for its FLOP count; the call below reuses it
          run_hooks.progress.speed = perf.Speed.of_step(
              self.task, self.train_step, self.state, batch, self.mesh, self.config)
        run_hooks.profile.before_step(step)
        self.state, metrics = self.train_step(self.state, batch)
        step += 1
        for hook in run_hooks:
          summary.update(hook(step, self.state, metrics))
    except Interrupted:  # SIGTERM in evaluation or data loading: `step` is complete
      pass
    except Exception as e:  # pylint: disable=broad-except
      if not data_faults.is_data_loss(e):
        raise
      raise self._data_loss(e, start, step, run_hooks.checkpoint) from e
    if PREEMPTION.stopped and step > start:
      run_hooks.checkpoint.save(step, self.state)
    return step

  def _hooks(self, writer, span: hooks.Span) -> Hooks:
    config, task = self.config, self.task
    evaluation = hooks.Evaluation(
        writer, span, every=config.eval_every_steps, headline=task.headline,
        evaluate=None if self.synthetic else task.evaluate, pictures=task.image_summaries,
        workdir=self.workdir)
    progress = hooks.Progress(
        writer, span, every=config.log_every_steps, headline=task.headline,
        batch_size=config.batch_size, learning_rates=task.learning_rates,
        not_training=lambda: evaluation.seconds)
    checkpoint = hooks.Checkpoint(
        self.checkpoints, span, every=config.checkpoint_every_steps,
        log_every=config.log_every_steps, first_save_secs=config.first_checkpoint_secs)
    profile = hooks.Profile(profiling.StepProfiler(config, self.workdir, span.start))
    return Hooks(profile, progress, evaluation, checkpoint)

  def _data_loss(self, error: Exception, start: int, step: int, checkpoint) -> Exception:
    """A damaged dataset file: the step reached saved (it is complete), and the one line
    that says so."""
    latest = self.checkpoints.latest_step()
    where = (f"the latest checkpoint is step {latest}, in {self.checkpoints.directory}"
             if latest is not None else "no checkpoint saved yet")
    if step > start:
      checkpoint.save(step, self.state)
      self.checkpoints.wait_until_finished()
      where = f"saved step {step} (the step reached) in {self.checkpoints.directory}"
    return data_faults.corruption_error(self.config, error, where)

  def _report_preemption(self) -> None:
    self.preempted = True
    latest = self.checkpoints.latest_step()
    console.print_line(
        f"SIGTERM: saved step {latest} in {self.checkpoints.directory}; run the same "
        "command again to resume" if latest is not None else
        "SIGTERM before the first step: nothing to save")

  def median_examples_per_second(self) -> float | None:
    """The median perf/examples_per_second of the run's log intervals (a resumed or
    finished workdir's include the earlier runs'); None before the first."""
    return getattr(self, "record", None) and self.record.perf_medians().get(
        "perf/examples_per_second")

  def _summary_at_start(self, start: int, last: int, evaluation) -> dict[str, float]:
    """What a run reports before its first step. The evaluation of step `start`, if a
    SIGTERM cut it short. And for a finished workdir (a re-run, or a SIGTERM after the
    last step), the summary that finished it: the last step's train metrics as recorded,
    its learning rates and a fresh evaluation."""
    is_eval_step = start % self.config.eval_every_steps == 0 or start == self.total_steps
    owed = bool(start) and is_eval_step and multihost.any_process(
        self.record.last_step("eval_") < start)
    summary = {}
    if start >= last:
      recorded = self.record.train
      summary = dict(recorded["metrics"]) if recorded.get("step") == start else {}
      summary = {k: v for k, v in summary.items() if k.startswith("train_")}
      summary.update(self.task.learning_rates(start))
    if owed or start >= last:
      summary.update(evaluation.evaluate(start, self.state, write=owed))
    return summary
