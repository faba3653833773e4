"""Speed in every run: examples/s, step time, achieved FLOP/s per device and MFU.

FLOPs per step per device are those of the compiled train step as attention_lab.cost counts
them: XLA's count of the program on each device, every scan (the micro-batches of
`config.microbatches`, static fori_loops) counted once per trip, and where the backend gives
no count (GPU) the step on one CPU device divided by the mesh size. XLA counts a
multiply-add as 2 FLOPs, as the peak figures do, and also counts elementwise work, so this
is the hardware's FLOP rate rather than a model-only count.

MFU = achieved FLOP/s per device / the device's peak at `config.model.dtype`, from the
table in attention_lab.devices; none on a CPU or an unknown device.
"""

import dataclasses

from absl import logging

from attention_lab import cost, devices


@dataclasses.dataclass
class Speed:
  """What a log interval's speed needs besides its steps and seconds."""
  global_batch: int
  num_devices: int
  flops_per_device: float | None  # one train step's FLOPs on one device
  peak_flops: float | None  # one device's peak FLOP/s at the step's dtype

  @classmethod
  def of_step(cls, task, train_step, state, batch, mesh, config) -> "Speed":
    """Compiles `train_step` for (state, batch) once, for its FLOP count; the loop's first
    call then finds the compiled program in JAX's cache (no second compile). `task` is
    unused: the step's own function stands in on the CPU where the device gives no count."""
    del task
    flops = None
    if hasattr(train_step, "trace"):  # a jitted step; one wrapped by a caller has no count
      try:
        flops = cost.count(train_step, state, batch)[1].flops
      except Exception as e:  # pylint: disable=broad-except  # speed is not worth a failed run
        logging.warning("no FLOP count for the train step: %s", e)
    peak = devices.peak_flops(mesh.devices.flat[0].device_kind, config.model.dtype)
    return cls(config.batch_size, mesh.size, flops, peak)

  def scalars(self, steps: int, seconds: float) -> dict[str, float]:
    """The perf/ scalars of `steps` train steps that took `seconds` (no compilation)."""
    step_seconds = seconds / steps
    per_second = self.global_batch / step_seconds
    out = {"perf/examples_per_second": per_second,
           "perf/examples_per_second_per_device": per_second / self.num_devices,
           "perf/step_seconds": step_seconds}
    if self.flops_per_device:
      achieved = self.flops_per_device / step_seconds  # FLOP/s per device
      out["perf/tflops_per_device"] = achieved / 1e12
      if self.peak_flops:
        out["perf/mfu"] = achieved / self.peak_flops
    return out


def console(global_batch: int, steps_per_second: float, scalars: dict[str, float]) -> str:
  """The progress line's speed: examples/s, and MFU where there is one."""
  text = f"{global_batch * steps_per_second:.1f} examples/s"
  if "perf/mfu" in scalars:
    text += f"  MFU {100 * scalars['perf/mfu']:.1f}%"
  return text
