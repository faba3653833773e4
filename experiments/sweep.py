"""Trains a config once per combination of field values and tabulates each run's final
metrics, wall and CPU time (experiments/runs.py) → experiments/results/NAME.{json,md}.

  python -m experiments.sweep --config=configs/X.py[:preset] --vary=model.attention=a,b,c
      [--vary=FIELD=V1,V2 ...] [--set=FIELD=VALUE ...] [--name=NAME] [--table_only]
  python -m experiments.default_operators [--vary=model.attention=none] [--set=...]

Rows run replace theirs; other rows and the md's notes stay. A named `Table` (default_*.py,
paper_presets.py) fixes the config (or varies it as `config`), values, columns and goal.
"""

import dataclasses
import itertools
import json
import pathlib
import shutil
from collections.abc import Callable

from absl import app, flags

from attention_lab import cli
from experiments import measure, runs

RESULTS = pathlib.Path(__file__).parent / "results"
TIMES = (("wall s", "wall_s", "{:.0f}"), ("CPU s", "cpu_s", "{:.0f}"),
         ("1-min load before → after", "load", ""))


@dataclasses.dataclass(frozen=True)
class Table:
  """A sweep with its results file. `columns`: (header, key, format), the key one of the
  final metrics or of the row (steps, and what `derive` adds); () tabulates every eval_ metric."""
  name: str
  title: str
  config: str | None  # None: each row's `config` value
  vary: dict[str, tuple[str, ...]]
  columns: tuple[tuple[str, str, str], ...] = ()
  about: str = ""
  goal: Callable[[dict], bool] | None = None  # (row) -> met
  goal_header: str = "goal met"
  picture: str = ""  # a glob under the workdir's images/: its last file goes to results/
  appendix: Callable[[], tuple[list[str], dict]] | None = None  # (md lines, json fields)
  start: bool = False  # evaluate the initial model first: row["untrained"]
  extra: Callable[[str, pathlib.Path], list[str]] | None = None  # (config, root) -> overrides
  derive: Callable[[dict], dict] | None = None  # (row) -> fields added to it


def define_flags() -> None:
  """The command's flags (defined when run, so the table modules import this freely)."""
  cli.define_once(flags.DEFINE_string, "config", None, "configs/X.py[:preset] to sweep.")
  flags.DEFINE_multi_string("vary", [], "FIELD=V1,V2,...: the values of a config field.")
  flags.DEFINE_multi_string("set", [], "FIELD=VALUE: an override of every run.")
  flags.DEFINE_string("name", None, "Results file stem (default: sweep_<config>).")
  flags.DEFINE_string("workdir_root", "/tmp/sweeps", "Parent of the workdirs.")
  flags.DEFINE_bool("table_only", False, "Rewrite the results from the JSON only.")


def _key(values: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in values.items())


def combinations(vary: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
  return [dict(zip(vary, values)) for values in itertools.product(*vary.values())]


def run_row(table: Table, values: dict, fixed: list[str], root: pathlib.Path) -> dict:
  """Runs one combination (its initial evaluation first if `table.start`); its row."""
  config = values.get("config", table.config)
  workdir = root / table.name / runs.slug(_key(values) or "base")
  overrides = [f"{k}={v}" for k, v in values.items() if k != "config"] + fixed
  overrides += table.extra(config, root) if table.extra else []
  log = workdir.parent / f"{workdir.name}.log"
  row = {"values": values, "overrides": fixed}
  if table.start:
    first = runs.untrained(config, overrides, workdir=workdir, log=log.with_suffix(".0.log"))
    row["untrained"] = {"final": first.final, "wall_s": first.wall_s}
  run = first if table.start and first.returncode else runs.train(
      config, overrides, workdir=workdir, fresh=not table.start, log=log)
  saved = workdir / "config.json"
  row.update(steps=json.loads(saved.read_text()).get("num_train_steps") if saved.exists()
             else None, **run.record(), error=run.error)
  row.update(table.derive(row) if table.derive else {})
  row["goal_met"] = bool(table.goal(row)) if table.goal and not row["error"] else None
  pictures = sorted((workdir / "images").glob(table.picture)) if table.picture else []
  if pictures:
    shutil.copy(pictures[-1], RESULTS / f"{table.name}_{'_'.join(values.values())}.png")
  return row


def _cell(row: dict, key: str, fmt: str) -> str:
  if key == "load":
    return ("—" if row.get("load_before") is None else
            f"{row['load_before']:.1f} → {row['load_after']:.1f}")
  if key == "goal_met":
    return {True: "yes", False: "**no**"}.get(row.get("goal_met"), "—")
  value = row.get(key, row.get("final", {}).get(key))
  return "—" if value is None else fmt.format(value)


def markdown(table: Table, rows: list[dict], machine: str, appendix: list[str]) -> str:
  metrics = table.columns or tuple((k[len("eval_"):], k, "{:.4f}") for k in sorted(
      {k for r in rows for k in r["final"] if k.startswith("eval_")}))
  tail = TIMES + (((table.goal_header, "goal_met", ""),) if table.goal else ())
  vary = ", ".join(f"`--config.{k}={'|'.join(v)}`" for k, v in table.vary.items()
                   if k != "config") or "no overrides"
  lines = [f"# {table.title}", "", *([table.about, ""] if table.about else []),
           f"Machine: {machine}. Each row: `python -m attention_lab.main --config="
           f"{table.config or '<config>'}` with {vary} in a fresh workdir"
           + (", after `--until_step=0` there (start: the evaluation of the initial model)"
              if table.start else "") +
           "; wall = the process end to end (start-up, data, compilation, training, "
           "evaluation), CPU = user + system time of all its threads (on a shared machine the "
           "wall time grows, the CPU time much less).", "",
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


def sweep(table: Table, only: dict[str, tuple[str, ...]], fixed: list[str],
          root: pathlib.Path, table_only: bool = False) -> list[dict]:
  """Runs the combinations of `table.vary` restricted to `only`; writes after each row."""
  path = RESULTS / f"{table.name}.json"
  rank = {_key(v): i for i, v in enumerate(combinations(table.vary))}
  extra = json.loads(path.read_text()) if path.exists() else {}
  rows = {_key(r["values"]): r for r in extra.pop("rows", [])}
  appendix, fields = table.appendix() if table.appendix else ([], {})
  extra.update(fields)

  def write():
    ordered = sorted(rows.values(), key=lambda r: rank.get(_key(r["values"]), len(rank)))
    measure.write(RESULTS, table.name, {"rows": ordered, **extra}, markdown(
        table, ordered, extra.get("machine", "not recorded"), appendix))

  if not table_only:
    extra["machine"] = measure.machine_line()
    for values in combinations({k: only.get(k, v) for k, v in table.vary.items()}):
      rows[_key(values)] = row = run_row(table, values, fixed, root)
      print(json.dumps({k: row[k] for k in ("values", "final", "wall_s", "cpu_s", "error")}),
            flush=True)
      write()
  write()
  return list(rows.values())


def _assignment(text: str, flag: str) -> tuple[str, str]:
  field, sep, value = text.partition("=")
  if not sep or not field or not value:
    cli.fail(f"--{flag}={text!r}: expected FIELD=VALUE (e.g. model.attention=softmax)")
  return field, value


def main(argv, table: Table | None = None):
  o = flags.FLAGS
  if len(argv) > 1 or (table and o.config):
    cli.fail(f"unexpected arguments {argv[1:] or ['--config']}; see --help")
  vary = {f: tuple(v.split(",")) for f, v in (_assignment(t, "vary") for t in o.vary)}
  fixed = ["=".join(_assignment(t, "set")) for t in o.set]
  if not table and not (o.config and vary):
    cli.fail("give --config=configs/X.py[:preset] and at least one --vary=FIELD=V1,V2")
  stem = runs.slug((o.config or "").removeprefix("configs/").replace(".py", ""))
  table = table or Table(o.name or f"sweep_{stem}", f"Sweep of `{o.config}`", o.config, vary)
  for field, values in vary.items():
    if set(values) - set(table.vary.get(field, ())):
      cli.fail(f"--vary={field}={','.join(values)}: table {table.name} varies "
               + ", ".join(f"{k} over {','.join(v)}" for k, v in table.vary.items()))
  try:  # one line naming the field when the config does not load or lacks a field
    cli._check_overrides(cli.load_config(table.config), [  # pylint: disable=protected-access
        f"--config.{f.split('=')[0]}=" for f in [*table.vary, *fixed]])
  except cli.ConfigError as e:
    cli.fail(str(e))
  sweep(table, vary, fixed, pathlib.Path(o.workdir_root), o.table_only)
  print((RESULTS / f"{table.name}.md").read_text())


def main_for(table: Table) -> None:
  """`python -m experiments.<table>`: the sweep of that table, with sweep's flags."""
  define_flags()
  app.run(lambda argv: main(argv, table), flags_parser=cli.parse_flags)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=cli.parse_flags)
