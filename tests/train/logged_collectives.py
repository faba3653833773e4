"""`python -m tests.train.logged_collectives <attention_lab.main's flags>`: the entry point
with every cross-host collective of jax.experimental.multihost_utils logged, and each
question to the preemption sync point. Each call appends "<name> <train steps taken so
far> [the count asked about]" to `$COLLECTIVES_LOG.<process id>`; the steps are counted at
the jitted train step."""

import os
import runpy
import sys

import jax
from jax.experimental import multihost_utils

from attention_lab.train import state

STEPS = [0]
COLLECTIVES = ("process_allgather", "sync_global_devices", "broadcast_one_to_all",
               "reached_preemption_sync_point")


def _logged(name, function):
  def logged(*args, **kwargs):
    asked = args[0] if name == "reached_preemption_sync_point" else ""
    with open(f"{os.environ['COLLECTIVES_LOG']}.{jax.process_index()}", "a") as f:
      f.write(f"{name} {STEPS[0]} {asked}\n")
    return function(*args, **kwargs)
  return logged


class _CountedStep:
  """The jitted train step, counting its calls (`lower` and the rest pass through)."""

  def __init__(self, step):
    self.step = step

  def __call__(self, *args, **kwargs):
    STEPS[0] += 1
    return self.step(*args, **kwargs)

  def __getattr__(self, name):
    return getattr(self.step, name)


for _name in COLLECTIVES:
  setattr(multihost_utils, _name, _logged(_name, getattr(multihost_utils, _name)))
_jit_train_step = state.jit_train_step
state.jit_train_step = lambda *args: _CountedStep(_jit_train_step(*args))

if __name__ == "__main__":
  sys.argv[0] = "attention_lab.main"
  runpy.run_module("attention_lab.main", run_name="__main__", alter_sys=True)
