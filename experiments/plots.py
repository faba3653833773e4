"""Plots of the paper tables from their saved results JSON (nothing is re-measured).

  python -m experiments.plots

One PNG per table that had none, written beside its results file and linked from it:
SAO Table 5 (sao_table5.png), Refined-SA Tables 2-3 (isa_tables.png) and AA Table 9
(aa_table9.png), also drawn by experiments.efficiency when it writes those tables; AA
Table 9's counts (aa_table9_counts.png, made by experiments/aa_table9_counts.py with
`grouped_bars`), the model counts (model_stats.png), Ham Table 9 (ham_table9.png, by
experiments/ham_table9.py). Each panel puts ours beside the paper's numbers.
"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

RESULTS = pathlib.Path(__file__).parent / "results"


def grouped_bars(path, title: str, groups, panels, *, log: bool = False, rotate: int = 0,
                 ylims=None):
  """Side-by-side panels of grouped bars. panels: [(ylabel, {series: values per group})];
  a value None leaves its bar out; ylims: a (low, high) or None per panel. Returns the path."""
  fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 0.9 * len(groups) + 2) *
                                                    len(panels), 4.2), squeeze=False)
  for ax, (ylabel, series), ylim in zip(axes[0], panels, ylims or [None] * len(panels)):
    width = 0.8 / len(series)
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
      heights = [np.nan if v is None else v for v in values]
      ax.bar(x + (i - (len(series) - 1) / 2) * width, heights, width, label=name)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=rotate, ha="right" if rotate else "center", fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
      ax.set_yscale("log")
    if ylim:
      ax.set_ylim(*ylim)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def sweep_plot(config, sweep, path, labels: dict, machine_line: str):
  """Time and XLA memory of every operator against the grid's positions (log-log); the
  programs over the memory budget as crosses on the memory panel."""
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  mb = 1e6
  for op in dict.fromkeys(p["operator"] for p in sweep):
    pts = [p for p in sweep if p["operator"] == op]
    timed = [p for p in pts if p["time_s"] is not None]
    line, = axes[0].loglog([p["positions"] for p in timed], [1e3 * p["time_s"] for p in timed],
                           "o-", label=labels[op])
    axes[1].loglog([p["positions"] for p in pts], [p["total_bytes"] / mb for p in pts], "o-",
                   color=line.get_color(), label=labels[op])
    over = [p for p in pts if p["time_s"] is None]
    if over:
      axes[1].loglog([p["positions"] for p in over], [p["total_bytes"] / mb for p in over], "x",
                     color=line.get_color(), markersize=10)
  axes[1].axhline(config.memory_budget_gib * 2**30 / mb, color="k", ls="--", lw=0.8,
                  label=f"budget {config.memory_budget_gib} GiB")
  for ax, ylabel in zip(axes, ("time (ms, median)", "XLA memory, temp+args+out (MB)")):
    ax.set_xlabel("spatial positions H·W")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(f"{config.title}\n{config.sweep_note}\n{machine_line}", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _load(name):
  return json.loads((RESULTS / f"{name}.json").read_text())


def link(md_name: str, png_name: str, caption: str) -> None:
  """Adds '<caption>: [png](png)' to the end of a results markdown file, once."""
  md = RESULTS / md_name
  text = md.read_text()
  line = f"{caption}: [{png_name}]({png_name})"
  if f"]({png_name})" not in text:
    md.write_text(text.rstrip("\n") + "\n\n" + line + "\n")


def delta_bars(path, title: str, labels, panels):
  """Horizontal bars of ours − paper in percent, one row per label. panels:
  [(xlabel, [Δ% or None per label])]; None (the paper gives no number) leaves a gap."""
  fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 0.24 * len(labels) + 1.4),
                           sharey=True, squeeze=False)
  y = np.arange(len(labels))
  for ax, (xlabel, deltas) in zip(axes[0], panels):
    values = np.array([np.nan if d is None else d for d in deltas])
    ax.barh(y, values, color=["tab:red" if abs(v) > 3 else "tab:blue" for v in
                              np.nan_to_num(values)])
    ax.axvline(0, color="black", lw=0.8)
    for edge in (-3, 3):
      ax.axvline(edge, color="gray", lw=0.6, ls="--")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
  axes[0][0].set_yticks(y)
  axes[0][0].set_yticklabels(labels, fontsize=7)
  axes[0][0].invert_yaxis()
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def model_stats_plot():
  """Ours − paper (%) of every counted model that the papers give a number for."""
  from experiments.model_stats import TABLES  # pylint: disable=g-import-not-at-top
  labels, d_params, d_madd = [], [], []
  for r in _load("model_stats"):
    if r["paper_params"] is None and r["paper_madd"] is None:
      continue
    # Compared as model_stats.md does: all trainable parameters where the table says so.
    paper_all = TABLES.get(r["table"], {}).get("params") == "all"
    ours = r["params_all"] if paper_all else r["params_paper_convention"]
    tag = r["table"].split(" (")[0]
    labels.append(f"{r['label'].split(' (')[0]} [{tag}]")
    d_params.append(None if r["paper_params"] is None else
                    100 * (ours - r["paper_params"]) / r["paper_params"])
    d_madd.append(None if r["paper_madd"] is None else
                  100 * (r["madd"] - r["paper_madd"]) / r["paper_madd"])
  path = delta_bars(RESULTS / "model_stats.png",
                    "Model counts: ours − paper (dashed: ±3%; red: beyond)", labels,
                    [("parameters Δ (%)", d_params), ("MAdd Δ (%)", d_madd)])
  link("model_stats.md", path.name, "Plot (ours − paper per row, %)")


def segmentation_models_plot():
  """Parameters and MAdd at 513² of each segmentation model, the paper's parameters beside
  ours where it gives them (Ham Table 2)."""
  rows = _load("segmentation_models")
  groups = [r["model"].split(" (")[0].split(" — ")[0] for r in rows]
  path = grouped_bars(
      RESULTS / "segmentation_models.png", "Segmentation models at 513×513", groups,
      [("parameters (M)", {"ours": [r["params"] / 1e6 for r in rows],
                           "paper": [r["paper_params"] and r["paper_params"] / 1e6
                                     for r in rows]}),
       ("MAdd (G)", {"ours": [r["madd"] / 1e9 for r in rows]})], rotate=30)
  link("segmentation_models.md", path.name, "Plot (parameters and MAdd per model)")


def sao_table5_plot(result, path):
  """Memory and time ratios against each comparison's baseline, ours beside the paper's."""
  rows = result["rows"]
  groups = [f"{r['label']}\n({r['comparison'].split(' (')[0]})" for r in rows]
  panels = [(f"{what} ratio to the baseline", {
      "paper": [r.get(f"paper_{what}_ratio") for r in rows],
      "ours": [r[f"{what}_ratio"] for r in rows]}) for what in ("memory", "time")]
  return grouped_bars(path, "SAO Table 5: training-step memory and time (ratios)", groups,
                      panels, rotate=60)


def isa_tables_plot(result, path):
  """Forward / backward speed-ups over SAGAN and the largest batch, ours beside the paper's."""
  rows = result["rows"]
  base = rows[0]["paper"]
  groups = [r["variant"].upper() for r in rows]
  largest = lambda v: float(str(v).replace("≥", "").strip())
  panels = [
      ("forward speed-up over SAGAN", {"paper": [base[0] / r["paper"][0] for r in rows],
                                       "ours": [r["forward"]["speedup"] for r in rows]}),
      ("backward speed-up over SAGAN", {"paper": [base[1] / r["paper"][1] for r in rows],
                                        "ours": [r["train"]["speedup"] for r in rows]}),
      ("largest batch (paper: 11 GB GPU; ours: 11 GiB)", {
          "paper": [largest(r["paper"][2]) for r in rows],
          "ours": [r["largest_batch"] or 0 for r in rows]})]
  return grouped_bars(path, "Refined-SA Tables 2-3", groups, panels)


def aa_table9_plot(result, path):
  """Per stage: the attention maps' bytes by arithmetic (bfloat16, the paper's; float32, ours)
  beside XLA's temporaries of the attention op alone."""
  rows = result["rows"]
  kb = lambda b: b / 1024
  panels = [("KB per layer (log)", {
      "paper: Nh·(HW)² bf16": [kb(r["maps_bf16_bytes"]) for r in rows],
      "ours: Nh·(HW)² f32": [kb(r["maps_f32_bytes"]) for r in rows],
      "XLA temp, op inference": [kb(r["op_infer"]["temp_bytes"]) for r in rows],
      "XLA temp, op training": [kb(r["op_train"]["temp_bytes"]) for r in rows]})]
  return grouped_bars(path, "AA Table 9: attention-map memory per layer",
                      [r["stage"] for r in rows], panels, log=True)


TABLE_PLOTS = {  # an efficiency table's name: (plot, caption of its link)
    "sao_table5": (sao_table5_plot, "Plot (ratios, ours beside the paper's)"),
    "isa_tables": (isa_tables_plot, "Plot (ours beside the paper's; paper's ≥ 1024 drawn at "
                                    "1024)"),
    "aa_table9": (aa_table9_plot, "Plot (per layer, log scale)")}


def table_plot(name: str, result, out_dir=RESULTS, stem: str | None = None) -> str:
  """Draws <out_dir>/<stem or name>.png of an efficiency table's result; returns the markdown
  line that links it (experiments.efficiency appends it to the table)."""
  plot, caption = TABLE_PLOTS[name]
  path = plot(result, pathlib.Path(out_dir) / f"{stem or name}.png")
  return f"{caption}: [{path.name}]({path.name})"


def main(argv):
  del argv
  model_stats_plot()
  segmentation_models_plot()
  for name, (plot, caption) in TABLE_PLOTS.items():
    link(f"{name}.md", plot(_load(name), RESULTS / f"{name}.png").name, caption)


if __name__ == "__main__":
  from experiments import measure  # pylint: disable=g-import-not-at-top
  measure.run(main)
