"""The entry point's process set-up: on the CPU, a step's freed temporaries stay in the
process instead of being unmapped and faulted in again at the next step."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).parents[1]

# A program with a 64 MB intermediate (above glibc's 32 MB mmap limit), run 10 times after 10
# warm-up runs; prints the fewest minor page faults of a run.
PROGRAM = """
import resource, sys
import jax, jax.numpy as jnp
if sys.argv[1] == "keep":  # as attention_lab.main does
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  from attention_lab import main
  assert main.keep_freed_host_memory()
f = jax.jit(lambda a, b: (a @ b) @ a)  # (4096, 4096) float32 in between
a, b = jnp.ones((4096, 16)), jnp.ones((16, 4096))
for _ in range(10):  # the heap grows to its working size
  f(a, b).block_until_ready()
faults = []
for _ in range(10):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(a, b).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(faults))
"""


def _fewest_faults_of_a_run(mode: str) -> int:
  result = subprocess.run([sys.executable, "-c", PROGRAM, mode], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return int(result.stdout.split()[-1])


def test_cpu_steps_reuse_their_freed_temporaries():
  """Without the set-up every run faults its 64 MB in again (16k pages of 4 KiB); with it,
  a run can fault none."""
  assert _fewest_faults_of_a_run("default") > 8000
  assert _fewest_faults_of_a_run("keep") < 100
