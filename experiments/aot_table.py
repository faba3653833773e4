"""Does every paper config fit a TPU slice, its paper's GPU and an H100? `attention_lab.aot`
for each train config, compiled on the CPU.

  python -m experiments.aot_table [--configs=...] [--topologies=v5e:2x2,...] [--table_only] [--redo]
  python -m experiments.aot_table --gpu [--configs=...] [--table_only] [--redo]

TPU (`pip install -e '.[tpu]'`): every train config on TPU_TOPOLOGIES (the CPU-sized ones on the
smallest) → results/aot/*.json, aot_tpu.{md,json}. `--gpu` (`pip install -e '.[gpu]'`): GPU_ROWS
→ results/aot_gpu/*.json, aot_gpu.{md,json}. Only rows whose JSON is missing are compiled
(`--redo`: all); the tables list every row from the saved JSONs.
"""

import glob
import json
import os
import pathlib
import re

from absl import app, flags

from attention_lab import cli
from experiments import measure, runs

_TOPOLOGIES = flags.DEFINE_list(
    "topologies", None, "TPU slices to compile (default: TPU_TOPOLOGIES, the smallest for a "
    "CPU-sized config).")
_TABLE_ONLY = cli.define_once(flags.DEFINE_bool, "table_only", False,
                              "Only rebuild the table from the JSON.")
_CONFIGS = cli.define_once(flags.DEFINE_list, "configs", None,
                           "Configs to compile (default: every row's).")
_REDO = cli.define_once(flags.DEFINE_bool, "redo", False,
                        "Compile again rows whose JSON exists (default: skip).")
_GPU = flags.DEFINE_bool("gpu", False, "The GPU table (GPU_ROWS) instead of the TPU slices.")

RESULTS = str(measure.RESULTS)
TPU_TOPOLOGIES = ("v5e:2x2", "v5e:4x4")


def train_configs() -> list[str]:
  """configs/**.py with get_config() that train (not the efficiency benchmark configs)."""
  paths = sorted(glob.glob("configs/**/*.py", root_dir=runs.REPO, recursive=True))
  return [p for p in paths if not p.endswith("__init__.py") and "/efficiency/" not in p
          and "def get_config" in (runs.REPO / p).read_text()]


# (config, the paper's GPUs as an aot topology or None where the paper trained on a TPU or
# names no GPU, the H100 topology at the paper's GPU count (8 for the TPU-trained ImageNet /
# COCO configs), what the paper says). Pascal GPUs compile for XLA:GPU as they are (sm 6.1).
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


def _selected(config: str, configs) -> bool:
  return not configs or config in configs or config.split(":")[0] in configs


def tpu_rows(configs=None, topologies=None) -> list[tuple[str, str]]:
  """(config, topology) of each TPU compile: every train config (or those of `configs`) on
  `topologies`, by default TPU_TOPOLOGIES; the smallest only for the CPU-sized configs (the
  default experiments and the default segmentation's backbone)."""
  cpu_sized = lambda c: (os.path.basename(c) == "default.py"
                         or c == "configs/segmentation/digits_backbone.py")
  return [(config, t) for config in train_configs() if _selected(config, configs)
          for t in topologies or TPU_TOPOLOGIES[:1 if cpu_sized(config) else None]]


def gpu_rows(configs=None) -> list[tuple[str, str, str]]:
  """(config, topology, what the paper says) for every compile of the GPU table."""
  return [(config, t, note) for config, paper, h100, note in GPU_ROWS
          if _selected(config, configs) for t in (paper, h100) if t]


def _json_path(config: str, topology: str, folder: str) -> str:
  name = config[len("configs/"):].replace(".py", "").replace("/", "_").replace(":", "_")
  return os.path.join(RESULTS, folder, f"{name}_{topology.replace(':', '_')}.json")


def _compile(config: str, topology: str, out: str):
  """`attention_lab.aot` for one row. A batch the devices do not divide is rounded up to the
  next multiple (the JSON keeps the config's as `config_batch`)."""
  aot = lambda *overrides: runs.run_module("attention_lab.aot", [
      f"--config={config}", f"--topology={topology}", f"--json={out}", *overrides])
  result = aot()
  uneven = re.search(r"batch_size = (\d+): must be divisible by the number of devices "
                     r"in the mesh \((\d+)\)", result.output)
  if uneven:  # e.g. KAO Table 5's batch 10
    batch, devices = map(int, uneven.groups())
    result = aot(f"--config.batch_size={-(-batch // devices) * devices}")
    saved = pathlib.Path(out)
    if saved.exists():
      saved.write_text(json.dumps({**json.loads(saved.read_text()), "config_batch": batch},
                                  indent=1))
  print(result.output.strip()[-500:], flush=True)


def tpu_table(configs=None, topologies=None, redo: bool | None = False):
  """Compiles the rows of `configs` on `topologies` (see tpu_rows) whose JSON is missing
  (`redo`: all; None: none); writes aot_tpu.md and aot_tpu.json with every row."""
  selected = tpu_rows(configs, topologies)
  _table("aot_tpu", "aot", [(c, t, None) for c, t in sorted(set(tpu_rows()) | set(selected))],
         [(c, t, None) for c, t in selected], redo,
         "| config | topology | devices | global batch (per device) | parameters | "
         "arguments GiB | outputs GiB | temporaries GiB | total GiB / HBM | fits | "
         "GFLOP per device-step | roofline ms/step |")


def gpu_table(configs=None, redo: bool | None = False):
  """Compiles the GPU rows of `configs` whose JSON is missing (`redo`: all; None: none);
  writes aot_gpu.md and aot_gpu.json with every row."""
  _table("aot_gpu", "aot_gpu", gpu_rows(), gpu_rows(configs), redo,
         "| config | topology | paper's GPUs | devices | global batch (per GPU) | "
         "parameters | arguments GiB | outputs GiB | temporaries GiB | total GiB / memory | "
         "fits | GFLOP per GPU-step | roofline ms/step |")


def _row(config: str, topology: str, r: dict | None, note: str | None) -> str:
  """One markdown row of an aot JSON (None: 'not compiled')."""
  start = f"| [{config}](../../{config.split(':')[0]}) | {topology} | " + (
      "" if note is None else f"{note} | ")
  if r is None:
    return start + "not compiled |" + " |" * 9
  rounded = f" (config: {r['config_batch']})" if "config_batch" in r else ""
  if "paper_bn_group_size" in r:  # aot's groups of one chip's share
    rounded += (f" (BN groups of {r['bn_group_size']}: the config's "
                f"{r['paper_bn_group_size']} span chips)")
  cublas = " (GEMMs on cuBLAS‡)" if r.get("compiler_options") else ""
  gib = lambda key: f"{r[key] / measure.GIB:.2f}"
  return start + (
      f"{r['chips']} × {r['device_kind']}{cublas} | "
      f"{r['global_batch']} ({r['global_batch'] // r['chips']}){rounded} | "
      f"{r['parameters']:,} | {gib('argument_bytes')} | {gib('output_bytes')} | "
      f"{gib('temp_bytes')} | {gib('total_bytes')} / {r['hbm_bytes'] / measure.GIB:.3g} | "
      f"{'yes' if r['fits'] else '**no**'} | {r['flops'] / 1e9:.1f} | "
      f"{r['step_time_s'] * 1e3:.1f} |")


def _table(stem: str, folder: str, rows, selected, redo: bool | None, header: str):
  """Compiles `selected` (config, topology, paper's GPUs or None) per `redo`; writes <stem>.md
  with every row of `rows` and <stem>.json with the compiled ones."""
  for config, topology, _ in selected:
    out = _json_path(config, topology, folder)
    if redo or (redo is not None and not os.path.exists(out)):
      _compile(config, topology, out)
  lines, results, missing = [header, "|" + "---|" * (header.count(" | ") + 1)], [], []
  for config, topology, note in rows:
    path = _json_path(config, topology, folder)
    r = json.loads(pathlib.Path(path).read_text()) if os.path.exists(path) else None
    lines.append(_row(config, topology, r, note))
    if r is None:
      missing.append(f"`{config}` on `{topology}`")
    else:
      results.append({"config": config, **({} if note is None else {"paper_gpus": note}), **r})
  no_fit = [f"`{r['config']}` on {r['topology']} ({r['total_bytes'] / measure.GIB:.1f} of "
            f"{r['hbm_bytes'] / measure.GIB:.3g} GiB)" for r in results if not r["fits"]]
  cublas = "; ‡: GEMMs on cuBLAS" if any(r.get("compiler_options") for r in results) else ""
  flag = " --gpu" if stem == "aot_gpu" else ""
  target = "GPUs" if flag else "TPU slices"
  text = "\n".join([
      f"# Train steps compiled for {target} on the CPU (`python -m experiments.aot_table{flag}`)",
      "", "Each row: `python -m attention_lab.aot --config=<config> --topology=<topology>` "
      f"(the notes below say what is measured and how{cublas}).", "", *lines, "",
      "Does not fit: " + ("; ".join(no_fit) if no_fit else "none") + ".",
      "Not compiled: " + (", ".join(missing) if missing else "none") + ".", ""])
  print(measure.write(pathlib.Path(RESULTS), stem, results, text))


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; see --help")
  table = gpu_rows if _GPU.value else tpu_rows
  for config in _CONFIGS.value or ():
    if not table([config]):
      cli.fail(f"--configs: {config!r} has no row in the {'GPU' if _GPU.value else 'TPU'} "
               "table (see GPU_ROWS and train_configs in experiments/aot_table.py)")
  for topology in _TOPOLOGIES.value or ():
    if ":" not in topology:
      cli.fail(f"--topologies: {topology!r} is not KIND:SHAPE (e.g. v5e:2x2)")
  redo = None if _TABLE_ONLY.value else _REDO.value
  if _GPU.value:
    return gpu_table(_CONFIGS.value, redo)
  return tpu_table(_CONFIGS.value, _TOPOLOGIES.value, redo)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
