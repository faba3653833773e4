"""SIGTERM (preemption) handling shared by `attention_lab.main` and the train loop.

The handler raises a flag that the loop reads after every step. Inside an
`interruptible()` region (single-process evaluation and waiting for data, where the
state of the last finished step is intact) it also aborts the region, so a long
evaluation does not delay the save.
"""

import contextlib
import signal


class Interrupted(BaseException):
  """Raised by the SIGTERM handler inside an interruptible region (not an Exception, so a
  task's `except Exception` cannot swallow it)."""


class Preemption:
  """The SIGTERM flag and handler."""

  def __init__(self):
    self.requested = False
    self._armed = False
    self._previous = None

  def _handler(self, signum, frame):
    del signum, frame
    self.requested = True
    if self._armed:
      self._armed = False
      raise Interrupted()

  def install(self) -> bool:
    """Installs the handler; False when it was already installed (e.g. by `main`)."""
    if signal.getsignal(signal.SIGTERM) == self._handler:
      return False
    self._previous = signal.signal(signal.SIGTERM, self._handler)
    return True

  def uninstall(self) -> None:
    signal.signal(signal.SIGTERM, self._previous)

  @contextlib.contextmanager
  def interruptible(self, enabled: bool = True):
    """A region that a SIGTERM aborts with `Interrupted` (when `enabled`)."""
    if not enabled:
      yield
      return
    if self.requested:
      raise Interrupted()
    self._armed = True
    try:
      yield
    finally:
      self._armed = False


PREEMPTION = Preemption()


