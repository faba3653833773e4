"""Does a config fit a TPU slice or a GPU? Compiles its exact train step for the target on the CPU.

  python -m attention_lab.aot --config=configs/sanet/imagenet.py --topology=v5e:4x4 \\
      [--config.batch_size=1024 ...] [--json=OUT.json]
  python -m attention_lab.aot --config=configs/isa/cifar10.py --topology=h100   # or h100x8, ...

The same task, model, optimizer, state shardings (`mesh.param_sharding`), global
batch and `jax.jit` as `attention_lab.main` (trainer.jit_train_step), lowered with
abstract inputs over the devices of `jax.experimental.topologies` and compiled on
this CPU without the accelerator, no data read:
- TPU slices (`v5e:2x2`, `v4:2x2x2`, ...): libtpu's XLA:TPU compiler
  (`pip install -e '.[tpu]'`).
- GPUs (`NAME` for one, `NAMExN` for N on one host, NAME one of the target configs
  shipped in attention_lab/gpu_targets/: h100, h200, a100, v100, rtx_2080_ti,
  titan_xp, gtx_1080_ti): XLA:GPU of the CUDA plugin (`pip install -e '.[gpu]'`).
Prints, per device: argument, output and temporary bytes from `memory_analysis()`
(arguments + outputs + temporaries − donated aliases = the step's footprint)
against the device memory, FLOPs and bytes accessed, and a roofline step time
max(FLOPs / peak, bytes / bandwidth) with the figures of attention_lab/devices.py
at the config's model dtype. FLOPs and bytes are attention_lab.cost's count: the
compiled program's on a TPU, micro-batches counted k times; XLA:GPU gives none, so
on a GPU the program's on one CPU device divided by the number of GPUs.
Where the config's BatchNorm groups (`bn_group_size`, the papers' per-GPU batch)
are larger than each chip's share of a micro-batch, they would span chips, which a
run refuses: aot compiles with one chip's share as the group and says so
(`paper_bn_group_size` in the JSON).
Exit status 1 with one line when it does not fit; 2 on a bad configuration.

Memory is compared with the whole device memory (CUDA's total on a GPU); JAX on a
GPU preallocates 75% of it by default (XLA_PYTHON_CLIENT_MEM_FRACTION raises that).
The roofline is a lower bound: float32 matmuls run at the bf16 (TPU) or TF32 (A100,
H100) rate only with default precision, and it ignores communication and input
feeding.
"""

import json
import os
import re
import sys

import numpy as np

from absl import app, flags
from etils import epath
from ml_collections import config_flags

from attention_lab import cli
from attention_lab import devices as device_table

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", None, "Experiment config file.")
_TOPOLOGY = flags.DEFINE_string(
    "topology", "v5e:4x4", "TPU slice (v5e:2x2, v4:2x2x2, ...) or GPUs (h100, h100x8, ...).")
_JSON = cli.define_once(flags.DEFINE_string, "json", None, "Write the figures to this JSON file.")
_DEBUG = cli.define_once(flags.DEFINE_bool, "debug", False, "Show tracebacks instead of one-line errors.")

GIB = 2**30
_TRITON_TILING_FAILURE = "Couldn't find output tile sizes"
_GPU_TOPOLOGY = re.compile(r"(?P<name>[a-z0-9_]+?)(?:x(?P<count>[1-9][0-9]*))?")


def _allowed() -> str:
  return ("a TPU slice such as v5e:2x2, v5e:4x4, v4:2x2x2, or GPUs NAME or NAMExN (N on one "
          f"host) with NAME one of {', '.join(device_table.gpu_names())}")


def topology_devices(topology: str) -> list:
  """The compile-only devices of a TPU slice (`v5e:2x2`) or GPUs (`h100`, `h100x8`)."""
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  gpu = _GPU_TOPOLOGY.fullmatch(topology)
  if gpu and gpu["name"] in device_table.gpu_names():
    try:
      return device_table.gpu_devices(gpu["name"], int(gpu["count"] or 1))
    except ValueError as e:
      raise ValueError(f"--topology = {topology!r}: {e}") from None
  if ":" not in topology:
    raise ValueError(f"--topology = {topology!r}: expected {_allowed()}")
  try:
    return topologies.get_topology_desc(topology_name=topology, platform="tpu").devices
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ValueError(f"--topology = {topology!r}: not known to libtpu ({first}); expected "
                     f"{_allowed()}") from None


def _target(topology: str, dtype: str) -> tuple[list, dict]:
  """(the topology's devices, the per-device figures of attention_lab/devices.py at `dtype`)."""
  devices = topology_devices(topology)
  kind = devices[0].device_kind
  device = device_table.lookup(kind)
  if device is None:
    raise ValueError(f"--topology = {topology!r}: attention_lab/devices.py has no figures for "
                     f"{kind!r}")
  # A dtype without a fast path (bfloat16 on a V100 or a Pascal GPU) runs at the float32 rate.
  peak_dtype = dtype if device.peak(dtype) else "float32"
  return devices, {"device_kind": kind, "peak_flops_per_s": device.peak(peak_dtype),
                   "peak_dtype": peak_dtype, "model_dtype": dtype,
                   "hbm_bytes": int(device.memory_bytes),
                   "hbm_bytes_per_s": device.memory_bandwidth}


def adapt_bn_groups(config, chips: int) -> int | None:
  """Where `bn_group_size` is larger than each device's share of a micro-batch on `chips`
  devices (`mesh.num_devices` of them), the paper's per-GPU groups would span chips (more
  chips than the paper's GPUs): sets it to that share and returns the paper's group; else
  None. A run refuses such groups (train/state.py check_batch); aot answers for groups of
  one chip's share."""
  used = chips if config.mesh.num_devices == -1 else config.mesh.num_devices
  share = config.batch_size // config.microbatches // max(used, 1)
  group = config.bn_group_size
  if share < 1 or group <= share:
    return None
  config.bn_group_size = share
  return group


def _build(config, devices):
  """(mesh, abstract state, state and batch specs, the jitted train step) of `config` over
  `devices`: the loop's task, jit, shardings and batch (train/state.py), no data read."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top

  from attention_lab.train import state as state_lib, tasks  # pylint: disable=g-import-not-at-top
  mesh = state_lib.make_mesh(config, devices)
  state_lib.check_batch(config, mesh)
  task = tasks.create(config, tasks.Environment(mesh, "", config.batch_size))
  train = state_lib.StateLayout(task, mesh, config.mesh.param_sharding)
  state = state_lib.abstract_arrays(train.abstract, train.shardings)
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, P("data")))
           for k, v in task.batch_spec().items()}
  return mesh, train.abstract, state, batch, train.train_step


def compile_lowered(lowered):
  """(compiled, XLA options it needed): `lowered.compile()`, except where XLA:GPU's Triton
  GEMM emitter (Ampere and newer) finds no tiling for a dot without a GPU to autotune on
  (e.g. the gradient of jax.image.resize's f32[129276,513] dot for an H100, jaxlib
  0.10.2): then again with cuBLAS doing the GEMMs."""
  try:
    return lowered.compile(), {}
  except Exception as e:  # pylint: disable=broad-except
    if _TRITON_TILING_FAILURE not in str(e):
      raise
  options = {"xla_gpu_enable_triton_gemm": False}
  return lowered.compile(compiler_options=options), options


def _refused(error: Exception, step, state, batch):
  """The Cost of a step XLA:TPU refused to compile ("Ran out of memory"): temporaries from its
  message; arguments and outputs from the shapes (this device's shards of the state, donated
  so also the outputs, and of the batch); FLOPs and bytes from attention_lab.cost's
  fallback."""
  import jax  # pylint: disable=g-import-not-at-top

  from attention_lab import cost  # pylint: disable=g-import-not-at-top
  from attention_lab.train import state as state_lib  # pylint: disable=g-import-not-at-top
  shard_bytes = lambda tree: sum(  # pylint: disable=unnecessary-lambda-assignment
      int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
      for x in jax.tree.leaves(tree) if not state_lib.is_key(x))
  needed = re.search(r"HLO temporaries \(([\d.]+)([KMGT]?)\)", str(error))
  temp = float(needed.group(1)) * 1024 ** " KMGT".index(needed.group(2) or " ") if needed else 0
  counted = cost.on_one_cpu(step, state, batch)
  return cost.Cost(counted.get("flops"), counted.get("bytes accessed"),
                   argument_bytes=shard_bytes(state) + shard_bytes(batch),
                   output_bytes=shard_bytes(state), temp_bytes=int(temp),
                   alias_bytes=shard_bytes(state), source=cost.LOWERED_CPU)


def _compile_and_count(step, state, batch):
  """(Cost, compiled?, XLA options) of the jitted train step for its devices."""
  from attention_lab import cost  # pylint: disable=g-import-not-at-top
  try:
    compiled, options = compile_lowered(step.lower(state, batch))
  except Exception as e:  # pylint: disable=broad-except
    if "Ran out of memory" not in str(e):
      raise
    return _refused(e, step, state, batch), False, {}
  return cost.count(step, state, batch, compiled=compiled)[1], True, options


def prepare(config, devices, bn_groups_per_chip: bool = True):
  """(the config compiled, the paper's BatchNorm group where it was adapted or None,
  `_build`'s (mesh, abstract state, state and batch specs, jitted step)) of `config` over
  `devices`: the checks, the adaptation and the train step that `analyse` compiles."""
  from attention_lab.train.validation import validate_config  # pylint: disable=g-import-not-at-top
  validate_config(config)
  config = config.copy_and_resolve_references()
  paper_group = adapt_bn_groups(config, len(devices)) if bn_groups_per_chip else None
  return config, paper_group, _build(config, devices)


def _optimizer(config):
  return config.optimizer if "optimizer" in config else config.g_optimizer


def analyse(config, topology: str, bn_groups_per_chip: bool = True) -> dict:
  """Compiles `config`'s train step for `topology`; the per-device figures as a dict.
  `bn_groups_per_chip`: where the config's BatchNorm groups would span chips, compile with
  one chip's share as the group (`adapt_bn_groups`) and say so (`paper_bn_group_size`)."""
  from attention_lab.train import parameters  # pylint: disable=g-import-not-at-top
  devices, target = _target(topology, str(config.model.dtype))
  config, paper_group, (mesh, abstract, state, batch, step) = prepare(
      config, devices, bn_groups_per_chip)
  counted, compiled, options = _compile_and_count(step, state, batch)
  flops, accessed = counted.flops or 0.0, counted.bytes_accessed or 0.0
  return {
      "topology": topology, "device_kind": target["device_kind"], "chips": mesh.size,
      "global_batch": config.batch_size, "microbatches": config.microbatches,
      "bn_group_size": config.bn_group_size,
      **({"paper_bn_group_size": paper_group} if paper_group else {}),
      "mu_dtype": _optimizer(config).mu_dtype or "params",
      "argument_bytes": counted.argument_bytes, "output_bytes": counted.output_bytes,
      "temp_bytes": counted.temp_bytes, "alias_bytes": counted.alias_bytes,
      "total_bytes": counted.footprint_bytes,
      "fits": bool(compiled and counted.footprint_bytes <= target["hbm_bytes"]),
      "compiled": compiled, "flops": flops, "bytes_accessed": accessed,
      "compiler_options": options, "cost_source": counted.source, **target,
      "step_time_s": max(flops / target["peak_flops_per_s"],
                         accessed / target["hbm_bytes_per_s"]),
      "parameters": parameters.count_parameters(abstract),
  }


def report(r: dict) -> str:
  def gib(b):
    return f"{b / GIB:.2f} GiB" if b >= GIB / 10 else f"{b / 2**20:.1f} MiB"

  return "\n".join([
      f"{r['topology']}: {r['chips']} × {r['device_kind']}, global batch {r['global_batch']} "
      f"({r['global_batch'] // r['chips']} per device"
      + (f", {r['microbatches']} micro-batches" if r.get("microbatches", 1) > 1 else "")
      + (f", BatchNorm groups of {r['bn_group_size']}" if r.get("bn_group_size") else "")
      + (f": one chip's share, the config's {r['paper_bn_group_size']} would span chips"
         if r.get("paper_bn_group_size") else "")
      + (f", first moment in {r['mu_dtype']}" if r.get("mu_dtype", "params") != "params" else "")
      + f"), {r['parameters']:,} parameters",
      f"per device: arguments {gib(r['argument_bytes'])} + outputs {gib(r['output_bytes'])} + "
      f"temporaries {gib(r['temp_bytes'])} - donated {gib(r['alias_bytes'])} = "
      f"{gib(r['total_bytes'])} of {gib(r['hbm_bytes'])} {_memory_name(r)}: "
      f"{'fits' if r['fits'] else 'DOES NOT FIT'}",
      f"per device and step: {r['flops'] / 1e9:.1f} GFLOP, {r['bytes_accessed'] / 1e9:.2f} GB "
      f"accessed; roofline {r['step_time_s'] * 1e3:.2f} ms/step at "
      f"{r['peak_flops_per_s'] / 1e12:g} TFLOP/s ({r['peak_dtype']}) and "
      f"{r['hbm_bytes_per_s'] / 1e9:g} GB/s" + (
          "" if r["cost_source"] == "compiled program" else
          f" (FLOPs and bytes: {r['cost_source']}; see attention_lab/cost.py)"),
  ] + ([f"compiled with {r['compiler_options']} (XLA:GPU's Triton GEMM tiling failed)"]
       if r.get("compiler_options") else []))


def smallest_microbatches(config, topology: str) -> dict | None:
  """The figures of the smallest `microbatches` k > config's that fits on `topology`
  (powers of two that divide the batch and keep `bn_group_size`'s groups whole on each
  device), or None when none does. Each try is one more compile."""
  k = config.microbatches * 2
  while config.batch_size % k == 0:
    trial = config.copy_and_resolve_references()
    trial.microbatches = k
    try:
      result = analyse(trial, topology, bn_groups_per_chip=False)
    except ValueError:  # the groups no longer fit a device's share of a micro-batch
      return None
    if result["fits"]:
      return {**result, "microbatches": k}
    k *= 2
  return None


def _memory_name(r: dict) -> str:
  return "HBM" if r["device_kind"].startswith("TPU") else "device memory"


def main(argv):
  del argv
  config = _CONFIG.value
  try:
    with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
      import jax  # pylint: disable=g-import-not-at-top
      from jax.experimental import topologies  # pylint: disable=g-import-not-at-top,unused-import
      # The host runs on the CPU; libtpu or the CUDA plugin compiles.
      jax.config.update("jax_platforms", "cpu")
      result = analyse(config, _TOPOLOGY.value)
  except ValueError as e:
    if _DEBUG.value:
      raise
    cli.fail(f"{cli.name_field(str(e), config)} (--debug shows the traceback)")
  print(report(result), flush=True)
  smaller = None
  if not result["fits"]:
    with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
      smaller = smallest_microbatches(config, _TOPOLOGY.value)
    result["fits_with"] = smaller
  if _JSON.value:
    path = epath.Path(_JSON.value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
  if not result["fits"]:
    refused = "" if result["compiled"] else " (XLA refused to compile it)"
    advice = ("; no number of micro-batches makes it fit" if smaller is None else
              f"; --config.microbatches={smaller['microbatches']} fits "
              f"({smaller['total_bytes'] / GIB:.2f} GiB, roofline "
              f"{smaller['step_time_s'] * 1e3:.1f} ms/step)")
    print(f"error: {result['total_bytes'] / GIB:.2f} GiB per device does not fit in "
          f"{result['hbm_bytes'] / GIB:.3g} GiB of {result['device_kind']} "
          f"{_memory_name(result)} on {result['topology']}{refused}{advice}",
          file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])  # as a command only: other modules and tests import this one
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # TF 2.21 logs its oneDNN notice at any TF_CPP_MIN_LOG_LEVEL
  # Compiling needs no TPU; do not wait on another process's libtpu lock file.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  app.run(main, flags_parser=cli.parse_flags)
