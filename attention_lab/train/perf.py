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
import numpy as np
from absl import logging
from jax.sharding import NamedSharding

from attention_lab import devices


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


def _cpu_flops(trainer, batch) -> float | None:
  """The train step's FLOPs per device, from a compile of the same step for one CPU
  device (the whole global batch), divided by the mesh size."""
  from attention_lab.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  try:
    cpu_mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,),
                             devices=jax.devices("cpu")[:1])
    shardings = trainer_lib.state_shardings(trainer.state, cpu_mesh, "replicated")
    step = trainer_lib.jit_train_step(trainer.task, shardings)

    def abstract(x, sharding):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    state = jax.tree.map(abstract, trainer.state, shardings)
    one = NamedSharding(cpu_mesh, jax.sharding.PartitionSpec())
    batch = jax.tree.map(lambda x: abstract(x, one), batch)
    flops = compiled_flops(step.lower(state, batch).compile())
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("no FLOP count for the train step: the CPU compile failed: %s", e)
    return None
  return flops / trainer.mesh.size if flops else None


@dataclasses.dataclass
class Speed:
  """What a log interval's speed needs besides its steps and seconds."""
  global_batch: int
  num_devices: int
  flops_per_device: float | None  # one train step's FLOPs on one device
  peak_flops: float | None  # one device's peak FLOP/s at the step's dtype

  @classmethod
  def for_first_step(cls, trainer, batch) -> "Speed":
    """Compiles `trainer.train_step` for (state, batch) once, for its FLOP count; the loop's
    first call then finds the compiled program in JAX's cache (no second compile)."""
    step = trainer.train_step
    # A train step that is not a jitted function (e.g. wrapped by a caller) has no count.
    flops = (compiled_flops(step.lower(trainer.state, batch).compile())
             if hasattr(step, "lower") else None)
    if flops is None and hasattr(step, "lower"):
      flops = _cpu_flops(trainer, batch)
    kind = trainer.mesh.devices.flat[0].device_kind
    model = trainer.config.get("model") or {}
    peak = devices.peak_flops(kind, model.get("dtype", "float32"))
    return cls(trainer.config.batch_size, trainer.mesh.size, flops, peak)

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


def median(values) -> float | None:
  return float(np.median(values)) if len(values) else None
