"""Entry point: python -m attention_lab.main --config=configs/<file>.py[:preset] --workdir=DIR.

Any config field can be overridden with --config.<key>=<value>. `--until_step=N` stops
after step N (`0`: only the evaluation of the initial model, a learning curve's start);
`--json=PATH` also writes the final line's metrics and each perf/ scalar's median as JSON.

Multi-host (TPU pod slices, several GPU hosts, SLURM): every process runs the same
command. `--coordinator_address=HOST:PORT --num_processes=N --process_id=I` are
passed to `jax.distributed.initialize`; without them it is called (with no
arguments) only where JAX detects a cluster by itself (Cloud TPU VMs, SLURM,
Kubernetes JobSets) or when `--config.distributed=True`.

The console: one line per log step, one per evaluation, a final line, all on
stdout from process 0 only; library INFO chatter is hidden unless --verbosity (or -v
N) is given. A bad configuration is one line on stderr naming the field, the
value and what is allowed, with exit status 2 (--debug: the traceback instead); a
non-finite loss is one line and exit status 1; SIGTERM saves the step reached and
exits 0. The faults of the disk and the data are one line and exit status 2, like a bad
configuration: a checkpoint that cannot be saved (no space, no permission; the last good
checkpoint stays the latest), no checkpoint that restores (a damaged newer step alone is
moved aside with a warning, and the run resumes from the newest good one), a workdir
started with another config, a damaged dataset file (the step reached is saved first).
"""

import ctypes
import json
import os
import sys

from attention_lab.train.signals import PREEMPTION  # light: no jax, no TensorFlow

if __name__ == "__main__":
  PREEMPTION.install()  # a SIGTERM during the slow imports below stops the run before step 1
  if not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # TF 2.21 logs its oneDNN notice at any TF_CPP_MIN_LOG_LEVEL

# pylint: disable=g-import-not-at-top,wrong-import-position
import logging as std_logging

import jax
from absl import app, flags, logging
from etils import epath
from ml_collections import config_flags

from attention_lab import cli
from attention_lab.train import compilation_cache
from attention_lab.train import workdir as workdir_lib

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", None, "Experiment config file.")
_WORKDIR = cli.define_once(flags.DEFINE_string, "workdir", None, "Directory for checkpoints and TensorBoard logs.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "Multi-host: HOST:PORT of process 0's coordinator service.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Multi-host: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Multi-host: this process's index.")
_DEBUG = cli.define_once(flags.DEFINE_bool, "debug", False, "Show tracebacks instead of one-line errors.")
_JSON = cli.define_once(flags.DEFINE_string, "json", None,
                        "Also write the Final: metrics and each perf/ scalar's median here.")
_UNTIL_STEP = flags.DEFINE_integer(
    "until_step", None, "Stop after this step (the schedule still spans the config's steps); "
    "0 evaluates the initial model only.", lower_bound=0)


def initialize_distributed(config) -> None:
  """jax.distributed.initialize from the flags, or with what JAX detects by itself (Cloud
  TPU VMs, SLURM, Kubernetes JobSets: it raises ValueError where it finds no cluster);
  `config.distributed` insists on a cluster."""
  given = {"coordinator_address": _COORDINATOR.value, "num_processes": _NUM_PROCESSES.value,
           "process_id": _PROCESS_ID.value}
  given = {k: v for k, v in given.items() if v is not None}
  try:
    jax.distributed.initialize(**given)
  except ValueError as e:
    if given or config.distributed:
      missing = sorted({"coordinator_address", "num_processes", "process_id"} - set(given))
      raise cli.ConfigError(
          f"--{', --'.join(missing)} missing: multi-host needs --coordinator_address, "
          "--num_processes and --process_id together where JAX detects no cluster"
          if missing else f"jax.distributed.initialize: {e}") from None


def keep_freed_host_memory() -> bool:
  """On the CPU backend, lets freed memory stay in the process for the next step (glibc).

  XLA:CPU allocates a step's temporaries as one large buffer. glibc serves an allocation
  over 32 MB with its own mmap and unmaps it when it is freed, so without this every step
  would fault its whole buffer in again (the cost is measured in
  experiments/results/default_segmentation.md). Here no allocation is mmapped and the heap
  is trimmed only past 1 GiB of free top; with `jax_cpu_enable_async_dispatch` off
  (main()) the steps run on the main thread, so their buffers come from the main heap.
  The arithmetic is unchanged; the process keeps more memory. Returns whether it applied
  (glibc, CPU backend).
  """
  if jax.default_backend() != "cpu":
    return False
  mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc only
  if mallopt is None:
    return False
  m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
  return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 1 << 30))


class _QuietLibraries(std_logging.Filter):
  """Keeps orbax's per-save INFO chatter out of a verbose console, and (but for --debug)
  its errors: a failed background save is logged with a traceback by each of its threads,
  and the same error is raised to the loop, which reports it in one line. Warnings pass."""

  def filter(self, record):
    if record.name == "asyncio":  # "Task exception was never retrieved" of orbax's writes
      return _DEBUG.value or "/orbax/" not in record.getMessage()
    if "/orbax/" not in record.pathname:
      return True
    if record.levelno >= std_logging.ERROR:
      return _DEBUG.value
    return record.levelno >= std_logging.WARNING


def _quiet_closed_loop_callbacks() -> None:
  """After a failed save, tensorstore completes orbax's abandoned writes on an event loop
  that has closed; each 'RuntimeError: Event loop is closed' raised in asyncio from that
  callback reaches sys.unraisablehook as a traceback; so do the read coroutines of a
  failed restore. Those are dropped; every other unraisable exception is printed as
  before."""
  previous = sys.unraisablehook

  def hook(unraisable):
    tb = unraisable.exc_traceback
    closed_loop = (isinstance(unraisable.exc_value, RuntimeError)
                   and str(unraisable.exc_value) == "Event loop is closed"
                   and tb is not None and "asyncio" in tb.tb_frame.f_code.co_filename)
    # A failed restore's read coroutines that orbax never awaited (the failure itself is
    # reported in one line by the checkpoint policy).
    orbax_read = "/orbax/" in getattr(getattr(unraisable.object, "cr_code", None),
                                      "co_filename", "")
    if not (closed_loop or orbax_read):
      previous(unraisable)

  sys.unraisablehook = hook


def write_final(path: str, summary: dict[str, float], record) -> None:
  """The Final: line's metrics at full precision, with the median of each perf/ scalar over
  the workdir's log steps (compilation excluded, `record`: the run summary), as JSON."""
  epath.Path(path).write_text(json.dumps(
      {**{k: float(v) for k, v in summary.items()}, **record.perf_medians()},
      indent=1, sort_keys=True))


def main(argv):
  del argv
  logging.get_absl_handler().addFilter(_QuietLibraries())
  if not _DEBUG.value:
    _quiet_closed_loop_callbacks()
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  PREEMPTION.install()  # where main() is called without the command's early install
  # TensorFlow, TFDS and the trainer load here, after the flags are checked, so a bad
  # command line is reported in about a second.
  with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
    from attention_lab.train import console, dependencies, errors, trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  # Before the backend starts: CPU programs run on the calling thread (keep_freed_host_memory).
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  try:
    initialize_distributed(config)
    compilation_cache.enable(config.compilation_cache_dir)
    with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
      jax.devices()  # backend start-up (libtpu probes on a machine without TPUs)
    keep_freed_host_memory()
    if jax.process_index() > 0 and not flags.FLAGS["verbosity"].present:
      logging.set_verbosity(logging.ERROR)  # process 0 speaks for all
    resolved = dependencies.resolve(config, _WORKDIR.value)
    trainer = trainer_lib.Trainer(config, _WORKDIR.value, resolved)
    console.print_line(
        f"{jax.process_count()} process(es), {jax.device_count()} "
        f"{jax.devices()[0].platform} device(s); TensorBoard logs: tensorboard --logdir "
        f"{workdir_lib.resolve(_WORKDIR.value)}")
    summary = trainer.run(until_step=_UNTIL_STEP.value)
  except Exception as e:  # pylint: disable=broad-except
    failure = errors.one_line(e, config)
    if failure is None or _DEBUG.value:
      raise
    if isinstance(e, errors.CheckpointError):  # not waiting minutes for failed writes' retries
      print(f"error: {failure[0]}", file=sys.stderr, flush=True)
      sys.stdout.flush()
      os._exit(failure[1])  # pylint: disable=protected-access
    cli.fail(*failure)
  if not trainer.preempted:
    speed = trainer.median_examples_per_second()
    if speed is not None:  # the median over the log intervals
      summary = {**summary, "examples_per_second": speed}
    console.print_line("Final: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(summary.items())))
    if _JSON.value and jax.process_index() == 0:
      write_final(_JSON.value, summary, trainer.record)
  PREEMPTION.ignore_from_now()  # all is saved


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])  # as a command only: other modules and tests import this one
  app.run(main, flags_parser=cli.parse_flags)
