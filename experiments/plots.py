"""The shapes of the results' plots (grouped bars, deltas against a paper, a sweep), one helper
each; a table's script turns its records into one of them. Imports no other module of
experiments/.
"""

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top


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


def link(caption: str, path) -> str:
  """The markdown line that links a plot beside its table: `caption: [name](name)`."""
  name = pathlib.Path(path).name
  return f"{caption}: [{name}]({name})"
