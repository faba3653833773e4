"""Trains a config once per combination of field values; tabulates each run's `Final:`
metrics, wall and CPU time.

  python -m experiments.sweep --config=configs/X.py[:preset] --vary=model.attention=a,b,c
      [--vary=FIELD=V1,V2 ...] [--set=FIELD=VALUE ...] [--name=NAME]
      [--workdir_root=/tmp/sweeps] [--table_only]
  python -m experiments.sweep --table=default_operators [--vary=model.attention=none] [--set=...]

Each run is `python -m attention_lab.main` in a fresh workdir (experiments/runs.py).
Writes experiments/results/NAME.{json,md} (NAME: --name, the table's, or
sweep_<config>); the rows of the combinations run replace theirs, other rows stay, and
so do the markdown's notes (measure.write). A named table (experiments/default_*.py)
fixes the config, the values, the columns and the goal; its --vary restricts the values.
"""

import dataclasses
import itertools
import json
import pathlib
import shutil
import sys
from collections.abc import Callable

from absl import app, flags

from attention_lab import cli
from experiments import runs

RESULTS = pathlib.Path(__file__).parent / "results"


@dataclasses.dataclass(frozen=True)
class Table:
  """A sweep with its results file: `columns` are (header, key, format) with keys of the
  `Final:` line or of the row (wall_s, cpu_s, steps, load, goal_met)."""
  name: str
  title: str
  config: str
  vary: dict[str, tuple[str, ...]]
  columns: tuple[tuple[str, str, str], ...] = ()
  about: str = ""
  goal: Callable[[dict], bool] | None = None  # (row) -> met
  picture: str = ""  # a glob under the workdir's images/: its last file goes to results/
  appendix: Callable[[], tuple[list[str], dict]] | None = None  # (md lines, json fields)


TIME_COLUMNS = (("wall s", "wall_s", "{:.0f}"), ("CPU s", "cpu_s", "{:.0f}"),
                ("1-min load before → after", "load", ""))


def _tables() -> dict[str, Table]:
  # pylint: disable=g-import-not-at-top
  from experiments import (default_detection, default_operators, default_restoration,
                           default_segmentation)
  return {t.name: t for t in (default_operators.TABLE, default_segmentation.TABLE,
                              default_restoration.TABLE, default_detection.TABLE)}


def define_flags() -> None:
  """The command's flags (defined when run, so the table modules import this freely)."""
  cli.define_once(flags.DEFINE_string, "config", None, "configs/X.py[:preset] to sweep.")
  flags.DEFINE_multi_string("vary", [], "FIELD=V1,V2,...: the values of a config field.")
  flags.DEFINE_multi_string("set", [], "FIELD=VALUE: an override of every run.")
  flags.DEFINE_string("table", None, "A named table (experiments/default_*.py).")
  flags.DEFINE_string("name", None, "Results file stem (default: sweep_<config>).")
  flags.DEFINE_string("workdir_root", "/tmp/sweeps", "Parent of the workdirs.")
  flags.DEFINE_bool("table_only", False, "Rewrite the results from the JSON only.")


def parse_assignment(text: str, flag: str) -> tuple[str, str]:
  field, sep, value = text.partition("=")
  if not sep or not field or not value:
    cli.fail(f"--{flag}={text!r}: expected FIELD=VALUE (e.g. model.attention=softmax)")
  return field, value


def check_fields(config_spec: str, fields) -> None:
  """One line naming the field when `config_spec` does not load or lacks a field."""
  try:
    config = cli.load_config(config_spec)
    cli._check_overrides(config, [f"--config.{f}=" for f in fields])  # pylint: disable=protected-access
  except cli.ConfigError as e:
    cli.fail(str(e))


def combinations(vary: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
  return [dict(zip(vary, values)) for values in itertools.product(*vary.values())]


def _key(values: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in values.items())


def run_row(table: Table, values: dict, fixed: list[str], root: pathlib.Path) -> dict:
  """Trains one combination; its row (Run record, steps, goal)."""
  workdir = root / table.name / runs.slug(_key(values) or "base")
  overrides = [f"{k}={v}" for k, v in values.items()] + fixed
  run = runs.train(table.config, overrides, workdir=workdir, log=workdir.parent /
                   f"{workdir.name}.log")
  saved = workdir / "config.json"
  steps = json.loads(saved.read_text()).get("num_train_steps") if saved.exists() else None
  row = {"values": values, "overrides": fixed, "steps": steps, **run.record(),
         "error": run.error}
  row["goal_met"] = bool(table.goal(row)) if table.goal and not run.returncode else None
  pictures = sorted((workdir / "images").glob(table.picture)) if table.picture else []
  if pictures:
    shutil.copy(pictures[-1], RESULTS / f"{table.name}_{'_'.join(values.values())}.png")
  return row


def _cell(row: dict, key: str, fmt: str) -> str:
  if key == "load":
    return f"{row['load_before']:.1f} → {row['load_after']:.1f}" if row.get(
        "load_before") is not None else "—"
  if key == "goal_met":
    return {True: "yes", False: "**no**"}.get(row.get("goal_met"), "—")
  value = row.get(key, row.get("final", {}).get(key))
  return "—" if value is None else fmt.format(value)


def markdown(table: Table, rows: list[dict], machine: str, appendix: list[str]) -> str:
  metrics = table.columns or tuple(
      (k[len("eval_"):], k, "{:.4f}") for k in sorted({k for r in rows for k in r["final"]
                                                      if k.startswith("eval_")}))
  tail = (*TIME_COLUMNS, *((("goal met", "goal_met", ""),) if table.goal else ()))
  vary = ", ".join(f"`--config.{k}={'|'.join(v)}`" for k, v in table.vary.items())
  lines = [f"# {table.title}", "",
           *([table.about, ""] if table.about else []),
           f"Machine: {machine}. Each row: `python -m attention_lab.main "
           f"--config={table.config}` with {vary} in a fresh workdir; wall = the process "
           "end to end (start-up, data, compilation, training, evaluation), CPU = user + "
           "system time of all its threads (on a shared machine the wall time grows, the "
           "CPU time much less).", "",
           "| " + " | ".join([*table.vary, *(c[0] for c in metrics + tail)]) + " |",
           "|" + "---|" * (len(table.vary) + len(metrics) + len(tail))]
  for r in rows:
    first = [str(r["values"].get(k, "")) for k in table.vary]
    if r.get("overrides") and first:
      first[-1] += " (" + " ".join(f"`{o}`" for o in r["overrides"]) + ")"
    cells = ([f"**failed**: `{r['error']}`"] + ["—"] * (len(metrics) - 1) if r.get("error")
             else [_cell(r, k, f) for _, k, f in metrics])
    lines.append("| " + " | ".join(first + cells + [_cell(r, k, f) for _, k, f in tail]) + " |")
  return "\n".join(lines + [""] + appendix).rstrip() + "\n"


def write(table: Table, rows: list[dict], extra: dict | None = None,
          appendix: list[str] | None = None) -> None:
  """results/NAME.json ({rows, ...extra}) and NAME.md, keeping the md's notes."""
  from experiments import measure  # pylint: disable=g-import-not-at-top
  rank = {_key(v): i for i, v in enumerate(combinations(table.vary))}
  rows = sorted(rows, key=lambda r: rank.get(_key(r["values"]), len(rank)))
  extra = extra or {}
  measure.write(RESULTS, table.name, {"rows": rows, **extra},
                markdown(table, rows, extra.get("machine", "not recorded"), appendix or []))


def sweep(table: Table, only: dict[str, tuple[str, ...]], fixed: list[str],
          root: pathlib.Path, table_only: bool = False) -> list[dict]:
  """Runs the combinations of `table.vary` restricted to `only`; writes after each row."""
  path = RESULTS / f"{table.name}.json"
  previous = json.loads(path.read_text()) if path.exists() else {}
  rows = {_key(r["values"]): r for r in previous.get("rows", [])}
  extra = {k: v for k, v in previous.items() if k != "rows"}
  appendix = []
  if table.appendix:
    appendix, fields = table.appendix()
    extra.update(fields)
  if not table_only:
    from experiments import measure  # pylint: disable=g-import-not-at-top
    extra["machine"] = measure.machine_line()
    for values in combinations({k: only.get(k, v) for k, v in table.vary.items()}):
      rows[_key(values)] = run_row(table, values, fixed, root)
      print(json.dumps({k: rows[_key(values)][k] for k in ("values", "final", "wall_s",
                                                           "cpu_s", "error")}), flush=True)
      write(table, list(rows.values()), extra, appendix)
  write(table, list(rows.values()), extra, appendix)
  return list(rows.values())


def main(argv):
  opts = flags.FLAGS
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; see --help")
  vary = {}
  for text in opts.vary:
    field, values = parse_assignment(text, "vary")
    vary[field] = tuple(values.split(","))
  fixed = ["=".join(parse_assignment(t, "set")) for t in opts.set]
  if opts.table:
    if opts.config:
      cli.fail("--table fixes the config; give --table or --config, not both")
    tables = _tables()
    if opts.table not in tables:
      cli.fail(f"--table={opts.table!r}: expected one of {sorted(tables)}")
    table = tables[opts.table]
    for field, values in vary.items():
      unknown = set(values) - set(table.vary.get(field, ()))
      if field not in table.vary or unknown:
        cli.fail(f"--vary={field}={','.join(values)}: table {table.name} varies "
                 + ", ".join(f"{k} over {','.join(v)}" for k, v in table.vary.items()))
  else:
    if not opts.config or not vary:
      cli.fail("give --config=configs/X.py[:preset] and at least one --vary=FIELD=V1,V2 "
               "(or --table=NAME)")
    stem = opts.config.replace("configs/", "").replace(".py", "")
    table = Table(name=opts.name or f"sweep_{runs.slug(stem)}",
                  title=f"Sweep of `{opts.config}`", config=opts.config, vary=vary)
  check_fields(table.config, [*table.vary, *(o.split("=")[0] for o in fixed)])
  sweep(table, vary if opts.table else {}, fixed, pathlib.Path(opts.workdir_root),
        opts.table_only)
  print((RESULTS / f"{table.name}.md").read_text())


def main_for(table_name: str) -> None:
  """`python -m experiments.<table>`: the sweep of that table, with sweep's flags."""
  define_flags()
  sys.argv = [sys.argv[0], f"--table={table_name}", *sys.argv[1:]]
  app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=cli.parse_flags)
