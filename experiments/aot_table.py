"""Does every paper config fit a TPU slice? `attention_lab.aot` for each train config on
v5e:2x2, v5e:4x4 and v4:2x2x2, compiled on the CPU (needs `pip install -e '.[tpu]'`).

  python -m experiments.aot_table [--topologies=v5e:2x2,v5e:4x4,v4:2x2x2] [--table_only] [--redo]

Writes experiments/results/aot/<config>_<topology>.json (one per compile, by
`python -m attention_lab.aot --json`) and experiments/results/aot_table.md. A config
whose compile was not run (or failed) is listed as such.
"""

import glob
import json
import os
import re
import subprocess
import sys

from absl import app, flags

_TOPOLOGIES = flags.DEFINE_list("topologies", ["v5e:2x2", "v5e:4x4", "v4:2x2x2"], "TPU slices.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only rebuild the table from the JSONs.")
_CONFIGS = flags.DEFINE_list("configs", None, "Config files (default: every train config).")
_REDO = flags.DEFINE_bool("redo", False, "Compile again rows whose JSON exists (default: skip).")

RESULTS = os.path.join(os.path.dirname(__file__), "results")
GIB = 2**30


def train_configs() -> list[str]:
  """configs/**.py with get_config() that train (not the efficiency benchmark configs)."""
  paths = sorted(glob.glob("configs/**/*.py", recursive=True))
  return [p for p in paths if not p.endswith("__init__.py") and "/efficiency/" not in p
          and "def get_config" in open(p).read()]


def _json_path(config: str, topology: str) -> str:
  name = config[len("configs/"):-len(".py")].replace("/", "_")
  return os.path.join(RESULTS, "aot", f"{name}_{topology.replace(':', '_')}.json")


def _aot(config: str, topology: str, out: str, *overrides: str):
  return subprocess.run(
      [sys.executable, "-m", "attention_lab.aot", f"--config={config}", f"--topology={topology}",
       f"--json={out}", *overrides], capture_output=True, text=True)


def main(argv):
  del argv
  configs = _CONFIGS.value or train_configs()
  if not _TABLE_ONLY.value:
    for config in configs:
      for topology in _TOPOLOGIES.value:
        out = _json_path(config, topology)
        if os.path.exists(out) and not _REDO.value:
          continue
        result = _aot(config, topology, out)
        uneven = re.search(r"batch_size = (\d+): must be divisible by the number of devices "
                           r"in the mesh \((\d+)\)", result.stderr)
        if uneven:  # e.g. KAO Table 5's batch 10: the next multiple of the device count
          batch, devices = map(int, uneven.groups())
          rounded = -(-batch // devices) * devices
          result = _aot(config, topology, out, f"--config.batch_size={rounded}")
          if os.path.exists(out):
            with open(out) as f:
              r = {**json.load(f), "config_batch": batch}
            with open(out, "w") as f:
              json.dump(r, f, indent=1)
        print(result.stdout.strip() or result.stderr.strip()[-500:], flush=True)
  rows = ["| config | topology | devices | global batch (per device) | parameters | "
          "arguments GiB | outputs GiB | temporaries GiB | total GiB / HBM | fits | "
          "GFLOP per device-step | roofline ms/step |", "|" + "---|" * 12]
  for config in configs:
    for topology in _TOPOLOGIES.value:
      path = _json_path(config, topology)
      if not os.path.exists(path):
        rows.append(f"| [{config}](../../{config}) | {topology} | not compiled |" + " |" * 9)
        continue
      r = json.load(open(path))
      rounded = f" (config: {r['config_batch']})" if "config_batch" in r else ""
      rows.append(
          f"| [{config}](../../{config}) | {topology} | {r['chips']} × {r['device_kind']} | "
          f"{r['global_batch']} ({r['global_batch'] // r['chips']}){rounded} | "
          f"{r['parameters']:,} | "
          f"{r['argument_bytes'] / GIB:.2f} | {r['output_bytes'] / GIB:.2f} | "
          f"{r['temp_bytes'] / GIB:.2f} | {r['total_bytes'] / GIB:.2f} / "
          f"{r['hbm_bytes'] / GIB:.0f} | {'yes' if r['fits'] else '**no**'} | "
          f"{r['flops'] / 1e9:.1f} | {r['step_time_s'] * 1e3:.1f} |")
  text = "\n".join([
      "# Train steps compiled for TPU slices on the CPU (`python -m experiments.aot_table`)",
      "",
      "Each row: `python -m attention_lab.aot --config=<config> --topology=<topology>` — the",
      "exact jitted train step of `attention_lab.main` (task, model, optimizer, sharding,",
      "global batch of the config), compiled by libtpu 0.0.42 (jax 0.10.2) for the abstract",
      "devices of `jax.experimental.topologies`. Bytes and FLOPs are per device from",
      "`memory_analysis()` / `cost_analysis()`; total = arguments + outputs + temporaries −",
      "donated. Roofline = max(FLOPs / bf16 peak, bytes accessed / HBM bandwidth) with v5e",
      "197 TFLOP/s, 16 GiB, 819 GB/s per chip and v4 per TensorCore (JAX sees 2 per chip",
      "in `v4:2x2x2`) 137.5 TFLOP/s, 16 GiB, 614 GB/s (Google Cloud TPU docs); a lower",
      "bound that ignores collectives and input feeding. No data is read: a task's batch",
      "shapes come from its config (`Task.batch_spec`); the split sizes of datasets not",
      "prepared here (ImageNet, COCO, VOC, ADE20K, CelebA, CARE) only set the schedule. On",
      "this 2-core CPU a compile took 3-18 minutes (two at a time, other jobs beside them).",
      "The CPU-sized default configs (`configs/default.py`, `configs/*/default.py`) are not",
      "compiled: they are not paper configs and do not need a TPU. `python -m",
      "experiments.aot_table` compiles only the rows whose JSON is missing (`--redo`: all).",
      "A config batch that the devices do not divide is rounded up to the next multiple",
      "(\"config: N\" gives the config's).",
      "", *rows, ""])
  with open(os.path.join(RESULTS, "aot_table.md"), "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  app.run(main)
