"""Does every paper config learn? Its `:cpu` preset's headline metric before the first step
and after the last, against a threshold per task family.

  python -m experiments.paper_presets [--presets=configs/aa/coco_retinanet.py:cpu,...]
      [--workdir_root=/tmp/paper_presets]
  python -m experiments.paper_presets --presets=   # rewrites the markdown from the json

Each preset runs twice in one fresh workdir: `python -m experiments.untrained` (the
evaluation at step 0) and `python -m attention_lab.main` (training, then the final
evaluation; experiments/runs.py). Writes experiments/results/paper_presets.json (a list
of {config, family, metric, start, end, learned, ...}, the latest run of each preset kept)
and paper_presets.md.
"""

import dataclasses
import json
import pathlib
import re
from collections.abc import Callable

from absl import app, flags

from attention_lab import cli
from experiments import runs

RESULTS = pathlib.Path(__file__).parent / "results"


@dataclasses.dataclass(frozen=True)
class Family:
  metric: str  # the Final: key without 'eval_'
  rule: str  # the threshold, in words
  learned: Callable[[float, float], bool]  # (start, end) -> learned


# Digits have 10 classes (chance 10%); an untrained GAN's FID is in the hundreds.
FAMILIES = {
    "classification": Family("top1", "top-1 ≥ 50% (5 × chance) and above the start",
                             lambda s, e: e >= 0.5 and e > s),
    "segmentation": Family("miou", "mIoU at least 0.10 above the start",
                           lambda s, e: e - s >= 0.10),
    "restoration": Family("psnr_gain", "PSNR ≥ 1 dB above the noisy input and above the start",
                          lambda s, e: e >= 1.0 and e > s),
    "gan": Family("fid", "FID ≤ half the untrained generator's",
                  lambda s, e: e <= s / 2),
    "detection": Family("map", "mAP@[.5:.95] ≥ 0.01 and above the start",
                        lambda s, e: e >= 0.01 and e > s),
}

PRESETS = (
    "configs/sanet/care_flywing.py:cpu",
    "configs/sanet/care_planaria.py:cpu",
    "configs/sanet/care_tribolium.py:cpu",
    "configs/aa/coco_retinanet.py:cpu",
    "configs/kanet/voc_deeplab.py:cpu",
    "configs/hamburger/voc_hamnet.py:cpu",
    "configs/hamburger/ade20k_hamnet.py:cpu",
    "configs/hamburger/pcontext_hamnet.py:cpu",
    "configs/isa/cifar10.py:cpu",
    "configs/isa/celeba64.py:cpu",
    "configs/hamburger/imagenet128_hamgan.py:cpu",
    "configs/sanet/imagenet.py:cpu",
    "configs/sanet/imagenet.py:mobilenet_v2,cpu",
    "configs/sanet/imagenet.py:attnnet,cpu",
    "configs/kanet/imagenet.py:cpu",
    "configs/kanet/imagenet.py:kanet_qkv,cpu",
    "configs/aa/wrn_cifar100.py:cpu",
    "configs/aa/wrn_cifar100.py:se_wide_resnet28_10,cpu",
    "configs/aa/resnet_imagenet.py:cpu",
    "configs/aa/resnet_imagenet.py:resnet50,cpu",
    "configs/aa/resnet_imagenet.py:aa_resnet34,cpu",
    "configs/aa/mnasnet_imagenet.py:cpu",
    "configs/aa/mnasnet_imagenet.py:mnasnet_a1,cpu",
)

_PRESETS = flags.DEFINE_string(
    "presets", ",".join(PRESETS),
    "Comma-separated presets (a preset's own commas, as in "
    "'configs/aa/resnet_imagenet.py:resnet50,cpu', stay with it).")
_ROOT = flags.DEFINE_string("workdir_root", "/tmp/paper_presets", "Parent of the workdirs.")


def family_of(spec: str) -> str:
  """The task family of a preset (its config's `task`; classification when unset)."""
  path, _, preset = spec.partition(":")
  try:
    config = cli.load_config(spec, field="--presets")
  except cli.ConfigError as e:
    cli.fail(str(e))
  if preset.split(",")[-1] not in ("cpu", "tiny"):
    cli.fail(f"--presets: {spec!r} is not a ':cpu' (or ':tiny') preset of {path}")
  return config.get("task") or "classification"


def run_preset(spec: str, root: pathlib.Path) -> dict:
  family = family_of(spec)
  rule = FAMILIES[family]
  workdir = root / runs.slug(spec)
  overrides = ([f"eval.classifier_workdir={root / 'digits_classifier'}"]
               if family == "gan" else [])
  logs = root / "logs"
  start = runs.untrained(spec, overrides, workdir=workdir,
                         log=logs / f"{workdir.name}.untrained.log")
  end = runs.train(spec, overrides, workdir=workdir, fresh=False,
                   log=logs / f"{workdir.name}.log") if not start.returncode else start
  key = f"eval_{rule.metric}"
  entry = {"config": spec, "family": family, "metric": rule.metric,
           "start": start.final.get(key), "end": end.final.get(key), "learned": False,
           "threshold": rule.rule, "wall_s": end.wall_s, "cpu_s": end.cpu_s,
           "untrained_wall_s": start.wall_s, "load_before": start.load_before,
           "load_after": end.load_after, "error": start.error or end.error}
  if entry["start"] is not None and entry["end"] is not None:
    entry["learned"] = bool(rule.learned(entry["start"], entry["end"]))
  elif not entry["error"]:
    entry["error"] = f"no eval_{rule.metric} on the Final: line"
  return entry


def _number(v) -> str:
  return "—" if v is None else f"{v:.4f}"


def markdown(entries: list[dict]) -> str:
  from experiments import measure as measure_lib  # pylint: disable=g-import-not-at-top
  lines = [
      "# Does every paper config learn? Its `:cpu` preset, before and after training", "",
      f"Machine: {measure_lib.machine_line()}. Command: `python -m experiments.paper_presets`. "
      "Each preset: the headline metric of the untrained model (`python -m "
      "experiments.untrained`, step 0) and after the preset's steps (`python -m "
      "attention_lab.main`), in one fresh workdir; wall / CPU s: the training process end "
      "to end (start-up, data, compilation, training, evaluation; CPU = user + system of "
      "all its threads). GAN presets share one digits classifier for their FID features.",
      "", "Learned when:", "",
      *(f"- {name}: {f.rule} (`eval_{f.metric}`)" for name, f in FAMILIES.items()), ""]
  lines += ["| preset | family | metric | start | end | learned | wall s | CPU s | "
            "1-min load before → after |", "|---|---|---|---|---|---|---|---|---|"]
  for e in entries:
    learned = "yes" if e["learned"] else (f"**failed**: `{e['error']}`" if e["error"]
                                          else "**no**")
    lines.append(f"| `{e['config']}` | {e['family']} | {e['metric']} | {_number(e['start'])} | "
                 f"{_number(e['end'])} | {learned} | {e['wall_s']:.0f} | {e['cpu_s']:.0f} | "
                 f"{e['load_before']:.1f} → {e['load_after']:.1f} |")
  missing = [p for p in PRESETS if p not in {e["config"] for e in entries}]
  if missing:
    lines += ["", "Not run yet: " + ", ".join(f"`{p}`" for p in missing) + "."]
  return "\n".join(lines) + "\n"


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; flags are --presets and --workdir_root")
  chosen = [p for p in re.split(r",(?=configs/)", _PRESETS.value) if p]
  for spec in chosen:
    family_of(spec)  # every preset checked before the first run
  store = RESULTS / "paper_presets.json"
  entries = {e["config"]: e for e in (json.loads(store.read_text()) if store.exists() else [])}
  from experiments import measure as measure_lib  # pylint: disable=g-import-not-at-top

  def write():
    order = [p for p in PRESETS if p in entries] + [p for p in entries if p not in PRESETS]
    return measure_lib.write(RESULTS, "paper_presets", [entries[p] for p in order],
                             markdown([entries[p] for p in order]))

  for spec in chosen:
    entries[spec] = run_preset(spec, pathlib.Path(_ROOT.value))
    print(json.dumps(entries[spec]), flush=True)
    write()
  print(write())


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
