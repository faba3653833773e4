"""Largest training batch within 11 GiB for SAGAN vs ISAGAN at 128×128 (beside Refined-SA
Table 3), by XLA memory analysis of one compiled (never run) training iteration.

  python -m experiments.gan_largest_batch [--variants=sagan,isagan] [--width=64]

The iteration is experiments/efficiency_gan.py's (D hinge loss on a real and a generated
batch, then G's loss, gradients of both; unconditional registry SAGAN G and D with spectral
norm, the context module at 32×32). Batches double from `--start` while XLA's total
(temporaries + arguments + outputs) stays ≤ 11 GiB; the paper's GTX 1080 Ti (11 GB) ran
SAGAN at 256 and ISAGAN at ≥ 1024 at 64×64. Writes experiments/results/gan_largest_batch.{md,json}.
"""

import json
import pathlib

import ml_collections
from absl import app, flags

from experiments import efficiency_gan
from experiments import measure

_VARIANTS = flags.DEFINE_list("variants", ["sagan", "isagan"], "sagan | isagan | sgan")
_WIDTH = flags.DEFINE_integer("width", 64, "Channel width (SAGAN's ImageNet 128² G/D: 64).")
_SIZE = flags.DEFINE_integer("size", 128, "Image side.")
_START = flags.DEFINE_integer("start", 8, "First batch size probed.")
_BUDGET = flags.DEFINE_float("budget_gib", 11.0, "Memory budget in GiB.")

GIB = 2**30
PAPER = {"sagan": "256 (64×64)", "isagan": "≥ 1024 (64×64)", "sgan": "≥ 1024 (64×64)"}


def main(argv):
  del argv
  config = ml_collections.ConfigDict(dict(image_size=_SIZE.value, width=_WIDTH.value, z_dim=128,
                                          spectral_norm=True))
  rows = []
  for variant in _VARIANTS.value:
    g, d, source = efficiency_gan.build(config, variant)
    step, state = efficiency_gan.train_fn(g, d)
    batch, largest, probes = _START.value, None, []
    while True:
      _, acct = measure.compile_fn(step, *state,
                                   *efficiency_gan._inputs(config, batch, abstract=True))  # pylint: disable=protected-access
      fits = acct["total_bytes"] <= _BUDGET.value * GIB
      probes.append({"batch": batch, "total_gib": acct["total_bytes"] / GIB, "fits": fits})
      print(variant, probes[-1], flush=True)
      if not fits:
        break
      largest, batch = batch, batch * 2
    rows.append({"variant": variant, "source": source, "largest_batch": largest,
                 "probes": probes, "paper": PAPER[variant]})
  out = pathlib.Path(__file__).parent / "results"
  result = {"machine": measure.machine_line(measure.machine()), "size": _SIZE.value,
            "width": _WIDTH.value, "budget_gib": _BUDGET.value, "rows": rows}
  (out / "gan_largest_batch.json").write_text(json.dumps(result, indent=1))
  lines = [f"# Largest GAN training batch within {_BUDGET.value:g} GiB at {_SIZE.value}×"
           f"{_SIZE.value} (Refined-SA Table 3)", "",
           f"XLA memory_analysis (temporaries + arguments + outputs) of one compiled training "
           f"iteration (D hinge on real + fake, then G; gradients of both, no optimizer), "
           f"unconditional SAGAN G + D, width {_WIDTH.value}, spectral norm, context module at "
           f"32², float32; compiled on {result['machine']}, never run. Command: "
           "`python -m experiments.gan_largest_batch`.", "",
           "| model | largest batch ≤ budget | paper (GTX 1080 Ti, 11 GB, 64×64) | "
           "GiB by batch |", "|---|---|---|---|"]
  for r in rows:
    sizes = ", ".join(f"{p['batch']}: {p['total_gib']:.2f}" for p in r["probes"])
    lines.append(f"| {r['variant'].upper()} | {r['largest_batch']} | {r['paper']} | {sizes} |")
  lines += ["", "At 64×64, width 16: [isa_tables.md](isa_tables.md).", ""]
  (out / "gan_largest_batch.md").write_text("\n".join(lines))
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
