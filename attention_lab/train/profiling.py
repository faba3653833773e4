"""A jax.profiler trace of chosen train steps: `config.profile_steps = (start, end)`.

The trace covers the steps that take the state from step `start` to step `end` (so
`start` > 0 leaves out the first step, which compiles; a resumed run also leaves out its
first step) and is written to <workdir>/profile/ by process 0, or by every process with
`config.profile_all_processes`. Open it with TensorBoard's profile plugin (`tensorboard
--logdir <workdir>/profile`) or XProf, or load the .xplane.pb / .trace.json.gz in
Perfetto (ui.perfetto.dev).
"""

import jax
from etils import epath


def steps(config) -> tuple[int, int] | None:
  """`config.profile_steps` as (start, end), or None for no trace; ValueError otherwise."""
  value = config.profile_steps
  if value is None or value == "" or (isinstance(value, (tuple, list)) and all(
      v in ("", None) for v in value)):
    return None
  ok = (isinstance(value, (tuple, list)) and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 0 < value[0] < value[1])
  if not ok:
    raise ValueError(f"profile_steps = {value!r}: must be two ints (start, end) with "
                     "0 < start < end, or () for no trace")
  return tuple(value)


class StepProfiler:
  """Starts and stops the trace around the loop's train steps."""

  def __init__(self, config, workdir: str, first_step: int):
    window = steps(config)
    writes = jax.process_index() == 0 or bool(config.profile_all_processes)
    self.start, self.end = window if window and writes else (None, None)
    if self.start is not None:
      self.start = max(self.start, first_step + 1)  # never the run's compiling step
    self.directory = str(epath.Path(workdir) / "profile")
    self.tracing = False

  def before_step(self, step: int) -> None:
    """Called with the state's step before the train step runs."""
    if self.start is not None and step == self.start and step < self.end:
      jax.profiler.start_trace(self.directory)
      self.tracing = True

  def after_step(self, step: int, state) -> None:
    """Called with the new step and state after the train step was dispatched."""
    if self.tracing and step >= self.end:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    if self.tracing:
      self.tracing = False
      jax.profiler.stop_trace()
