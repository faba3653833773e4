"""Micro-batches on the CPU: the default experiment's train step (configs/default.py, batch 64)
at k = 1 and k = 4 side by side in one process, k = 4 both as a scan (what GPUs and TPUs run)
and unrolled (what the CPU runs, train/microbatch.py).

  python -m experiments.microbatches_cpu [--repeats=7]

Writes experiments/results/microbatches_cpu.{md,json}: examples/s, TFLOP/s per device
(attention_lab.cost's FLOPs over the median step time) and temporaries, with the commit.
"""

import contextlib
import subprocess

import jax
import jax.numpy as jnp
from absl import flags

from attention_lab import cost
from attention_lab.train import microbatch, state as state_lib, tasks
from configs import default
from experiments import measure

_REPEATS = flags.DEFINE_integer("repeats", 7, "Interleaved timing rounds.")
PROGRAMS = {"k=1": (1, True), "k=4, scan": (4, False), "k=4, unrolled": (4, True)}


@contextlib.contextmanager
def _unrolled(unroll: bool):
  """Traces micro-batches unrolled on the CPU (the default) or as a scan."""
  saved = microbatch.UNROLLED_ON_CPU
  microbatch.UNROLLED_ON_CPU = saved if unroll else 0
  try:
    yield
  finally:
    microbatch.UNROLLED_ON_CPU = saved


def program(k: int, unroll: bool):
  """(compiled step, its cost.Cost, (state, batch)) of the default step at k on one device."""
  config = default.get_config()
  config.microbatches, config.mesh.num_devices = k, 1
  mesh = state_lib.make_mesh(config, jax.devices()[:1])
  task = tasks.create(config, tasks.Environment(mesh, "", config.batch_size))
  train = state_lib.StateLayout(task, mesh, "replicated")
  state = train.init()
  batch = {name: jnp.zeros(s.shape, s.dtype) for name, s in task.batch_spec().items()}
  batch["image"] = jax.random.uniform(jax.random.key(0), batch["image"].shape)
  with _unrolled(unroll):  # not donated: timed again and again on the same state
    compiled, counted = cost.count(jax.jit(task.train_step), state, batch)
  return compiled, counted, (state, batch)


def main(argv):
  del argv
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"
  built = {name: program(*spec) for name, spec in PROGRAMS.items()}
  times = measure.time_side_by_side({n: (c, args) for n, (c, _, args) in built.items()},
                                    _REPEATS.value, min_sample_s=1.0)
  batch = default.get_config().batch_size
  rows = {name: {"microbatches": PROGRAMS[name][0], "unrolled": PROGRAMS[name][1],
                 "step_s": times[name]["time_s"], "samples_s": times[name]["samples"],
                 "examples_per_s": batch / times[name]["time_s"],
                 "flops": counted.flops, "flops_source": counted.source,
                 "tflops_per_device": counted.flops / times[name]["time_s"] / 1e12,
                 "xla_flops_loop_once": cost.xla_cost(compiled)["flops"],
                 "temp_bytes": counted.temp_bytes}
          for name, (compiled, counted, _) in built.items()}
  machine = measure.machine()
  lines = [
      "# Micro-batches on the CPU", "",
      f"Measured at commit {commit} on {measure.machine_line(machine)}. Command: "
      "`python -m experiments.microbatches_cpu`. The default experiment's train step (batch "
      f"64, one device), medians of {_REPEATS.value} interleaved rounds in one process. "
      "FLOPs: attention_lab.cost (micro-batches counted k times); 'XLA alone' counts a "
      "loop body once.", "",
      *measure.md_table({
          "program": lambda n: n,
          "examples/s": lambda n: f"{rows[n]['examples_per_s']:.0f}",
          "× k=1": lambda n: f"{rows[n]['examples_per_s'] / rows['k=1']['examples_per_s']:.2f}",
          "step ms": lambda n: f"{1e3 * rows[n]['step_s']:.0f}",
          "GFLOP/step": lambda n: f"{rows[n]['flops'] / 1e9:.3f}",
          "XLA alone GFLOP": lambda n: f"{rows[n]['xla_flops_loop_once'] / 1e9:.3f}",
          "TFLOP/s per device": lambda n: f"{rows[n]['tflops_per_device']:.4f}",
          "temporaries MiB": lambda n: f"{rows[n]['temp_bytes'] / 2**20:.1f}"}, rows), ""]
  print(measure.write(measure.RESULTS, "microbatches_cpu",
                      {"commit": commit, "machine": machine, "rows": rows}, "\n".join(lines)))


if __name__ == "__main__":
  measure.run(main)
