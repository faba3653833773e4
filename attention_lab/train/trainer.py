"""THE train loop, for every task: mesh, state placement, data feeding, jit, and when to
check, log, evaluate and save. It knows no model and no loss: `config.task` names a
module of attention_lab/train/tasks/ that owns those (see tasks/base.py for the
contract). Beside it: signals.py (SIGTERM), console.py (progress lines), metric_writing.py
(TensorBoard, once per step across resumes), parameters.py (the parameter table),
images.py (PNG export), validation.py (config checks) and checkpointing.py (what is saved
and restored).

The state is a pytree of arrays placed with NamedSharding over a
`jax.sharding.Mesh` with one "data" axis (replicated, or parameters split along
their largest divisible axis with `mesh.param_sharding="fsdp"`); it is created
by a jitted init with `out_shardings`, or restored by orbax straight into those
shardings, so every process holds only its own shards. Batches are global
arrays split over "data", assembled per process with
`jax.make_array_from_process_local_data`. XLA inserts the cross-device
reductions (gradients, BatchNorm statistics over the global batch), so the loss
does not depend on the device count.
"""

import functools
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab.train import (checkpointing, console, data_faults, images, metric_writing,
                                 perf, profiling, tasks)
from attention_lab.train.parameters import count_parameters, write_table
from attention_lab.train.signals import PREEMPTION, Interrupted
# `main` installs the SIGTERM handler through this module, before the Trainer exists.
from attention_lab.train.signals import install_sigterm_handler  # pylint: disable=unused-import
from attention_lab.train.validation import check_workdir, validate_config


def make_mesh(config, devices=None) -> jax.sharding.Mesh:
  """A 1-D ("data",) mesh over `config.mesh.num_devices` of `devices` (default
  `jax.devices()`; -1: all of them)."""
  devices = jax.devices() if devices is None else list(devices)
  n = config.mesh.num_devices
  if n != -1 and not 0 < n <= len(devices):
    raise ValueError(f"mesh.num_devices = {n}: must be -1 (all) or 1..{len(devices)}")
  devices = devices if n == -1 else devices[:n]
  return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def jit_train_step(task, shardings):
  """The loop's jitted train step: `state` donated, the new state in its shardings. The
  loop and `attention_lab.aot` compile exactly this."""
  return jax.jit(task.train_step, donate_argnums=0, out_shardings=(shardings, None))


def state_shardings(state, mesh, rule: str):
  """Replicated state, or "fsdp": each array split over "data" along its largest divisible axis."""
  if rule not in ("replicated", "fsdp"):
    raise ValueError(f"mesh.param_sharding must be 'replicated' or 'fsdp', got {rule!r}")
  size = mesh.shape["data"]

  def spec(x):
    if rule == "fsdp" and getattr(x, "ndim", 0) >= 1:
      axes = [a for a in np.argsort(x.shape)[::-1] if x.shape[a] % size == 0]
      if axes:
        return NamedSharding(mesh, P(*[("data" if a == axes[0] else None) for a in range(x.ndim)]))
    return NamedSharding(mesh, P())

  return jax.tree.map(spec, state)


class NonFiniteError(RuntimeError):
  """A train step gave a non-finite metric (loss) or state; the run stopped before saving it."""


@jax.jit
def _all_finite(tree) -> jax.Array:
  """True when every floating-point leaf of `tree` is finite (one fused reduction)."""
  checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


def _write_faults_in_one_line(method):
  """`method` of a Trainer, with a full disk (quota, read-only filesystem) met writing the
  workdir's files raised as one `checkpointing.WriteError` line."""

  @functools.wraps(method)
  def wrapped(self, *args, **kwargs):
    try:
      return method(self, *args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      checkpoints = getattr(self, "checkpoints", None)
      fault = checkpointing.write_fault(e, self.workdir, checkpoints and checkpoints.latest_step())
      if fault is None:
        raise
      raise fault from e

  return wrapped


class Trainer:
  """Builds the task, mesh, state and checkpoints from a config; `run()` trains."""

  @_write_faults_in_one_line
  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    self.config, self.workdir = config, workdir
    self.preempted = False
    validate_config(config)
    check_workdir(workdir)
    self.mesh = make_mesh(config)
    num_devices = self.mesh.size
    if config.batch_size % num_devices:
      raise ValueError(
          f"batch_size = {config.batch_size}: must be divisible by the number of "
          f"devices in the mesh ({num_devices})")
    if config.batch_size % jax.process_count():
      raise ValueError(f"batch_size = {config.batch_size}: must be divisible by the process "
                       f"count ({jax.process_count()})")
    self.local_batch = config.batch_size // jax.process_count()
    self.env = tasks.Environment(self.mesh, workdir, self.local_batch)
    self.task = tasks.create(config, self.env)
    self.total_steps = self.task.total_steps
    if self.total_steps <= 0:
      raise ValueError(
          f"num_train_steps = {config.get('num_train_steps')}, num_epochs = "
          f"{config.get('num_epochs')}: give {self.total_steps} train steps; set "
          "num_train_steps > 0 or num_epochs > 0")

    abstract = jax.eval_shape(self.task.init_state)
    self.shardings = state_shardings(abstract, self.mesh, config.mesh.param_sharding)
    self.train_step = jit_train_step(self.task, self.shardings)
    checkpointing.check_workdir_config(config, workdir, self.say)
    self.checkpoints = checkpointing.Checkpoints(
        workdir, max_to_keep=config.keep_checkpoints,
        save_interval_steps=config.checkpoint_every_steps)
    restored = self.checkpoints.restore(
        checkpointing.restore_target(abstract, self.shardings), warn=checkpointing.warn)
    if restored is None:
      self.state = self.task.from_pretrained(
          jax.jit(self.task.init_state, out_shardings=self.shardings)())
    else:
      self.state = checkpointing.unstorable(restored[0], abstract)
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

  def save(self, *, force: bool = False) -> None:
    step = int(self.state["step"])
    self.checkpoints.save(step, checkpointing.storable(self.state), force=force)

  def _saved_line(self) -> str:
    latest = self.checkpoints.latest_step()
    return (f"the latest checkpoint is step {latest}, in {self.checkpoints.directory}"
            if latest is not None else "no checkpoint saved yet")

  def _agree(self, *flags: bool) -> tuple[bool, ...]:
    """Each flag, true if it is true on any process (an all-gather when there are several)."""
    if jax.process_count() == 1:
      return tuple(bool(f) for f in flags)
    gathered = multihost_utils.process_allgather(np.asarray(flags, np.int32))
    return tuple(bool(f) for f in np.asarray(gathered).reshape(-1, len(flags)).max(axis=0))

  def _check_finite(self, step: int, finite, values) -> None:
    if not bool(finite):
      shown = ", ".join(f"{k}={float(v):.4g}" for k, v in sorted(values.compute().items()))
      raise NonFiniteError(
          f"non-finite training metrics at step {step} ({shown}); stopped. The latest "
          f"checkpoint (step {self.checkpoints.latest_step()}) is the last finite one.")

  def _save_checked(self, step: int) -> None:
    """Saves the state of `step` after checking it is finite (never saves NaN weights)."""
    if not bool(_all_finite(self.state)):
      raise NonFiniteError(
          f"non-finite state after step {step}; stopped. The latest checkpoint (step "
          f"{self.checkpoints.latest_step()}) is the last finite one.")
    if self.checkpoints.latest_step() != step:
      self.save(force=True)

  @_write_faults_in_one_line
  def run(self, until_step: int | None = None) -> dict[str, float]:
    """Trains from the workdir's last checkpoint to `total_steps`, or only to `until_step`
    (a session budget: the schedule still spans `total_steps`); saves and returns the last
    metrics (for a finished workdir: the last step's, with a fresh evaluation). On SIGTERM
    it saves the step reached, sets `self.preempted` and returns."""
    config = self.config
    start = int(self.state["step"])
    last = self.total_steps if until_step is None else min(until_step, self.total_steps)
    installed = PREEMPTION.install()
    single = jax.process_count() == 1  # several processes: no aborted regions, agreed stops
    points = metric_writing.written_points(self.workdir)
    writer = metric_writing.create(self.workdir, points)
    train_metrics, pending = None, None
    step, saved = start, False
    speed, profiler = None, profiling.StepProfiler(config, self.workdir, start)
    self.examples_per_second = [v for s, v in points.get("perf/examples_per_second", {}).items()
                                if s <= start]
    clock = time.monotonic()
    early_at = clock + config.get("first_checkpoint_secs", 180)
    log_step, log_time = start, clock
    try:
      summary = self._owed_summary(start, last, points, writer)
      try:
        if start < last:
          with PREEMPTION.interruptible(single):
            data = self.task.train_batches(start)
        while step < last and not self._agree(PREEMPTION.requested)[0]:
          with PREEMPTION.interruptible(single):
            batch = self.global_batch(next(data))
          if speed is None:  # compiles the step, for its FLOPs; the call below reuses it
            speed = perf.Speed.for_first_step(self, batch)
          profiler.before_step(step)
          self.state, values = self.train_step(self.state, batch)
          step += 1
          profiler.after_step(step, self.state)
          if step == start + 1:  # steps/s from here on: compilation excluded
            jax.block_until_ready(self.state)
            log_step, log_time = step, time.monotonic()
          if pending is not None:  # the previous step's check, while this one runs
            self._check_finite(*pending)
          pending = (step, _all_finite(values), values)
          train_metrics = values if train_metrics is None else train_metrics.merge(values)
          is_log = step % config.log_every_steps == 0 or step == last
          is_eval = step % config.eval_every_steps == 0 or step == self.total_steps
          if is_log or is_eval:
            self._check_finite(*pending)
            pending = None
          if is_log:
            summary = {f"train_{k}": float(v) for k, v in train_metrics.compute().items()}
            summary.update(self.task.learning_rates(step))
            now = time.monotonic()
            speed_scalars = {}
            if step > log_step:
              rate = (step - log_step) / max(now - log_time, 1e-9)
              speed_scalars = speed.scalars(step - log_step, max(now - log_time, 1e-9))
              self.examples_per_second.append(  # as TensorBoard holds it (a re-run reads it)
                  float(np.float32(speed_scalars["perf/examples_per_second"])))
            else:  # the first step (log_every_steps = 1): its time, compilation included
              rate = 1 / max(now - clock, 1e-9)
            log_step, log_time = step, now
            writer.write_scalars(step, {**summary, "steps_per_sec": rate, **speed_scalars})
            self.say(console.progress_line(
                step, self.total_steps, summary, self.task.headline, rate, last,
                perf.console(config.batch_size, rate, speed_scalars)))
            train_metrics = None
          if is_eval:
            evaluated_at = time.monotonic()
            with PREEMPTION.interruptible(single):
              evaluation = self.evaluate()
              writer.write_scalars(step, evaluation)
              self._say_evaluation(step, evaluation)
              self._write_images(writer, step)
              summary.update(evaluation)
            log_time += time.monotonic() - evaluated_at  # speed: the train steps' alone
          stop, early = self._agree(PREEMPTION.requested,
                                    not saved and time.monotonic() >= early_at)
          if stop or early or step % config.checkpoint_every_steps == 0 or step == last:
            if pending is not None:
              self._check_finite(*pending)
              pending = None
            self._save_checked(step)
            saved = True
          if stop:
            break
        if pending is not None:
          self._check_finite(*pending)
      except Interrupted:  # SIGTERM in evaluation or data loading: `step` is complete
        if pending is not None:
          self._check_finite(*pending)
        if step > start:
          self._save_checked(step)
      except data_faults.DataLossError as e:  # a damaged dataset file: `step` is complete
        if pending is not None:
          self._check_finite(*pending)
        where = self._saved_line()
        if step > start:
          self._save_checked(step)
          self.checkpoints.wait_until_finished()
          where = f"saved step {step} (the step reached) in {self.checkpoints.directory}"
        raise data_faults.corruption_error(config, e, where) from e
      if PREEMPTION.requested:
        PREEMPTION.requested = False
        self.preempted = True
        self.checkpoints.wait_until_finished()
        latest = self.checkpoints.latest_step()
        self.say(f"SIGTERM: saved step {latest} in {self.checkpoints.directory}; run the "
                 "same command again to resume" if latest is not None else
                 "SIGTERM before the first step: nothing to save")
    finally:
      profiler.stop()
      self.checkpoints.wait_until_finished()
      if installed:
        PREEMPTION.uninstall()
      writer.flush()
    return summary

  def median_examples_per_second(self) -> float | None:
    """The median perf/examples_per_second of the run's log intervals (a resumed or
    finished workdir's include the earlier runs'); None before the first."""
    return perf.median(getattr(self, "examples_per_second", []))

  def _owed_summary(self, start: int, last: int, points, writer) -> dict[str, float]:
    """What a run owes before its first step. The evaluation of step `start`, if a SIGTERM
    cut it short. And for a finished workdir (a re-run, or a SIGTERM after the last step),
    the summary that finished it: the last step's train metrics as written (`points`), its
    learning rates and a fresh evaluation."""
    is_eval_step = start % self.config.eval_every_steps == 0 or start == self.total_steps
    last_eval = max((max(steps) for tag, steps in points.items() if tag.startswith("eval_")),
                    default=-1)
    owed = bool(start) and is_eval_step and self._agree(last_eval < start)[0]
    summary = {}
    if start >= last:
      summary = {tag: steps[start] for tag, steps in points.items()
                 if tag.startswith("train_") and steps.get(start) is not None}
      summary.update(self.task.learning_rates(start))
    if owed or start >= last:
      evaluation = self.evaluate()
      if owed:
        writer.write_scalars(start, evaluation)
        self._write_images(writer, start)
      self._say_evaluation(start, evaluation)
      summary.update(evaluation)
    return summary

  def _say_evaluation(self, step: int, evaluation: dict[str, float]) -> None:
    self.say(console.eval_line(step, self.total_steps, evaluation, self.task.headline))

  def _write_images(self, writer, step: int) -> None:
    """The task's pictures: to TensorBoard and as PNG files under workdir/images/."""
    pictures = self.task.image_summaries(self.state)
    if pictures and jax.process_index() == 0:
      writer.write_images(step, pictures)
      images.save_png(pictures, self.workdir, step)
