"""What the loop does after a train step, one hook per job, each deciding by the step
whether it is its time (as big_vision's `itstime`): progress (train metrics, the non-finite
check, speed, the console line), evaluation (metrics and pictures), checkpoints and the
profiler. clu's periodic actions would import TensorFlow through clu.metric_writers, and a
speed run has none, so these are ours."""

import time

import jax
import jax.numpy as jnp

from attention_lab.train import console, errors, images, perf, profiling
from attention_lab.train import state as state_lib


@jax.jit
def all_finite(tree) -> jax.Array:
  """True when every floating-point leaf of `tree` is finite (one fused reduction)."""
  checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


def is_time(step: int, every: int, last: int) -> bool:
  return step % every == 0 or step == last


class Progress:
  """Train metrics averaged over each log interval: checked for non-finite values (at log
  steps, and before a save or an evaluation), written with the learning rates and the
  perf/ scalars, and one console line."""

  def __init__(self, trainer, writer, start: int, last: int):
    self.trainer, self.writer, self.last = trainer, writer, last
    self.first = start + 1
    self.metrics, self.since = None, start + 1  # the interval's merged metrics, first step
    self.speed, self.excluded = None, 0.0  # perf.Speed; seconds not spent training
    self.started = self.logged_at = time.monotonic()
    self.log_step = start

  def before_first_step(self, state, batch) -> None:
    """Compiles the step for its FLOP count (the first call then reuses the program)."""
    t = self.trainer
    self.speed = perf.Speed.of_step(t.task, t.train_step, state, batch, t.mesh, t.config)

  def check(self) -> None:
    """NonFiniteError when the interval's metrics are not finite."""
    if self.metrics is not None and not bool(all_finite(self.metrics)):
      shown = ", ".join(f"{k}={float(v):.4g}" for k, v in sorted(self.metrics.compute().items()))
      raise errors.NonFiniteError(
          f"non-finite training metrics in steps {self.since}-{self.step} ({shown}); "
          f"stopped. The latest checkpoint (step {self.trainer.checkpoints.latest_step()}) "
          "is the last finite one.")

  def __call__(self, step: int, metrics) -> dict[str, float]:
    self.step = step
    self.metrics = metrics if self.metrics is None else self.metrics.merge(metrics)
    if step == self.first:  # steps/s from here on: compilation excluded
      jax.block_until_ready(metrics)
      if not is_time(step, self.trainer.config.log_every_steps, self.last):
        self.log_step, self.logged_at = step, time.monotonic()
    if not is_time(step, self.trainer.config.log_every_steps, self.last):
      return {}
    self.check()
    summary = {f"train_{k}": float(v) for k, v in self.metrics.compute().items()}
    summary.update(self.trainer.task.learning_rates(step))
    now = time.monotonic()
    seconds = max(now - self.logged_at - self.excluded, 1e-9)
    scalars = {}
    if step > self.log_step and self.log_step >= self.first:
      scalars = self.speed.scalars(step - self.log_step, seconds)
      rate = (step - self.log_step) / seconds
      self.writer.summary.add_perf(step, scalars)
    else:  # the run's first step: its time, compilation included
      rate = 1 / max(now - self.started, 1e-9)
    self.writer.summary.train = {"step": step, "metrics": summary}
    self.writer.write_scalars(step, {**summary, "steps_per_sec": rate, **scalars})
    self.writer.flush()
    self.trainer.say(console.progress_line(
        step, self.trainer.total_steps, summary, self.trainer.task.headline, rate, self.last,
        perf.console(self.trainer.config.batch_size, rate, scalars)))
    self.metrics, self.since = None, step + 1
    self.log_step, self.logged_at, self.excluded = step, now, 0.0
    return summary


class Evaluation:
  """The task's whole-set evaluation and pictures at every `eval_every_steps` and the last
  step; its time is left out of the training speed. None in a synthetic speed run (there is
  no evaluation data)."""

  def __init__(self, trainer, writer, progress: Progress):
    self.trainer, self.writer, self.progress = trainer, writer, progress

  def evaluate(self, step: int, write: bool = True) -> dict[str, float]:
    t = self.trainer
    if t.synthetic:
      return {}
    evaluation = t.task.evaluate(t.state)
    if write:
      self.writer.write_scalars(step, evaluation)
      self.pictures(step)
      self.writer.flush()
    t.say(console.eval_line(step, t.total_steps, evaluation, t.task.headline))
    return evaluation

  def pictures(self, step: int) -> None:
    """The task's pictures: to TensorBoard and as PNG files under workdir/images/."""
    pictures = self.trainer.task.image_summaries(self.trainer.state)
    if pictures and jax.process_index() == 0:
      self.writer.write_images(step, pictures)
      images.save_png(pictures, self.trainer.workdir, step)

  def __call__(self, step: int, metrics) -> dict[str, float]:
    del metrics
    if self.trainer.synthetic or not is_time(step, self.trainer.config.eval_every_steps,
                                             self.trainer.total_steps):
      return {}
    self.progress.check()
    started = time.monotonic()
    with self.trainer.interruptible():
      evaluation = self.evaluate(step)
    self.progress.excluded += time.monotonic() - started
    return evaluation


class Checkpoint:
  """Saves every `checkpoint_every_steps`, at the last step, once `first_checkpoint_secs`
  after the start (a short job keeps something) and on a stop request; never a
  non-finite state."""

  def __init__(self, trainer, progress: Progress, last: int):
    self.trainer, self.progress, self.last = trainer, progress, last
    self.early_at = time.monotonic() + trainer.config.first_checkpoint_secs
    self.saved = False

  def save(self, step: int) -> None:
    t = self.trainer
    self.progress.check()
    if not bool(all_finite(t.state)):
      raise errors.NonFiniteError(
          f"non-finite state after step {step}; stopped. The latest checkpoint (step "
          f"{t.checkpoints.latest_step()}) is the last finite one.")
    if t.checkpoints.latest_step() != step:
      t.checkpoints.save(step, state_lib.storable(t.state), force=True)
    self.saved = True

  def __call__(self, step: int, metrics, stop: bool = False) -> dict[str, float]:
    del metrics
    early = not self.saved and time.monotonic() >= self.early_at
    stop, early = self.trainer.agree(stop, early)
    if stop or early or is_time(step, self.trainer.config.checkpoint_every_steps, self.last):
      self.save(step)
    return {}


class Profile:
  """A jax.profiler trace of `config.profile_steps` (profiling.StepProfiler)."""

  def __init__(self, trainer, start: int):
    self.profiler = profiling.StepProfiler(trainer.config, trainer.workdir, start)

  def before_step(self, step: int) -> None:
    self.profiler.before_step(step)

  def __call__(self, step: int, metrics) -> dict[str, float]:
    self.profiler.after_step(step, metrics)
    return {}

  def close(self) -> None:
    self.profiler.stop()
