"""Preemption (SIGTERM): whether this process is to stop training. This module alone writes
that state; the loop asks `PREEMPTION.should_stop()` before every step.

One process: a Python SIGTERM handler raises a flag. Inside an `interruptible()` region
(waiting for data, evaluating: the state of the last finished step is intact) it also
aborts the region with `Interrupted`, so the step reached is saved without waiting.

Several processes (after `jax.distributed.initialize`): jax's preemption notifier owns
SIGTERM (it replaces any handler at the C level and tells the coordination service), and
`multihost_utils.reached_preemption_sync_point(n)` is True at the same n on every
process, one past the largest n any process had asked about when the notice came. No
collective runs on the other steps. This is sound only if every process asks about
every n in turn, so n counts this process's questions (1, 2, 3, ... from its start, the
same on every process: they run the same loop), not the train step, which a resumed run
starts past 1; and nothing else asks (train/checkpointing.py keeps orbax from asking at
each save). A SIGTERM caught before the notifier existed (by `main`'s handler, during
the imports) is sent again to it.

A stop, once decided, stays: the process trains nothing more (a preempted upstream run
stops the run that needed it before its first step). `reset()` starts over, in one
process only (tests).
"""

import contextlib
import os
import signal
import sys


class Interrupted(BaseException):
  """Raised by the SIGTERM handler inside an interruptible region (not an Exception, so a
  task's `except Exception` cannot swallow it)."""


def _distributed() -> bool:
  """Whether jax's distributed runtime (and with it its preemption notifier) is up. Never
  imports jax: `main` installs the handler before it does."""
  jax = sys.modules.get("jax")
  return jax is not None and jax.distributed.is_initialized()


class Preemption:
  """The stop request: its SIGTERM handler, the check before each step, and the regions a
  SIGTERM aborts."""

  def __init__(self):
    self._signalled = False  # our handler saw a SIGTERM
    self._stopping = False  # every process stops before its next step
    self._asked = 0  # questions to jax's sync point
    self._armed = False  # inside an interruptible region
    self._previous = None

  def _handler(self, signum, frame):
    del signum, frame
    self._signalled = True
    if self._armed:
      self._armed = False
      raise Interrupted()

  def install(self) -> bool:
    """Installs the handler; False where it already is (`main` installs it first) or where
    jax's notifier owns SIGTERM."""
    if signal.getsignal(signal.SIGTERM) == self._handler or _distributed():
      return False
    self._previous = signal.signal(signal.SIGTERM, self._handler)
    return True

  def uninstall(self) -> None:
    signal.signal(signal.SIGTERM, self._previous)

  def should_stop(self) -> bool:
    """True when every process is to stop before its next step (ask once before each step,
    on every process)."""
    if self._stopping:
      return True
    if not _distributed():
      self._stopping = self._signalled
      return self._stopping
    if self._signalled:  # caught before jax's notifier replaced our handler
      self._signalled = False
      os.kill(os.getpid(), signal.SIGTERM)
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    self._asked += 1
    self._stopping = multihost_utils.reached_preemption_sync_point(self._asked)
    return self._stopping

  @property
  def stopped(self) -> bool:
    """Whether this run stops for a SIGTERM (one process: also one that came after the
    last check, e.g. in the last evaluation)."""
    return self._stopping or (self._signalled and not _distributed())

  @contextlib.contextmanager
  def interruptible(self):
    """A region that a SIGTERM aborts with `Interrupted` (one process: several must agree
    on the step where they stop)."""
    if _distributed():
      yield
      return
    if self._signalled:
      raise Interrupted()
    self._armed = True
    try:
      yield
    finally:
      self._armed = False

  def reset(self) -> None:
    """Forgets a stop, for another run in the same process (one process only: jax's
    notifier takes one notice per process)."""
    if _distributed():
      raise RuntimeError("a stop under jax.distributed cannot be reset")
    self._signalled = self._stopping = False

  @staticmethod
  def ignore_from_now() -> None:
    """All is saved: a SIGTERM from now on is ignored (Python restores the default action,
    which ends the process with status -15, while it shuts down)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


PREEMPTION = Preemption()
