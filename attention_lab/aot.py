"""Does a config fit a TPU slice? Compiles its exact train step for a TPU topology on the CPU.

  python -m attention_lab.aot --config=configs/sanet/imagenet.py --topology=v5e:4x4 \\
      [--config.batch_size=1024 ...] [--json=OUT.json]

The same task, model, optimizer, state shardings (`mesh.param_sharding`), global
batch and `jax.jit` as `attention_lab.main` (trainer.jit_train_step), lowered with
abstract inputs over the devices of `jax.experimental.topologies` and compiled by
libtpu's XLA:TPU compiler (`pip install -e '.[tpu]'`; no TPU needed, no data
read). Prints, per device (chip; v4: per TensorCore): argument, output and
temporary bytes from `memory_analysis()` (arguments + outputs + temporaries −
donated aliases = the step's footprint) against the HBM, FLOPs and bytes accessed
from `cost_analysis()`, and a roofline step time max(FLOPs / peak, bytes /
bandwidth). Exit status 1 with one line when it does not fit; 2 on a bad
configuration.

Chip figures (Google Cloud TPU documentation, cloud.google.com/tpu/docs/<chip>,
"System architecture": bf16 peak, HBM capacity and bandwidth per chip):
  v5e ("v5litepod"): 197 TFLOP/s, 16 GiB, 819 GB/s
  v4: 275 TFLOP/s, 32 GiB, 1,228 GB/s per chip; JAX sees 2 TensorCores per chip
      in these topologies, so per device: 137.5 TFLOP/s, 16 GiB, 614 GB/s
  v5p: 459 TFLOP/s, 95 GiB, 2,765 GB/s
  v6e: 918 TFLOP/s, 32 GiB, 1,640 GB/s
The roofline is a lower bound: float32 matmuls run at the bf16 rate only with
default (one-pass) precision, and it ignores communication and input feeding.
"""

import contextlib
import json
import os
import re
import sys
import types

import numpy as np

from absl import app, flags
from ml_collections import config_flags

from attention_lab import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_TOPOLOGY = flags.DEFINE_string("topology", "v5e:4x4", "TPU topology, e.g. v5e:2x2, v4:2x2x2.")
_JSON = flags.DEFINE_string("json", None, "Write the figures to this JSON file.")
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks instead of one-line errors.")
flags.mark_flags_as_required(["config"])

GIB = 2**30
# Per JAX device: peak bf16 FLOP/s, HBM bytes, HBM bytes/s (see the module docstring).
CHIPS = {
    "TPU v5 lite": (197e12, 16 * GIB, 819e9),
    "TPU v4": (137.5e12, 16 * GIB, 614e9),
    "TPU v5": (459e12, 95 * GIB, 2765e9),
    "TPU v6 lite": (918e12, 32 * GIB, 1640e9),
}


# Split sizes of datasets that are not prepared here (they set only the schedule, not the
# compiled step's shapes); anything else unprepared counts as 1,000,000 examples.
_SPLIT_SIZES = {"imagenet2012": {"train": 1_281_167, "validation": 50_000}}


@contextlib.contextmanager
def _without_data():
  """Lets tasks read `builder.info.splits[...]` of a dataset that is not prepared on this
  machine (e.g. ImageNet), and skips preparing manual-download datasets (VOC, ADE20K): the
  compiled step depends on feature shapes, not split sizes."""
  from tensorflow_datasets.core import dataset_builder, splits  # pylint: disable=g-import-not-at-top
  original = splits.SplitDict.__getitem__
  missing = []

  def getitem(self, key):
    if self:
      return original(self, key)
    name = getattr(self, "_dataset_name", None) or ""
    size = _SPLIT_SIZES.get(name.split("/")[0], {}).get(str(key), 1_000_000)
    missing.append(str(key))
    return types.SimpleNamespace(name=str(key), num_examples=size, num_shards=1)

  def contains(self, key):
    return not self or dict.__contains__(self, key)

  patches = {(splits.SplitDict, "__getitem__"): getitem,
             (splits.SplitDict, "__contains__"): contains,
             (dataset_builder.DatasetBuilder, "download_and_prepare"): lambda self, *a, **k: None,
             (dataset_builder.DatasetBuilder, "is_prepared"): lambda self: True}
  saved = {(cls, name): cls.__dict__.get(name) for cls, name in patches}
  for (cls, name), fn in patches.items():
    setattr(cls, name, fn)
  try:
    yield missing
  finally:
    for (cls, name), fn in saved.items():
      if fn is None:
        delattr(cls, name)
      else:
        setattr(cls, name, fn)


def _is_key(x) -> bool:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key)


def analyse(config, topology: str) -> dict:
  """Compiles `config`'s train step for `topology`; the per-device figures as a dict."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top

  from attention_lab.train import tasks, trainer  # pylint: disable=g-import-not-at-top

  try:
    devices = topologies.get_topology_desc(topology_name=topology, platform="tpu").devices
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ValueError(f"--topology = {topology!r}: not known to libtpu ({first}); e.g. "
                     "v5e:2x2, v5e:4x4, v4:2x2x2") from None
  kind = devices[0].device_kind
  if kind not in CHIPS:
    raise ValueError(f"--topology = {topology!r}: no chip figures for {kind!r}; known: "
                     f"{sorted(CHIPS)}")
  peak, hbm, bandwidth = CHIPS[kind]
  trainer.validate_config(config)
  mesh = trainer.make_mesh(config, devices)
  if config.batch_size % mesh.size:
    raise ValueError(f"batch_size = {config.batch_size}: must be divisible by the number of "
                     f"devices in the mesh ({mesh.size})")
  with _without_data() as missing:
    task = tasks.create(config, tasks.Environment(mesh, "", config.batch_size))
  abstract = jax.eval_shape(task.init_state)
  shardings = trainer.state_shardings(abstract, mesh, config.mesh.param_sharding)
  state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                       abstract, shardings)
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, P("data")))
           for k, v in task.batch_spec().items()}
  lowered = trainer.jit_train_step(task, shardings).lower(state, batch)
  try:
    compiled = lowered.compile()
  except Exception as e:  # pylint: disable=broad-except
    if "Ran out of memory" not in str(e):
      raise
    # XLA:TPU refuses a program that cannot fit; its message gives the temporaries. The
    # rest from the shapes: per-device shards of state (donated, so also the outputs)
    # and batch, FLOPs of the unpartitioned program / devices.
    shard_bytes = lambda tree: sum(  # pylint: disable=unnecessary-lambda-assignment
        int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
        for x in jax.tree.leaves(tree) if not _is_key(x))
    needed = re.search(r"HLO temporaries \(([\d.]+)([KMGT]?)\)", str(e))
    temp = float(needed.group(1)) * 1024 ** " KMGT".index(needed.group(2) or " ") if needed else 0
    memory = types.SimpleNamespace(
        argument_size_in_bytes=shard_bytes(state) + shard_bytes(batch),
        output_size_in_bytes=shard_bytes(state), alias_size_in_bytes=shard_bytes(state),
        temp_size_in_bytes=int(temp))
    cost = dict(lowered.cost_analysis() or {})
    cost = {k: float(cost.get(k, 0.0)) / mesh.size for k in ("flops", "bytes accessed")}
    compiled_ok = False
  else:
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    compiled_ok = True
  flops, accessed = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
  total = (memory.argument_size_in_bytes + memory.output_size_in_bytes
           + memory.temp_size_in_bytes - memory.alias_size_in_bytes)
  return {
      "topology": topology, "device_kind": kind, "chips": mesh.size,
      "global_batch": config.batch_size,
      "argument_bytes": int(memory.argument_size_in_bytes),
      "output_bytes": int(memory.output_size_in_bytes),
      "temp_bytes": int(memory.temp_size_in_bytes),
      "alias_bytes": int(memory.alias_size_in_bytes),
      "total_bytes": int(total), "hbm_bytes": int(hbm),
      "fits": bool(compiled_ok and total <= hbm), "compiled": compiled_ok,
      "flops": flops, "bytes_accessed": accessed,
      "peak_flops_per_s": peak, "hbm_bytes_per_s": bandwidth,
      "step_time_s": max(flops / peak, accessed / bandwidth),
      "parameters": trainer.count_parameters(abstract),
      "data_prepared": not missing,
  }


def report(r: dict) -> str:
  def gib(b):
    return f"{b / GIB:.2f} GiB" if b >= GIB / 10 else f"{b / 2**20:.1f} MiB"

  return "\n".join([
      f"{r['topology']}: {r['chips']} × {r['device_kind']}, global batch {r['global_batch']} "
      f"({r['global_batch'] // r['chips']} per device), {r['parameters']:,} parameters",
      f"per device: arguments {gib(r['argument_bytes'])} + outputs {gib(r['output_bytes'])} + "
      f"temporaries {gib(r['temp_bytes'])} - donated {gib(r['alias_bytes'])} = "
      f"{gib(r['total_bytes'])} of {gib(r['hbm_bytes'])} HBM: "
      f"{'fits' if r['fits'] else 'DOES NOT FIT'}",
      f"per device and step: {r['flops'] / 1e9:.1f} GFLOP, {r['bytes_accessed'] / 1e9:.2f} GB "
      f"accessed; roofline {r['step_time_s'] * 1e3:.2f} ms/step at "
      f"{r['peak_flops_per_s'] / 1e12:g} TFLOP/s and {r['hbm_bytes_per_s'] / 1e9:g} GB/s",
  ])


def main(argv):
  del argv
  config = _CONFIG.value
  try:
    with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
      import jax  # pylint: disable=g-import-not-at-top
      from jax.experimental import topologies  # pylint: disable=g-import-not-at-top,unused-import
      jax.config.update("jax_platforms", "cpu")  # the host runs on the CPU; libtpu compiles
      result = analyse(config, _TOPOLOGY.value)
  except ValueError as e:
    if _DEBUG.value:
      raise
    cli.fail(f"{cli.name_field(str(e), config)} (--debug shows the traceback)")
  print(report(result), flush=True)
  if _JSON.value:
    os.makedirs(os.path.dirname(os.path.abspath(_JSON.value)), exist_ok=True)
    with open(_JSON.value, "w") as f:
      json.dump(result, f, indent=1)
  if not result["fits"]:
    refused = "" if result["compiled"] else " (XLA:TPU refused to compile it)"
    print(f"error: {result['total_bytes'] / GIB:.2f} GiB per device does not fit in "
          f"{result['hbm_bytes'] / GIB:.0f} GiB of {result['device_kind']} HBM on "
          f"{result['topology']}{refused}", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  # Compiling needs no TPU; do not wait on another process's libtpu lock file.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  app.run(main, flags_parser=cli.parse_flags)
