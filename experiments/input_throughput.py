"""Input-pipeline rate of every paper config against what one accelerator host needs: can this
host's CPUs feed it? Train examples per second of a config's input pipeline (read, decode,
augment, batch; no model), on 1 core and on all of them.

  python -m experiments.input_throughput [--configs=a.py,b.py] [--seconds=10] [--windows=3]
      [--warmup=5] [--batch_size=32] [--examples=300] [--cores=1,all] [--data_root=DIR]
      [--table_only]

Every paper train config (configs/{sanet,aa,kanet,hamburger,isa}/*.py) →
experiments/results/input_throughput.{md,json}; `--configs` (FILE[:preset], comma-separated)
replaces only their rows.

Data: the config's real dataset where it is prepared on this host; otherwise stand-in
files in the dataset's real on-disk format (experiments/stand_in_files.py: a prepared
TFDS directory written with the builder's own features, or the manual-download layout our
builders prepare), `--examples` of them, repeated by the pipeline. With stand-ins the
shuffle buffer is capped at `--examples`: it holds encoded records, so its size costs
memory and fill time, not work per example.

Measurement: the task's own `train_batches(0)` (`tasks.create(config, env)`: the stream a
run trains on), at `--batch_size` examples per batch (a host's batch divided into pieces;
the work per example does not depend on it). Each core count runs in a fresh process
that, before TensorFlow starts, (1) pins itself to that many cores with
`os.sched_setaffinity`, so the kernel runs every thread of it (tf.data's pool, TF's op
pools, the reader) on those cores only — "1 core" is one core, however many threads —
and (2) sizes TF's intra- and inter-op pools to the same count (tf.data's private pool
follows the affinity through `pipeline.tf_data_options`). After `--warmup` seconds (the
shuffle buffer fills, the first batches are prefetched) it counts examples over
`--windows` windows of `--seconds` each, whole batches, and reports their median. A GAN
batch holds d_steps images per batch element; all are counted.

Two rates per window: examples per wall second, and examples per CPU-second of the
process (`time.process_time`: user + system time of all its threads, tf.data's and TF's
pools included). The wall rate falls when other jobs share the cores; the CPU-second
rate hardly does: it is what one core dedicated to this pipeline delivers, so the cores
an accelerator host needs are computed from the 1-core run's CPU-second rate. (It leaves
out time the pipeline waits on the disk; here the files are in the page cache.)

Needed rate: what one accelerator host consumes when the train step runs at its roofline
time, needed examples/s = per-host batch / step time (× d_steps for a GAN):
- TPU v5e host (4 chips, as ct5lp-hightpu-4t: 4 v5e chips, 112 vCPUs; the v5e:2x2 slice
  is one such host): the per-chip batch and roofline step time of `attention_lab.aot`'s
  v5e:2x2 compile (experiments/results/aot/<config>_v5e_2x2.json), or of v5e:4x4 where
  2x2 does not fit, × 4 chips.
- 8×H100 host: the GPU aot rows (experiments/results/aot_gpu.json, h100x8) where present;
  otherwise the roofline of the TPU compile's costs on 8 H100s: time per example =
  max(FLOPs / peak at the model's dtype, bytes accessed / HBM bandwidth) (FLOPs and bytes
  per example = per chip × chips / global batch; H100 SXM figures from
  `attention_lab.devices`). Bytes count too: the small ImageNet nets are memory-bound,
  and FLOPs alone would claim ~60× their rate. XLA:GPU fuses differently from XLA:TPU,
  so this is an estimate.
Cores needed = needed rate / the 1-core examples per CPU-second (the all-core rates show
how well it scales here).
"""

import datetime
import glob
import json
import multiprocessing
import os
import statistics
import tempfile
import time

from absl import app, flags

from attention_lab import cli

# experiments.measure (jax) and experiments.stand_in_files (TFDS) are imported where they are
# used: each core count's worker imports this module, and pins its cores before TF starts.

_CONFIGS = cli.define_once(flags.DEFINE_list, "configs", None,
                           "Config files (default: every paper config).")
_TABLE_ONLY = cli.define_once(flags.DEFINE_bool, "table_only", False,
                              "Only rebuild the table from the JSON.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Length of one measuring window.")
_WINDOWS = flags.DEFINE_integer("windows", 3, "Measuring windows (the median is reported).")
_WARMUP = flags.DEFINE_float("warmup", 5.0, "Seconds of batches read before measuring.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Examples per batch (at most config.batch_size).")
_EXAMPLES = flags.DEFINE_integer("examples", 300, "Stand-in examples written when the real "
                                 "data are not prepared.")
_CORES = flags.DEFINE_list("cores", ["1", "all"], "Core counts to measure ('all': every core "
                           "this process may use).")
_DATA_ROOT = flags.DEFINE_string("data_root", "", "Where stand-in files go (default: a "
                                 "temporary directory, removed afterwards).")

# Datasets made here from bundled data (prepared on first use, no download).
EMBEDDED = ("digits", "digit_scenes", "restoration_photos", "synthetic_volumes")
V5E_CHIPS_PER_HOST = 4
H100_PER_HOST = 8


def available_cores() -> list[int]:
  return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(
      range(os.cpu_count()))


# Data ----------------------------------------------------------------------------------------

def real_data_prepared(config) -> bool:
  """Whether config.dataset can be read here without a download: embedded datasets always;
  others when prepared under dataset.data_dir or when dataset.manual_dir /
  dataset.image_dir names a folder (a dataset with no stand-in writer and none of these
  is then refused by `stand_in_files.write` with a one-line error)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  # Registers our manual-download builders with TFDS by name.
  from attention_lab.data import restoration, segmentation  # pylint: disable=g-import-not-at-top,unused-import
  dataset = config.dataset
  if dataset.name.split("/")[0] in EMBEDDED:
    return True
  for folder in (dataset.get("manual_dir"), dataset.get("image_dir")):
    if folder and os.path.isdir(folder):
      return True
  try:
    return tfds.builder(dataset.name, data_dir=dataset.get("data_dir") or None).is_prepared()
  except tfds.core.registered.DatasetNotFoundError:
    return False


def with_data(config, root: str, num_examples: int):
  """(config reading the real data or stand-ins written under `root`, "real" | "stand-in")."""
  from experiments import stand_in_files  # pylint: disable=g-import-not-at-top
  config = config.copy_and_resolve_references()
  if real_data_prepared(config):
    return config, "real"
  with config.unlocked():
    for field, value in stand_in_files.write(config, root, num_examples, seed=config.seed).items():
      config.dataset[field] = value
    if "shuffle_buffer" in config.dataset:
      config.dataset.shuffle_buffer = min(config.dataset.shuffle_buffer, num_examples)
  return config, "stand-in"


# Measurement ---------------------------------------------------------------------------------

def measure_in_process(config, batch_size: int, seconds: float, windows: int, warmup: float) -> dict:
  """Examples/s of this process's train stream: median of `windows` windows."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import AxisType  # pylint: disable=g-import-not-at-top
  from attention_lab.train import tasks  # pylint: disable=g-import-not-at-top
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.batch_size = batch_size
  mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:1])
  task = tasks.create(config, tasks.Environment(mesh, tempfile.gettempdir(), batch_size))
  per_batch = batch_size * getattr(task, "d_steps", 1)
  batches = task.train_batches(0)
  start, first = time.perf_counter(), None
  while first is None or time.perf_counter() - start < warmup:
    batch = next(batches)
    first = first or time.perf_counter() - start
  rates, cpu_rates = [], []
  for _ in range(windows):
    count, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while not count or time.perf_counter() - start < seconds:
      next(batches)
      count += 1
    rates.append(count * per_batch / (time.perf_counter() - start))
    cpu_rates.append(count * per_batch / max(time.process_time() - cpu_start, 1e-9))
  shapes = {k: list(v.shape) for k, v in batch.items()}
  return {"examples_per_s": statistics.median(rates), "window_rates": rates,
          "examples_per_cpu_s": statistics.median(cpu_rates), "window_cpu_rates": cpu_rates,
          "first_batch_s": first, "batch_shapes": shapes, "examples_per_batch": per_batch}


def _worker(config, cores, batch_size, seconds, windows, warmup, queue):
  """A fresh process: pinned to `cores` and TF pools of that size before TF starts."""
  os.sched_setaffinity(0, cores)
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the pipeline only; no accelerator needed
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(len(cores))
  tf.config.threading.set_inter_op_parallelism_threads(len(cores))
  tf.config.set_visible_devices([], "GPU")
  try:
    result = measure_in_process(config, batch_size, seconds, windows, warmup)
    queue.put({**result, "affinity": sorted(os.sched_getaffinity(0)),
               "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()})
  except Exception as e:  # pylint: disable=broad-except
    queue.put({"error": f"{type(e).__name__}: {e}"})


def measure_on_cores(config, cores: list[int], *, batch_size: int, seconds: float,
                     windows: int, warmup: float) -> dict:
  """`measure_in_process` in a fresh process restricted to `cores` (see the module docstring)."""
  context = multiprocessing.get_context("spawn")
  queue = context.Queue()
  process = context.Process(target=_worker, args=(config, list(cores), batch_size, seconds,
                                                   windows, warmup, queue))
  process.start()
  result = queue.get()
  process.join()
  if "error" in result:
    raise RuntimeError(f"measuring on {len(cores)} core(s) failed: {result['error']}")
  return {**result, "cores": len(cores)}


# What an accelerator host needs --------------------------------------------------------------

def config_stem(config_path: str) -> str:
  """configs/sanet/imagenet.py → sanet_imagenet (the aot results' file names)."""
  path = config_path.split(":")[0]
  path = path[len("configs/"):] if path.startswith("configs/") else os.path.basename(path)
  return path[:-len(".py")].replace("/", "_")


def _read(path):
  with open(path) as f:
    return json.load(f)


def v5e_host_need(aot_dir: str, stem: str, images_per_element: int = 1) -> dict | None:
  """Examples/s one 4-chip v5e host consumes at the aot roofline step time."""
  for topology in ("v5e_2x2", "v5e_4x4"):
    path = os.path.join(aot_dir, "aot", f"{stem}_{topology}.json")
    if not os.path.exists(path):
      continue
    row = _read(path)
    if not row.get("fits", True) and topology == "v5e_2x2":
      continue
    host_batch = row["global_batch"] * V5E_CHIPS_PER_HOST / row["chips"]
    return {"source": f"aot {topology.replace('_', ':', 1)}", "host_batch": host_batch,
            "step_time_s": row["step_time_s"],
            "examples_per_s": host_batch * images_per_element / row["step_time_s"]}
  return None


def cost_per_example(aot_dir: str, stem: str) -> dict | None:
  """Train-step FLOPs and bytes accessed per batch element, from the TPU compile (per chip ×
  chips / global batch)."""
  for topology in ("v5e_2x2", "v5e_4x4"):
    path = os.path.join(aot_dir, "aot", f"{stem}_{topology}.json")
    if os.path.exists(path):
      row = _read(path)
      return {"flops": row["flops"] * row["chips"] / row["global_batch"],
              "bytes": row["bytes_accessed"] * row["chips"] / row["global_batch"]}
  return None


def _gpu_row(aot_dir: str, stem: str) -> dict | None:
  path = os.path.join(aot_dir, "aot_gpu.json")
  if not os.path.exists(path):
    return None
  rows = _read(path)
  rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
  for row in rows:
    if (config_stem(str(row.get("config", ""))) == stem and str(row.get("topology")) == "h100x8"
        and row.get("step_time_s") and row.get("global_batch")):
      return row
  return None


def h100_host_need(aot_dir: str, stem: str, dtype: str, images_per_element: int = 1
                   ) -> dict | None:
  """Examples/s one 8×H100 host consumes: the GPU aot row, else 8 / the roofline time of
  one example, max(FLOPs / peak, bytes / HBM bandwidth), with the TPU compile's costs."""
  from attention_lab import devices  # pylint: disable=g-import-not-at-top
  row = _gpu_row(aot_dir, stem)
  if row is not None:
    return {"source": "aot h100x8", "step_time_s": row["step_time_s"],
            "examples_per_s": row["global_batch"] * images_per_element / row["step_time_s"]}
  cost = cost_per_example(aot_dir, stem)
  if cost is None:
    return None
  h100 = devices.lookup("H100")
  seconds = max(cost["flops"] / h100.peak(dtype), cost["bytes"] / h100.memory_bandwidth)
  return {"source": f"TPU-compile FLOPs and bytes / H100 {dtype} roofline",
          "flops_per_example": cost["flops"], "bytes_per_example": cost["bytes"],
          "examples_per_s": H100_PER_HOST / seconds * images_per_element}


def cores_needed(needed_rate: float, rate_per_core: float) -> float:
  return needed_rate / rate_per_core


# One config --------------------------------------------------------------------------------

def run(config, config_path: str, *, batch_size: int, seconds: float, windows: int,
        warmup: float, examples: int, core_counts: list[str], data_root: str,
        aot_dir: str) -> dict:
  """The whole measurement of one config: data, rates per core count, needed rates."""
  batch_size = min(batch_size, config.batch_size)
  everything = available_cores()
  with tempfile.TemporaryDirectory() as scratch:
    config, source = with_data(config, data_root or scratch, examples)
    rates = {}
    for count in core_counts:
      cores = everything if count == "all" else everything[:int(count)]
      rates[str(len(cores))] = measure_on_cores(config, cores, batch_size=batch_size,
                                                seconds=seconds, windows=windows, warmup=warmup)
  stem = config_stem(config_path)
  per_element = int(config.get("d_steps", 1) or 1) if config.get("task") == "gan" else 1
  dtype = config.model.get("dtype", "float32") if "model" in config else "float32"
  result = {"config": config_path, "dataset": config.dataset.name, "data": source,
            "batch_size": batch_size, "rates": rates, "images_per_batch_element": per_element,
            "v5e_host": v5e_host_need(aot_dir, stem, per_element),
            "h100x8_host": h100_host_need(aot_dir, stem, dtype, per_element)}
  one = rates.get("1", {}).get("examples_per_cpu_s")
  for host in ("v5e_host", "h100x8_host"):
    if result[host] and one:
      result[host]["cores_needed"] = cores_needed(result[host]["examples_per_s"], one)
  return result


def summary(result: dict) -> str:
  lines = [f"{result['config']}: {result['dataset']} ({result['data']} data), "
           f"batches of {result['batch_size']}"]
  for cores, r in result["rates"].items():
    lines.append(f"  {cores} core(s): {r['examples_per_s']:.1f} examples/s (windows "
                 f"{', '.join(f'{x:.1f}' for x in r['window_rates'])}); "
                 f"{r['examples_per_cpu_s']:.1f} examples per CPU-second")
  for host, label in (("v5e_host", "TPU v5e host (4 chips)"), ("h100x8_host", "8×H100 host")):
    need = result[host]
    if need is None:
      lines.append(f"  {label}: no aot result for this config")
      continue
    cores = (f", {need['cores_needed']:.1f} cores at the 1-core rate per CPU-second"
             if "cores_needed" in need else "")
    lines.append(f"  {label} needs {need['examples_per_s']:.0f} examples/s "
                 f"({need['source']}){cores}")
  return "\n".join(lines)


def paper_configs() -> list[str]:
  return sorted(p for paper in ("sanet", "aa", "kanet", "hamburger", "isa")
                for p in glob.glob(f"configs/{paper}/*.py") if "def get_config" in open(p).read())


def _row(r: dict) -> str:
  if "error" in r:
    return f"| {r['config']} | not measured: {r['error']} |" + " |" * 8
  f = lambda v, d=0: "—" if v is None else f"{v:,.{d}f}"  # pylint: disable=C3001
  one, every = r["rates"].get("1", {}), r["rates"][max(r["rates"], key=int)]
  v5e, h100 = r["v5e_host"] or {}, r["h100x8_host"] or {}
  return (f"| {r['config']} | {r['dataset']} ({r['data']}) | {f(one.get('examples_per_s'), 1)} | "
          f"{f(one.get('examples_per_cpu_s'), 1)} | {f(every['examples_per_s'], 1)} "
          f"({every['cores']}) | {f(every.get('examples_per_cpu_s'), 1)} | "
          f"{f(v5e.get('examples_per_s'))} ({v5e.get('source', 'no aot')}) | "
          f"{f(v5e.get('cores_needed'), 1)} | {f(h100.get('examples_per_s'))} | "
          f"{f(h100.get('cores_needed'), 1)} |")


def table(results: list[dict], machine: dict) -> str:
  o = flags.FLAGS
  missing = [p for p in paper_configs() if p not in {r["config"] for r in results}]
  return "\n".join([
      "# Input-pipeline rate per paper config (`python -m experiments.input_throughput`)", "",
      f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['date']}, shared with "
      f"other jobs: 1-min load average {machine['load_average'][0]:.1f} at the start"
      + (f", {machine['load_after'][0]:.1f} at the end" if machine.get("load_after") else "")
      + ".", "",
      "Each row: `python -m experiments.input_throughput --configs=<config>` (its docstring "
      "states the method): the task's own train stream (read, decode, augment, batch; no "
      f"model) pinned to 1 core and to all cores, median of {o.windows} windows of "
      f"{o.seconds:g} s after {o.warmup:g} s of warm-up, batches of {o.batch_size} (or the "
      "config's batch where smaller); the real "
      f"data where prepared, else {o.examples} stand-in examples in its on-disk format. Wall "
      "ex/s fall with the machine's load; ex per CPU-s (user + system time of the process, all "
      "its threads) is what one dedicated core delivers. Needed: what one host consumes at "
      "the `aot` roofline step time (an upper bound); cores = needed / the 1-core ex per "
      "CPU-s.", "",
      "| config | dataset (data) | 1 core ex/s | 1 core ex per CPU-s | all cores ex/s (cores) | "
      "all cores ex per CPU-s | v5e host needs ex/s (source) | cores for v5e host | "
      "8×H100 host needs ex/s | cores for 8×H100 host |", "|" + "---|" * 10,
      *map(_row, results), *(f"| {p} | not measured yet |" + " |" * 8 for p in missing), ""])


def _check_flags() -> None:
  """One line `error: ...` (exit 2) naming a bad measuring flag."""
  for name, flag in (("seconds", _SECONDS), ("warmup", _WARMUP)):
    if flag.value < 0 or (name == "seconds" and flag.value == 0):
      cli.fail(f"--{name} = {flag.value}: must be positive")
  for name, flag in (("windows", _WINDOWS), ("batch_size", _BATCH), ("examples", _EXAMPLES)):
    if flag.value < 1:
      cli.fail(f"--{name} = {flag.value}: must be a positive integer")
  for count in _CORES.value:
    if count != "all" and not (count.isdigit() and 0 < int(count) <= len(available_cores())):
      cli.fail(f"--cores = {count!r}: must be 'all' or 1..{len(available_cores())}")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]!r}")
  from experiments import measure  # pylint: disable=g-import-not-at-top
  saved_json = measure.RESULTS / "input_throughput.json"
  saved = None
  if _TABLE_ONLY.value or (_CONFIGS.value and saved_json.exists()):
    saved = json.loads(saved_json.read_text())  # a run of named configs replaces only their rows
  if not _TABLE_ONLY.value:
    _check_flags()
    machine = {"cpu": measure.machine()["cpu"], "cores": len(available_cores()),
               "date": datetime.date.today().isoformat(), "load_average": os.getloadavg()}
    fresh, saved = saved is None, saved or {"machine": machine, "results": []}
    try:
      configs = {p: cli.load_config(p, field="--configs")
                 for p in _CONFIGS.value or paper_configs()}
    except cli.ConfigError as e:
      cli.fail(str(e))
    for path, config in configs.items():
      try:
        result = run(config, path, batch_size=_BATCH.value, seconds=_SECONDS.value,
                     windows=_WINDOWS.value, warmup=_WARMUP.value, examples=_EXAMPLES.value,
                     core_counts=_CORES.value, data_root=_DATA_ROOT.value,
                     aot_dir=str(measure.RESULTS))
        print(summary(result), flush=True)
      except (ValueError, RuntimeError) as e:
        result = {"config": path, "error": str(e).splitlines()[0]}
        print(f"{path}: {result['error']}", flush=True)
      if fresh:
        machine["load_after"] = os.getloadavg()
      else:  # the saved machine line is another run's
        result["measured"] = {"date": machine["date"], "load_average": os.getloadavg()}
      saved["results"] = sorted([r for r in saved["results"] if r["config"] != path] + [result],
                                key=lambda r: r["config"])
      saved_json.write_text(json.dumps(saved, indent=1))
  print(measure.write(measure.RESULTS, "input_throughput", None,
                      table(saved["results"], saved["machine"])))


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  app.run(main, flags_parser=cli.parse_flags)
