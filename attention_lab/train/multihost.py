"""What the processes of a multi-host run agree on, and where. Every collective the loop and
the workdir make is here: none runs on a plain train step (preemption has its own sync
point, train/signals.py), only at log, evaluation and checkpoint steps, and at a run's
start and end. With one process none of them communicates."""

import jax
import numpy as np
from jax.experimental import multihost_utils


def is_primary() -> bool:
  """Process 0: the one that writes the workdir's files and speaks on the console."""
  return jax.process_index() == 0


def sync(name: str) -> None:
  """Waits until every process has reached the barrier `name`."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
  """True when `flag` is true on any process (an all-gather when there are several)."""
  if jax.process_count() == 1:
    return bool(flag)
  return bool(np.asarray(multihost_utils.process_allgather(np.int32(flag))).max())
