"""Does every paper config fit a TPU slice, its paper's GPU and an H100? `attention_lab.aot`
for each train config, compiled on the CPU.

  python -m experiments.aot_table [--topologies=v5e:2x2,v5e:4x4,v4:2x2x2] [--table_only] [--redo]
  python -m experiments.aot_table --gpu [--configs=...] [--table_only] [--redo]

TPU slices (needs `pip install -e '.[tpu]'`): experiments/results/aot/<config>_<topology>.json
(one per compile, by `python -m attention_lab.aot --json`) and aot_table.md.
`--gpu` (needs `pip install -e '.[gpu]'`): the rows of GPU_ROWS, each config on its paper's
GPUs where the paper names them and on as many H100s, at the paper's per-GPU batch:
experiments/results/aot_gpu/*.json, aot_gpu.md and aot_gpu.json. A row whose compile was
not run (or failed) is listed as such.
"""

import glob
import json
import os
import pathlib
import re

from absl import app, flags

from attention_lab import cli
from experiments import measure, runs

_TOPOLOGIES = flags.DEFINE_list("topologies", ["v5e:2x2", "v5e:4x4", "v4:2x2x2"], "TPU slices.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only rebuild the table from the JSONs.")
_CONFIGS = flags.DEFINE_list("configs", None, "Config files (default: every train config).")
_REDO = flags.DEFINE_bool("redo", False, "Compile again rows whose JSON exists (default: skip).")
_GPU = flags.DEFINE_bool("gpu", False, "The GPU table (GPU_ROWS) instead of the TPU slices.")

RESULTS = os.path.join(os.path.dirname(__file__), "results")
GIB = 2**30


def train_configs() -> list[str]:
  """configs/**.py with get_config() that train (not the efficiency benchmark configs)."""
  paths = sorted(glob.glob("configs/**/*.py", recursive=True))
  return [p for p in paths if not p.endswith("__init__.py") and "/efficiency/" not in p
          and "def get_config" in open(p).read()]


# The papers' GPUs and GPU counts: (config, paper's GPUs as an aot topology or None where the
# paper trained on a TPU or names no GPU, the H100 topology, what the paper says). The H100
# rows use the paper's GPU count (8 for the TPU-trained ImageNet/COCO configs), so the
# per-GPU batch is the paper's. The papers' Pascal GPUs (TITAN Xp, GTX 1080 Ti) are
# described to XLA:GPU as they are (compute capability 6.1 compiles).
GPU_ROWS = (
    ("configs/aa/coco_retinanet.py", None, "h100x8", "TPU (AA: the TPU RetinaNet code)"),
    ("configs/aa/mnasnet_imagenet.py", None, "h100x8", "TPU (config: MnasNet TPU recipe)"),
    ("configs/aa/resnet_imagenet.py", "v100x8", "h100x8", "8 × Tesla V100 (AA paper)"),
    ("configs/aa/wrn_cifar100.py", "v100x8", "h100x8", "8 × Tesla V100 (AA paper)"),
    ("configs/hamburger/ade20k_hamnet.py", None, "h100x4",
     "none named (mmseg's HamNet recipe: 4 GPUs × 4)"),
    ("configs/hamburger/imagenet128_hamgan.py", None, "h100x8", "TPU v3 (config docstring)"),
    ("configs/hamburger/pcontext_hamnet.py", None, "h100x4", "none named (4 GPUs × 4)"),
    ("configs/hamburger/voc_hamnet.py:ablation", "titan_xp", "h100",
     "1 × TITAN Xp (Ham paper: the R-50 OS 16 ablations, batch 12)"),
    ("configs/hamburger/voc_hamnet.py", None, "h100x4", "none named for R-101 (4 GPUs × 4)"),
    ("configs/isa/celeba64.py", "gtx_1080_ti", "h100", "1 × GTX 1080 Ti (Refined-SA Table 3)"),
    ("configs/isa/cifar10.py", "gtx_1080_ti", "h100", "1 × GTX 1080 Ti (Refined-SA Table 3)"),
    ("configs/kanet/imagenet.py", "titan_xpx8", "h100x8", "8 × TITAN Xp (KAO paper, batch 512)"),
    ("configs/kanet/voc_deeplab.py", "titan_xp", "h100",
     "TITAN Xp (KAO's GPU; VOC count not named)"),
    ("configs/sanet/care_flywing.py", None, "h100", "none named"),
    ("configs/sanet/care_planaria.py", None, "h100", "none named"),
    ("configs/sanet/care_tribolium.py", None, "h100", "none named"),
    ("configs/sanet/imagenet.py", "rtx_2080_tix8", "h100x8",
     "8 × RTX 2080 Ti (as the config cites SAO)"),
)


def gpu_rows(configs=None) -> list[tuple[str, str, str]]:
  """(config, topology, what the paper says) for every compile of the GPU table."""
  rows = []
  for config, paper, h100, note in GPU_ROWS:
    if configs and config not in configs and config.split(":")[0] not in configs:
      continue
    rows += [(config, t, note) for t in (paper, h100) if t]
  return rows


def _json_path(config: str, topology: str, folder: str = "aot") -> str:
  name = config[len("configs/"):].replace(".py", "").replace("/", "_").replace(":", "_")
  return os.path.join(RESULTS, folder, f"{name}_{topology.replace(':', '_')}.json")


def _aot(config: str, topology: str, out: str, *overrides: str) -> runs.Run:
  return runs.run_module("attention_lab.aot", [f"--config={config}", f"--topology={topology}",
                                               f"--json={out}", *overrides])


def _compile(config: str, topology: str, out: str):
  """`attention_lab.aot` for one row, unless its JSON exists (--redo: always). A batch the
  devices do not divide is rounded up to the next multiple (the JSON keeps the config's)."""
  if os.path.exists(out) and not _REDO.value:
    return
  result = _aot(config, topology, out)
  uneven = re.search(r"batch_size = (\d+): must be divisible by the number of devices "
                     r"in the mesh \((\d+)\)", result.output)
  if uneven:  # e.g. KAO Table 5's batch 10: the next multiple of the device count
    batch, devices = map(int, uneven.groups())
    rounded = -(-batch // devices) * devices
    result = _aot(config, topology, out, f"--config.batch_size={rounded}")
    if os.path.exists(out):
      with open(out) as f:
        r = {**json.load(f), "config_batch": batch}
      with open(out, "w") as f:
        json.dump(r, f, indent=1)
  print(result.output.strip()[-500:], flush=True)


def _row(config: str, topology: str, path: str, extra: str = "") -> str:
  """One markdown row of an aot JSON (or 'not compiled')."""
  link = f"[{config}](../../{config.split(':')[0]})"
  if not os.path.exists(path):
    return f"| {link} | {topology} | {extra}not compiled |" + " |" * 9
  r = json.load(open(path))
  rounded = f" (config: {r['config_batch']})" if "config_batch" in r else ""
  cublas = " (GEMMs on cuBLAS‡)" if r.get("compiler_options") else ""
  return (f"| {link} | {topology} | {extra}{r['chips']} × {r['device_kind']}{cublas} | "
          f"{r['global_batch']} ({r['global_batch'] // r['chips']}){rounded} | "
          f"{r['parameters']:,} | "
          f"{r['argument_bytes'] / GIB:.2f} | {r['output_bytes'] / GIB:.2f} | "
          f"{r['temp_bytes'] / GIB:.2f} | {r['total_bytes'] / GIB:.2f} / "
          f"{r['hbm_bytes'] / GIB:.3g} | {'yes' if r['fits'] else '**no**'} | "
          f"{r['flops'] / 1e9:.1f} | {r['step_time_s'] * 1e3:.1f} |")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; see --help")
  for config in _CONFIGS.value or ():
    try:
      cli.load_config(config, field="--configs")
    except cli.ConfigError as e:
      cli.fail(str(e))
  for topology in _TOPOLOGIES.value:
    if ":" not in topology:
      cli.fail(f"--topologies: {topology!r} is not KIND:SHAPE (e.g. v5e:2x2)")
  if _GPU.value:
    return gpu_table()
  configs = _CONFIGS.value or train_configs()
  if not _TABLE_ONLY.value:
    for config in configs:
      for topology in _TOPOLOGIES.value:
        _compile(config, topology, _json_path(config, topology))
  rows = ["| config | topology | devices | global batch (per device) | parameters | "
          "arguments GiB | outputs GiB | temporaries GiB | total GiB / HBM | fits | "
          "GFLOP per device-step | roofline ms/step |", "|" + "---|" * 12]
  for config in configs:
    for topology in _TOPOLOGIES.value:
      rows.append(_row(config, topology, _json_path(config, topology)))
  text = "\n".join([
      "# Train steps compiled for TPU slices on the CPU (`python -m experiments.aot_table`)",
      "", "Each row: `python -m attention_lab.aot --config=<config> --topology=<topology>` "
      "(the notes below say what is measured and how).", "", *rows, ""])
  text = measure.write(pathlib.Path(RESULTS), "aot_table", None, text)
  print(text)


def gpu_table():
  """Compiles the GPU rows that have no JSON yet; writes aot_gpu.md and aot_gpu.json."""
  rows = gpu_rows(_CONFIGS.value)
  if not _TABLE_ONLY.value:
    for config, topology, _ in rows:
      _compile(config, topology, _json_path(config, topology, "aot_gpu"))
  lines = ["| config | topology | paper's GPUs | devices | global batch (per GPU) | "
           "parameters | arguments GiB | outputs GiB | temporaries GiB | total GiB / memory | "
           "fits | GFLOP per GPU-step | roofline ms/step |", "|" + "---|" * 13]
  results, missing = [], []
  for config, topology, note in rows:
    path = _json_path(config, topology, "aot_gpu")
    lines.append(_row(config, topology, path, f"{note} | "))
    if os.path.exists(path):
      results.append({"config": config, "paper_gpus": note, **json.load(open(path))})
    else:
      missing.append(f"`{config}` on `{topology}`")
  no_fit = [f"`{r['config']}` on {r['topology']} ({r['total_bytes'] / GIB:.1f} of "
            f"{r['hbm_bytes'] / GIB:.3g} GiB)" for r in results if not r["fits"]]
  text = "\n".join([
      "# Train steps compiled for GPUs on the CPU (`python -m experiments.aot_table --gpu`)",
      "", "Each row: `python -m attention_lab.aot --config=<config> --topology=<topology>` "
      "(the notes below say what is measured and how; ‡: GEMMs on cuBLAS).", "", *lines, "",
      "Does not fit: " + ("; ".join(no_fit) if no_fit else "none") + ".",
      "Not compiled: " + (", ".join(missing) if missing else "none") + ".", ""])
  text = measure.write(pathlib.Path(RESULTS), "aot_gpu", results, text)
  print(text)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
