"""The results' plots, drawn from their saved JSON with ours beside the papers' numbers:
`python -m experiments.plots` redraws every plot of `PLOTS` (nothing is re-measured). One
helper per plot shape; each table's entry of `PLOTS` turns its JSON into that shape's arguments.
"""

import json
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

RESULTS = pathlib.Path(__file__).parent / "results"


def _save(fig, path, title, dpi=110):
  fig.suptitle(title, fontsize=8 if "\n" in title else None)
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  plt.close(fig)
  return pathlib.Path(path)


def _bars(values):
  return [np.nan if v is None else v for v in values]  # None: no bar


def grouped_bars(path, title: str, groups, panels, *, log: bool = False, rotate: int = 0,
                 ylims=None):
  """Panels of grouped bars; panels: [(ylabel, {series: value per group, None: no bar})],
  ylims: a (low, high) or None per panel. Returns the path."""
  fig, axes = plt.subplots(1, len(panels), squeeze=False,
                           figsize=(max(5.0, 0.9 * len(groups) + 2) * len(panels), 4.2))
  x = np.arange(len(groups))
  for ax, (ylabel, series), ylim in zip(axes[0], panels, ylims or [None] * len(panels)):
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
      ax.bar(x + (i - (len(series) - 1) / 2) * width, _bars(values), width, label=name)
    ax.set_xticks(x, groups, rotation=rotate, ha="right" if rotate else "center", fontsize=8)
    ax.set(ylabel=ylabel, yscale="log" if log else "linear", ylim=ylim)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
  return _save(fig, path, title)


def delta_bars(path, title: str, labels, panels):
  """Horizontal bars of ours − paper (%), one row per label; panels: [(xlabel, [Δ or None])].
  Dashed: ±3%; red: beyond."""
  fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 0.24 * len(labels) + 1.4),
                           sharey=True, squeeze=False)
  y = np.arange(len(labels))
  for ax, (xlabel, deltas) in zip(axes[0], panels):
    values = np.array(_bars(deltas))
    ax.barh(y, values, color=["tab:red" if abs(v) > 3 else "tab:blue"
                              for v in np.nan_to_num(values)])
    for edge, style in ((0, "-"), (-3, "--"), (3, "--")):
      ax.axvline(edge, color="black" if edge == 0 else "gray", lw=0.7, ls=style)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
  axes[0][0].set_yticks(y, labels, fontsize=7)
  axes[0][0].invert_yaxis()
  return _save(fig, path, title)


def sweep_plot(config, sweep, path, labels: dict, machine_line: str):
  """Time and XLA memory of every operator against the grid's positions (log-log); programs
  over the memory budget as crosses on the memory panel."""
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for op in dict.fromkeys(p["operator"] for p in sweep):
    pts = [p for p in sweep if p["operator"] == op]
    timed = [p for p in pts if p["time_s"] is not None]
    line, = axes[0].loglog([p["positions"] for p in timed], [1e3 * p["time_s"] for p in timed],
                           "o-", label=labels[op])
    for points, style in ((pts, "o-"), ([p for p in pts if p["time_s"] is None], "x")):
      axes[1].loglog([p["positions"] for p in points], [p["total_bytes"] / 1e6 for p in points],
                     style, color=line.get_color(), markersize=10 if style == "x" else 6,
                     label=labels[op] if style == "o-" else None)
  axes[1].axhline(config.memory_budget_gib * 2**30 / 1e6, color="k", ls="--", lw=0.8,
                  label=f"budget {config.memory_budget_gib} GiB")
  for ax, ylabel in zip(axes, ("time (ms, median)", "XLA memory, temp+args+out (MB)")):
    ax.set(xlabel="spatial positions H·W", ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
  return _save(fig, path, f"{config.title}\n{config.sweep_note}\n{machine_line}", dpi=100)


# Each table's JSON (its "rows" where it has them) → (shape, title, groups or labels,
# panels, options).
def _model_stats(records):
  from experiments.model_stats import TABLES  # pylint: disable=g-import-not-at-top
  rows = [r for r in records if r["paper_params"] is not None or r["paper_madd"] is not None]
  delta = lambda ours, paper: None if paper is None else 100 * (ours - paper) / paper
  ours = lambda r: r["params_all" if TABLES[r["table"]].get("params") == "all"
                     else "params_paper_convention"]
  return (delta_bars, "Model counts: ours − paper (dashed: ±3%; red: beyond)",
          [f"{r['label'].split(' (')[0]} [{r['table'].split(' (')[0]}]" for r in rows],
          [("parameters Δ (%)", [delta(ours(r), r["paper_params"]) for r in rows]),
           ("MAdd Δ (%)", [delta(r["madd"], r["paper_madd"]) for r in rows])], {})


def _segmentation_models(rows):
  return (grouped_bars, "Segmentation models at 513×513",
          [r["model"].split(" (")[0].split(" — ")[0] for r in rows],
          [("parameters (M)", {"ours": [r["params"] / 1e6 for r in rows],
                               "paper": [r["paper_params"] and r["paper_params"] / 1e6
                                         for r in rows]}),
           ("MAdd (G)", {"ours": [r["madd"] / 1e9 for r in rows]})], dict(rotate=30))


def _sao_table5(rows):
  return (grouped_bars, "SAO Table 5: training-step memory and time (ratios)",
          [f"{r['label']}\n({r['comparison'].split(' (')[0]})" for r in rows],
          [(f"{what} ratio to the baseline", {"paper": [r.get(f"paper_{what}_ratio") for r in rows],
                                              "ours": [r[f"{what}_ratio"] for r in rows]})
           for what in ("memory", "time")], dict(rotate=60))


def _isa_tables(rows):
  base = rows[0]["paper"]
  largest = lambda v: float(str(v).replace("≥", "").strip())
  return (grouped_bars, "Refined-SA Tables 2-3", [r["variant"].upper() for r in rows], [
      (f"{what} speed-up over SAGAN", {"paper": [base[i] / r["paper"][i] for r in rows],
                                       "ours": [r[key]["speedup"] for r in rows]})
      for i, what, key in ((0, "forward", "forward"), (1, "backward", "train"))] + [
          ("largest batch (paper: 11 GB GPU; ours: 11 GiB)", {
              "paper": [largest(r["paper"][2]) for r in rows],
              "ours": [r["largest_batch"] or 0 for r in rows]})], {})


def _aa_table9(rows):
  return (grouped_bars, "AA Table 9: attention-map memory per layer", [r["stage"] for r in rows],
          [("KB per layer (log)", {
              "paper: Nh·(HW)² bf16": [r["maps_bf16_bytes"] / 1024 for r in rows],
              "ours: Nh·(HW)² f32": [r["maps_f32_bytes"] / 1024 for r in rows],
              "XLA temp, op inference": [r["op_infer"]["temp_bytes"] / 1024 for r in rows],
              "XLA temp, op training": [r["op_train"]["temp_bytes"] / 1024 for r in rows]})],
          dict(log=True))


def _aa_table9_counts(r):
  k, m = (lambda key: [v / 1e3 for v in r[key]]), (lambda key: [v / 1e6 for v in r[key]])
  return (grouped_bars, "AA Table 9 per attention layer of AA-ResNet-50", r["stages"], [
      ("parameters (k)", {"paper": k("paper_params"), "ours (dk = κ·Fout)": k("ours_params"),
                          "convs, dk = 160": k("convention_params")}),
      ("FLOPS (M)", {"paper": m("paper_flops"), "ours (whole AA layer MAdd)": m("ours_flops"),
                     "nearest convention": m("convention_flops")})], {})


def _ham_table9(rows):
  from experiments.ham_table9 import RANK  # pylint: disable=g-import-not-at-top
  log_r = math.log(RANK)
  return (grouped_bars, "Ham Table 9: CD temperature T",
          [f"T = {r['temperature']:g}" for r in rows],
          [("paper VOC val mIoU (%)", {"best": [r["paper_miou_best"] for r in rows],
                                       "mean": [r["paper_miou_mean"] for r in rows]}),
           ("ours: CD solver on synthetic tokens", {
               "reconstruction error": [r["reconstruction_error"] for r in rows],
               "initial-code entropy / log r": [r["code_entropy"] / log_r for r in rows]})],
          dict(ylims=[(76.5, 78.5), None]))


PLOTS = {"model_stats": _model_stats, "segmentation_models": _segmentation_models,
         "sao_table5": _sao_table5, "isa_tables": _isa_tables, "aa_table9": _aa_table9,
         "aa_table9_counts": _aa_table9_counts, "ham_table9": _ham_table9}
# The efficiency tables with a plot, and the caption of its link in their markdown.
TABLE_PLOTS = {"sao_table5": "Plot (ratios, ours beside the paper's)",
               "isa_tables": "Plot (ours beside the paper's; paper's ≥ 1024 drawn at 1024)",
               "aa_table9": "Plot (per layer, log scale)"}


def draw(name: str, result=None, out_dir=RESULTS, stem: str | None = None) -> pathlib.Path:
  """Draws <out_dir>/<stem or name>.png from `result` (default: the saved <name>.json)."""
  result = result or json.loads((RESULTS / f"{name}.json").read_text())
  rows = result.get("rows", result) if isinstance(result, dict) else result
  plot, title, groups, panels, options = PLOTS[name](rows)
  return plot(pathlib.Path(out_dir) / f"{stem or name}.png", title, groups, panels, **options)


def table_plot(name: str, result, out_dir=RESULTS, stem: str | None = None) -> str:
  """Draws an efficiency table's plot; returns the markdown line that links it."""
  path = draw(name, result, out_dir, stem)
  return f"{TABLE_PLOTS[name]}: [{path.name}]({path.name})"


if __name__ == "__main__":
  for plot_name in PLOTS:
    print(draw(plot_name))
