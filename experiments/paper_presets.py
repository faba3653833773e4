"""Does every paper config learn? Its `:cpu` preset's headline metric at step 0 and after
training (one workdir), against a threshold per task family: the sweep of experiments/sweep.py
over the presets → experiments/results/paper_presets.{md,json}.

  python -m experiments.paper_presets [--presets=configs/aa/coco_retinanet.py:cpu,...]
      [--workdir_root=/tmp/paper_presets]   # --presets= rewrites the md from the json
"""

import pathlib
import re

from absl import app, flags

from attention_lab import cli
from experiments import sweep

# Family: (Final: key without 'eval_', the threshold in words, (start, end) -> learned).
# Digits have 10 classes (chance 10%); an untrained GAN's FID is in the hundreds.
FAMILIES = {
    "classification": ("top1", "top-1 ≥ 50% (5 × chance) and above the start",
                       lambda s, e: e >= 0.5 and e > s),
    "segmentation": ("miou", "mIoU at least 0.10 above the start", lambda s, e: e - s >= 0.10),
    "restoration": ("psnr_gain", "PSNR ≥ 1 dB above the noisy input and above the start",
                    lambda s, e: e >= 1.0 and e > s),
    "gan": ("fid", "FID ≤ half the untrained generator's", lambda s, e: e <= s / 2),
    "detection": ("map", "mAP@[.5:.95] ≥ 0.01 and above the start",
                  lambda s, e: e >= 0.01 and e > s),
}
PRESETS = tuple(f"configs/{path}.py:{preset}" for path, *presets in map(str.split, """
    sanet/care_flywing cpu
    sanet/care_planaria cpu
    sanet/care_tribolium cpu
    aa/coco_retinanet cpu
    kanet/voc_deeplab cpu
    hamburger/voc_hamnet cpu
    hamburger/ade20k_hamnet cpu
    hamburger/pcontext_hamnet cpu
    isa/cifar10 cpu
    isa/celeba64 cpu
    hamburger/imagenet128_hamgan cpu
    sanet/imagenet cpu mobilenet_v2,cpu attnnet,cpu
    kanet/imagenet cpu kanet_qkv,cpu
    aa/wrn_cifar100 cpu se_wide_resnet28_10,cpu
    aa/resnet_imagenet cpu resnet50,cpu aa_resnet34,cpu
    aa/mnasnet_imagenet cpu mnasnet_a1,cpu""".strip().splitlines()) for preset in presets)

_PRESETS = flags.DEFINE_string(
    "presets", ",".join(PRESETS), "Comma-separated presets (a preset's own commas, as in "
    "'configs/aa/resnet_imagenet.py:resnet50,cpu', stay with it).")
_ROOT = flags.DEFINE_string("workdir_root", "/tmp/paper_presets", "Parent of the workdirs.")


def family_of(spec: str) -> str:
  """The task family of a preset (its config's `task`; classification when unset)."""
  try:
    config = cli.load_config(spec, field="--presets")
  except cli.ConfigError as e:
    cli.fail(str(e))
  if spec.partition(":")[2].split(",")[-1] not in ("cpu", "tiny"):
    cli.fail(f"--presets: {spec!r} is not a ':cpu' (or ':tiny') preset of {spec.split(':')[0]}")
  return config.get("task") or "classification"


def derive(row: dict) -> dict:
  """The row's family, headline metric, its value at the start and the end, learned."""
  family = family_of(row["values"]["config"])
  metric, _, learned = FAMILIES[family]
  start, end = (r["final"].get(f"eval_{metric}") for r in (row["untrained"], row))
  error = row["error"] or (None if None not in (start, end) else
                           f"no eval_{metric} in the final metrics")
  return {"family": family, "metric": metric, "start": start, "end": end,
          "learned": not error and bool(learned(start, end)), "error": error}


TABLE = sweep.Table(
    "paper_presets", "Does every paper config learn? Its `:cpu` preset, before and after "
    "training", None, {"config": PRESETS}, start=True, derive=derive,
    goal=lambda r: r["learned"], goal_header="learned",
    columns=(("family", "family", "{}"), ("metric", "metric", "{}"),
             ("start", "start", "{:.4f}"), ("end", "end", "{:.4f}")),
    extra=lambda config, root: ([f"eval.classifier_workdir={root / 'digits_classifier'}"]
                                if family_of(config) == "gan" else []),
    about="Command: `python -m experiments.paper_presets`. GAN presets share one digits "
          "classifier for their FID features. Learned when:\n\n" + "\n".join(
              f"- {name}: {rule} (`eval_{metric}`)" for name, (metric, rule, _) in
              FAMILIES.items()))


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; flags are --presets and --workdir_root")
  chosen = tuple(p for p in re.split(r",(?=configs/)", _PRESETS.value) if p)
  for spec in chosen:
    family_of(spec)  # every preset checked before the first run
  sweep.sweep(TABLE, {"config": chosen}, [], pathlib.Path(_ROOT.value), not chosen)
  print((sweep.RESULTS / "paper_presets.md").read_text())


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
