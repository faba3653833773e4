"""Speed in every run: examples/s, step time, achieved FLOP/s per device and MFU.

FLOPs per step come from XLA's cost analysis of the compiled train step. For a program
partitioned over a mesh, XLA compiles one per-device program, so the count is per
device (checked: the default experiment's step on 8 CPU devices counts 1/8 of its
1-device count, within 1%). Where the backend gives no count (GPU), the same step is
compiled for one CPU device and its count divided by the mesh size (data parallel: every
device does an equal share). XLA counts a multiply-add as 2 FLOPs, as the peak figures
do, and also counts elementwise work, so this is the hardware's FLOP rate rather than a
model-only count; a `while` loop's body (lax.scan, fori_loop) is counted once.

MFU = achieved FLOP/s per device / the device's peak at `config.model.dtype`, from the
table in attention_lab.devices; none on a CPU or an unknown device.
"""

import dataclasses

import jax
from absl import logging
from jax.sharding import NamedSharding

from attention_lab import devices
from attention_lab.train import state as state_lib


def compiled_flops(compiled) -> float | None:
  """FLOPs of one call of a compiled program, per device; None when XLA gives none."""
  try:
    cost = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
    cost = cost[0] if cost else None
  flops = (cost or {}).get("flops")
  return float(flops) if flops and flops > 0 else None


def _cpu_flops(task, state, batch, num_devices: int) -> float | None:
  """The train step's FLOPs per device, from a compile of the same step for one CPU
  device (the whole global batch), divided by `num_devices`."""
  try:
    cpu_mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,),
                             devices=jax.devices("cpu")[:1])
    shardings = state_lib.state_shardings(state, cpu_mesh, "replicated")
    one = NamedSharding(cpu_mesh, jax.sharding.PartitionSpec())
    flops = compiled_flops(state_lib.jit_train_step(task, shardings).lower(
        state_lib.abstract_arrays(state, shardings),
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), batch),
    ).compile())
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("no FLOP count for the train step: the CPU compile failed: %s", e)
    return None
  return flops / num_devices if flops else None


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
    call then finds the compiled program in JAX's cache (no second compile)."""
    # A train step that is not a jitted function (e.g. wrapped by a caller) has no count.
    flops = None
    if hasattr(train_step, "lower"):
      flops = (compiled_flops(train_step.lower(state, batch).compile())
               or _cpu_flops(task, state, batch, mesh.size))
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
