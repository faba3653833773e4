"""What the loop does after a train step, one hook per job, each deciding by the step
whether it is its time (as big_vision's `itstime`): progress (train metrics, the non-finite
check, speed, the console line), evaluation (metrics and pictures), checkpoints and the
profiler. A hook is called as `hook(step, state, metrics)` and returns the scalars it adds
to the run's summary. It is built with the writer or checkpoints it writes to and the few
settings it needs, and reads nothing else: not the Trainer, not another hook. clu's
periodic actions would import TensorFlow through clu.metric_writers, and a speed run has
none, so these are ours.

No hook makes a cross-host collective on a plain step: the early checkpoint is agreed on
at log steps only (train/multihost.py).
"""

import dataclasses
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from attention_lab.train import console, errors, images, multihost, perf, profiling
from attention_lab.train import state as state_lib
from attention_lab.train.signals import PREEMPTION


@jax.jit
def all_finite(tree) -> jax.Array:
  """True when every floating-point leaf of `tree` is finite (one fused reduction)."""
  checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


def is_time(step: int, every: int, last: int) -> bool:
  return step % every == 0 or step == last


def require_finite(state, step: int, before: str) -> None:
  """NonFiniteError when `state` is not finite (stopped before `before`)."""
  if not bool(all_finite(state)):
    raise errors.NonFiniteError(f"non-finite state after step {step}; stopped before {before}.")


@dataclasses.dataclass(frozen=True)
class Span:
  """A run's steps: from `start` (done) to `last` (where this run stops), of the
  schedule's `total`."""
  start: int
  last: int
  total: int


class Progress:
  """Train metrics averaged over each log interval (`every` steps and the last): checked
  for non-finite values, written with the learning rates and the perf/ scalars, and one
  console line. The loop sets `speed` (perf.Speed) before the first step; the seconds
  `not_training()` counts (evaluations) are left out of the speed."""

  def __init__(self, writer, span: Span, *, every: int, headline: str, batch_size: int,
               learning_rates: Callable[[int], dict[str, float]],
               not_training: Callable[[], float] = lambda: 0.0):
    self.writer, self.span, self.every, self.headline = writer, span, every, headline
    self.batch_size, self.learning_rates = batch_size, learning_rates
    self.not_training = not_training
    self.speed: perf.Speed | None = None
    self.metrics, self.since = None, span.start + 1  # the interval's merged metrics, first step
    self.started = time.monotonic()
    self._interval_start(span.start)

  def _interval_start(self, step: int) -> None:
    self.log_step, self.logged_at, self.idle_at = step, time.monotonic(), self.not_training()

  def check(self, step: int) -> None:
    """NonFiniteError when the interval's metrics are not finite."""
    if self.metrics is not None and not bool(all_finite(self.metrics)):
      shown = ", ".join(f"{k}={float(v):.4g}" for k, v in sorted(self.metrics.compute().items()))
      raise errors.NonFiniteError(
          f"non-finite training metrics in steps {self.since}-{step} ({shown}); stopped.")

  def __call__(self, step: int, state, metrics) -> dict[str, float]:
    del state
    self.metrics = metrics if self.metrics is None else self.metrics.merge(metrics)
    logs = is_time(step, self.every, self.span.last)
    if step == self.span.start + 1:  # steps/s from here on: compilation excluded
      jax.block_until_ready(metrics)
      if not logs:
        self._interval_start(step)
    if not logs:
      return {}
    self.check(step)
    summary = {f"train_{k}": float(v) for k, v in self.metrics.compute().items()}
    summary.update(self.learning_rates(step))
    rate, scalars = self._speed(step)
    self.writer.summary.train = {"step": step, "metrics": summary}
    self.writer.write_scalars(step, {**summary, "steps_per_sec": rate, **scalars})
    self.writer.flush()
    console.print_line(console.progress_line(
        step, self.span.total, summary, self.headline, rate, self.span.last,
        perf.console(self.batch_size, rate, scalars)))
    self.metrics, self.since = None, step + 1
    self._interval_start(step)
    return summary

  def _speed(self, step: int) -> tuple[float, dict[str, float]]:
    """(steps/s, perf/ scalars) of the interval ending at `step`; the run's first step
    alone: its steps/s, compilation included, and no scalars."""
    now = time.monotonic()
    if not step > self.log_step > self.span.start:
      return 1 / max(now - self.started, 1e-9), {}
    seconds = max(now - self.logged_at - (self.not_training() - self.idle_at), 1e-9)
    scalars = self.speed.scalars(step - self.log_step, seconds)
    self.writer.summary.add_perf(step, scalars)
    return (step - self.log_step) / seconds, scalars


class Evaluation:
  """The task's whole-set evaluation (`evaluate(state)`; None: a synthetic speed run, with
  no evaluation data) and its pictures, at every `every` steps and the schedule's last step.
  `seconds` counts the time it took, which the training speed leaves out."""

  def __init__(self, writer, span: Span, *, every: int, headline: str,
               evaluate: Callable | None, pictures: Callable, workdir: str):
    self.writer, self.span, self.every, self.headline = writer, span, every, headline
    self._evaluate, self._pictures, self.workdir = evaluate, pictures, workdir
    self.seconds = 0.0

  def evaluate(self, step: int, state, write: bool = True) -> dict[str, float]:
    """The evaluation of `state` (at `step`), written with its pictures when `write`."""
    if self._evaluate is None:
      return {}
    started = time.monotonic()
    try:
      evaluation = self._evaluate(state)
      if write:
        self.writer.write_scalars(step, evaluation)
        self.pictures(step, state)
        self.writer.flush()
    finally:
      self.seconds += time.monotonic() - started
    console.print_line(console.eval_line(step, self.span.total, evaluation, self.headline))
    return evaluation

  def pictures(self, step: int, state) -> None:
    """The task's pictures: to TensorBoard and as PNG files under workdir/images/."""
    pictures = self._pictures(state)
    if pictures and multihost.is_primary():
      self.writer.write_images(step, pictures)
      images.save_png(pictures, self.workdir, step)

  def __call__(self, step: int, state, metrics) -> dict[str, float]:
    del metrics
    if self._evaluate is None or not is_time(step, self.every, self.span.total):
      return {}
    require_finite(state, step, "its evaluation")
    with PREEMPTION.interruptible():
      return self.evaluate(step, state)


class Checkpoint:
  """Saves every `every` steps, at the last step, and once `first_save_secs` after the
  start (a short job keeps something); never a non-finite state. Whether the early save
  is due depends on each process's clock, so they agree on it, at log steps only."""

  def __init__(self, checkpoints, span: Span, *, every: int, log_every: int,
               first_save_secs: float):
    self.checkpoints, self.span, self.every, self.log_every = checkpoints, span, every, log_every
    self.early_at = time.monotonic() + first_save_secs
    self.saved = False

  def save(self, step: int, state) -> None:
    require_finite(state, step, "saving it")
    if self.checkpoints.latest_step() != step:
      self.checkpoints.save(step, state_lib.as_saved(state), force=True)
    self.saved = True

  def _early(self, step: int) -> bool:
    return (not self.saved and is_time(step, self.log_every, self.span.last)
            and multihost.any_process(time.monotonic() >= self.early_at))

  def __call__(self, step: int, state, metrics) -> dict[str, float]:
    del metrics
    if is_time(step, self.every, self.span.last) or self._early(step):
      self.save(step, state)
    return {}


class Profile:
  """A jax.profiler trace of `config.profile_steps` (profiling.StepProfiler)."""

  def __init__(self, profiler: profiling.StepProfiler):
    self.profiler = profiler

  def before_step(self, step: int) -> None:
    self.profiler.before_step(step)

  def __call__(self, step: int, state, metrics) -> dict[str, float]:
    del metrics
    self.profiler.after_step(step, state)
    return {}

  def close(self) -> None:
    self.profiler.stop()
