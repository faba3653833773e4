"""Paper recipes on the hardware a user has: every paper training config at its paper batch,
compiled (`attention_lab.aot`) for one H100, one RTX 4090-class GPU, a v5e-8 and a v5e 4x4;
each cell the micro-batch count k that fits (`config.microbatches`, the smallest power of two
from 1), the per-device memory and the roofline step time.

  python -m experiments.recipes_on_small_hardware [--rows=sanet,kanet] [--targets=h100]

Each cell is one `python -m attention_lab.aot` process (and one more compile per k tried);
cells already in experiments/results/recipes_on_small_hardware.json are kept (--redo compiles
them again), so the table grows over several calls, and calls with disjoint --targets may run
side by side. Writes recipes_on_small_hardware.{json,md,png}.
"""

import contextlib
import fcntl
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from absl import app, flags

from attention_lab import cli, devices
from experiments import measure

ROWS = {  # row -> config at the paper's batch (its docstring cites the paper)
    "sanet": "configs/sanet/imagenet.py", "kanet_kv": "configs/kanet/imagenet.py",
    "aa_resnet50": "configs/aa/resnet_imagenet.py:aa_resnet50",
    "aa_wrn28_10": "configs/aa/wrn_cifar100.py", "aa_mnasnet_a1": "configs/aa/mnasnet_imagenet.py",
    "aa_retinanet": "configs/aa/coco_retinanet.py", "kao_deeplab": "configs/kanet/voc_deeplab.py",
    "hamnet_voc": "configs/hamburger/voc_hamnet.py",
    "hamnet_ade20k": "configs/hamburger/ade20k_hamnet.py",
    "hamnet_context": "configs/hamburger/pcontext_hamnet.py",
    "hamgan": "configs/hamburger/imagenet128_hamgan.py", "isagan_cifar10": "configs/isa/cifar10.py",
    "isagan_celeba": "configs/isa/celeba64.py", "sao_care": "configs/sanet/care_planaria.py"}
TARGETS = {"h100": "1×H100 80 GB", "rtx_4090": "1×RTX 4090 24 GB", "v5e:2x4": "v5e-8 (2x4)",
           "v5e:4x4": "v5e 4x4 (16 chips)"}
KINDS = {"h100": "H100", "rtx_4090": "RTX 4090", "v5e:2x4": "TPU v5 lite", "v5e:4x4": "TPU v5 lite"}
PATH = measure.RESULTS / "recipes_on_small_hardware"
# aot's refusal of a batch that the chips do not divide.
_FEW_EXAMPLES = re.compile(
    r"batch_size = (?P<batch>\d+): must be divisible by the number of devices in the mesh "
    r"\((?P<chips>\d+)\)")

_ROWS = flags.DEFINE_list("rows", list(ROWS), "Rows to (re)compile.")
_TARGETS = flags.DEFINE_list("targets", list(TARGETS), "Targets to compile for.")
_TIMEOUT = flags.DEFINE_integer("timeout_s", 3600, "Limit of one cell's aot process.")
_REDO = cli.define_once(flags.DEFINE_bool, "redo", False,
                        "Compile cells already in the table again.")


def _aot(config: str, target: str, *overrides: str) -> tuple[dict | None, str]:
  """(aot's JSON figures or None, its last stderr line) of `config` on `target`."""
  with tempfile.NamedTemporaryFile(suffix=".json") as out:
    done = subprocess.run(
        [sys.executable, "-m", "attention_lab.aot", f"--config={config}", f"--topology={target}",
         f"--json={out.name}", *overrides], capture_output=True, text=True,
        timeout=_TIMEOUT.value, check=False, env={**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"})
    text = pathlib.Path(out.name).read_text()
  last = (done.stderr.strip().splitlines() or ["no output"])[-1]
  return (json.loads(text) if text else None), last


def cell(config: str, target: str) -> dict:
  """The aot figures of `config` on `target` at the smallest k that fits (or why not). Where
  the chips do not divide the paper's batch, compiled on as many chips as do; where the
  paper's BatchNorm groups would span chips (more chips than the paper's GPUs), aot compiles
  with groups of one chip's share instead; the cell says so."""
  r, last = _aot(config, target)
  adapted = {}
  if r is None and (few := _FEW_EXAMPLES.search(last)):
    used = math.gcd(int(few["batch"]), int(few["chips"]))
    r, last = _aot(config, target, f"--config.mesh.num_devices={used}")
    adapted = {"chips_used": used, "chips_in_slice": int(few["chips"])}
  if r is not None and "paper_bn_group_size" in r:
    adapted.update(bn_group_size=r["bn_group_size"],
                   paper_bn_group_size=r["paper_bn_group_size"])
  if r is None:
    return {"error": last.removeprefix("error: ").removesuffix(" (--debug shows the traceback)")
            [:300]}
  best = r if r["fits"] else r.get("fits_with")
  if best is None:
    return {"k": None, "gib": r["total_bytes"] / 2**30, "ms": r["step_time_s"] * 1e3, **adapted}
  return {"k": best.get("microbatches", 1), "gib": best["total_bytes"] / 2**30,
          "ms": best["step_time_s"] * 1e3, "batch": r["global_batch"], "chips": r["chips"],
          **adapted}


def text(c: dict | None) -> str:
  if c is None:
    return "not measured"
  if "error" in c:
    return f"error: {c['error']}"
  groups = (f" (BN groups of {c['bn_group_size']} per chip: the paper's {c['paper_bn_group_size']}"
            " would span chips)" if "paper_bn_group_size" in c else
            f" (on {c['chips_used']} of the {c['chips_in_slice']} chips: the paper's batch is "
            f"{c['batch']})" if "chips_used" in c else "")
  if c["k"] is None:
    return f"no k fits ({c['gib']:.1f} GiB at k=1){groups}"
  return f"k={c['k']}: {c['gib']:.1f} GiB, {c['ms']:.0f} ms{groups}"


def markdown(table: dict) -> str:
  lines = ["# Paper recipes on small hardware", "",
           "Each paper training config at its paper batch, compiled for the target by "
           "`python -m attention_lab.aot` (no device, no data): the smallest number of "
           "micro-batches k (`--config.microbatches`, powers of two) whose per-device footprint "
           "fits, that footprint, and the roofline step time max(FLOPs / peak, bytes / "
           "bandwidth) at k. BatchNorm statistics per the paper's per-GPU group "
           "(`bn_group_size`) where the config sets one; where those groups would span chips "
           "(16 chips for a recipe of 8 GPUs), groups of one chip's share, as the cell says. "
           "Memory is compared with the whole device memory (JAX preallocates 75% of a GPU's "
           "unless XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise). XLA:GPU schedules and "
           "rematerialises toward 80% of the target's memory (GetSchedulerMemoryLimit), so a "
           "GPU's footprint at k can be below a larger GPU's; the roofline counts the FLOPs of "
           "the program as written, not recomputation. Command: `python -m experiments.recipes_on_small_hardware` "
           "(`--rows=` alone rewrites this file from the JSON).", "",
           "| row | config | " + " | ".join(TARGETS.values()) + " |",
           "|---|---|" + "---|" * len(TARGETS)]
  for row, config in ROWS.items():
    cells = table.get(row, {})
    lines.append(f"| {row} | `{config}` | "
                 + " | ".join(text(cells.get(t)) for t in TARGETS) + " |")
  return "\n".join(lines) + "\n"


def plot(table: dict, path) -> None:
  """Per-device GiB of each cell at its k (the bar's label), against each target's memory."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  rows = [r for r in ROWS if table.get(r)]
  fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
  width = 0.8 / len(TARGETS)
  for i, (target, label) in enumerate(TARGETS.items()):
    cells = [table[r].get(target, {}) for r in rows]
    gib = [c.get("gib") or 0 for c in cells]
    bars = ax.bar(np.arange(len(rows)) + i * width, gib, width, label=label, color=f"C{i}")
    ax.bar_label(bars, labels=[f"k={c['k']}" if c.get("k") else "" for c in cells],
                 fontsize=5, rotation=90, padding=2)
    memory = devices.lookup(KINDS[target]).memory_bytes / 2**30
    ax.axhline(memory, color=f"C{i}", linestyle=":", linewidth=1)
  ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, rows, rotation=30, ha="right")
  ax.set_ylabel("GiB per device at k (dotted: device memory)")
  ax.set_yscale("log", base=2)
  ax.legend(fontsize=7, loc="upper right")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


@contextlib.contextmanager
def _locked_table(write: bool = True):
  """The table in its JSON file, read and (with `write`) written back with its markdown and
  plot, under a lock (calls run side by side)."""
  json_path = PATH.with_suffix(".json")
  with open(PATH.with_suffix(".lock"), "w") as lock:  # flock needs a local file: the source tree
    fcntl.flock(lock, fcntl.LOCK_EX)
    table = json.loads(json_path.read_text()) if json_path.exists() else {}
    yield table
    if not write:
      return
    json_path.write_text(json.dumps(table, indent=1) + "\n")
    PATH.with_suffix(".md").write_text(markdown(table))
    plot(table, PATH.with_suffix(".png"))


def main(argv):
  del argv
  for row in _ROWS.value:
    for target in _TARGETS.value:
      with _locked_table(write=False) as table:
        if not _REDO.value and target in table.get(row, {}):
          continue
      result = cell(ROWS[row], target)
      with _locked_table() as table:
        table.setdefault(row, {})[target] = result
      print(f"{row} on {target}: {text(result)}", flush=True)
  with _locked_table():  # the markdown and plot of the table as it stands
    pass


if __name__ == "__main__":
  app.run(main)
