"""Redraws the tables' plots from their saved JSON in experiments/results (nothing is measured).

  python -m experiments.redraw_plots

Each plot is its table script's (`plot`); the efficiency tables' sweep plots come back with
`--config.render_only=True` of experiments/efficiency.py, which also re-renders the markdown.
"""

import json

from attention_lab import cli
from configs.efficiency import aa_table9, isa_tables, sao_table5
from experiments import (aa_table9_counts, efficiency_aa, efficiency_gan, efficiency_nets,
                         ham_table9, measure, model_stats)

RECORDS = {"model_stats": model_stats.classification_plot,
           "segmentation_models": model_stats.segmentation_plot,
           "ham_table9": ham_table9.plot, "aa_table9_counts": aa_table9_counts.plot}
# Efficiency tables with a plot: (config module, table kind module).
EFFICIENCY = {"sao_table5": (sao_table5, efficiency_nets), "isa_tables": (isa_tables, efficiency_gan),
              "aa_table9": (aa_table9, efficiency_aa)}


def redraw(name: str):
  """Draws experiments/results/<name>.png from <name>.json; returns the path."""
  result = json.loads((measure.RESULTS / f"{name}.json").read_text())
  path = measure.RESULTS / f"{name}.png"
  if name in RECORDS:
    RECORDS[name](result, path)
  else:
    config, kind = EFFICIENCY[name]
    kind.plot(config.get_config(), result, path, measure.machine_line(result["machine"]))
  return path


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; this command takes no arguments")
  for name in (*RECORDS, *EFFICIENCY):
    print(redraw(name))


if __name__ == "__main__":
  measure.run(main)
