"""Input-pipeline rate of every paper config against what one accelerator host needs.

  python -m experiments.input_throughput [--configs=a.py,b.py] [--seconds=10] [--windows=3]
      [--warmup=5] [--table_only]

`attention_lab.data.throughput` (its docstring: the method) for each paper train config
(configs/{sanet,aa,kanet,hamburger,isa}/*.py) → experiments/results/input_throughput.{md,json};
`--configs` replaces only their rows.
"""

import datetime
import glob
import json
import os

from absl import app, flags

from attention_lab import cli
from attention_lab.data import throughput

_CONFIGS = flags.DEFINE_list("configs", None, "Config files (default: every paper config).")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only rebuild the table from the JSON.")
# --seconds, --windows, --warmup, --batch_size, --examples: attention_lab.data.throughput's.


def paper_configs() -> list[str]:
  return sorted(p for paper in ("sanet", "aa", "kanet", "hamburger", "isa")
                for p in glob.glob(f"configs/{paper}/*.py") if "def get_config" in open(p).read())


def _row(r: dict) -> str:
  if "error" in r:
    return f"| {r['config']} | not measured: {r['error']} |" + " |" * 8
  f = lambda v, d=0: "—" if v is None else f"{v:,.{d}f}"  # pylint: disable=C3001
  one, every = r["rates"].get("1", {}), r["rates"][max(r["rates"], key=int)]
  v5e, h100 = r["v5e_host"] or {}, r["h100x8_host"] or {}
  return (f"| {r['config']} | {r['dataset']} ({r['data']}) | {f(one.get('examples_per_s'), 1)} | "
          f"{f(one.get('examples_per_cpu_s'), 1)} | {f(every['examples_per_s'], 1)} "
          f"({every['cores']}) | {f(every.get('examples_per_cpu_s'), 1)} | "
          f"{f(v5e.get('examples_per_s'))} ({v5e.get('source', 'no aot')}) | "
          f"{f(v5e.get('cores_needed'), 1)} | {f(h100.get('examples_per_s'))} | "
          f"{f(h100.get('cores_needed'), 1)} |")


def table(results: list[dict], machine: dict) -> str:
  o = flags.FLAGS
  missing = [p for p in paper_configs() if p not in {r["config"] for r in results}]
  return "\n".join([
      "# Input-pipeline rate per paper config (`python -m experiments.input_throughput`)", "",
      f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['date']}, shared with "
      f"other jobs: 1-min load average {machine['load_average'][0]:.1f} at the start"
      + (f", {machine['load_after'][0]:.1f} at the end" if machine.get("load_after") else "")
      + ".", "",
      "Each row: `python -m attention_lab.data.throughput --config=<config>` (its docstring "
      "states the method): the task's own train stream (read, decode, augment, batch; no "
      f"model) pinned to 1 core and to all cores, median of {o.windows} windows of "
      f"{o.seconds:g} s after {o.warmup:g} s of warm-up, batches of {o.batch_size} (or the "
      "config's batch where smaller); the real "
      f"data where prepared, else {o.examples} stand-in examples in its on-disk format. Wall "
      "ex/s fall with the machine's load; ex per CPU-s (user + system time of the process, all "
      "its threads) is what one dedicated core delivers. Needed: what one host consumes at "
      "the `aot` roofline step time (an upper bound); cores = needed / the 1-core ex per "
      "CPU-s.", "",
      "| config | dataset (data) | 1 core ex/s | 1 core ex per CPU-s | all cores ex/s (cores) | "
      "all cores ex per CPU-s | v5e host needs ex/s (source) | cores for v5e host | "
      "8×H100 host needs ex/s | cores for 8×H100 host |", "|" + "---|" * 10,
      *map(_row, results), *(f"| {p} | not measured yet |" + " |" * 8 for p in missing), ""])


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]!r}")
  from experiments import measure  # pylint: disable=g-import-not-at-top  (not in the workers)
  saved_json = measure.RESULTS / "input_throughput.json"
  saved = None
  if _TABLE_ONLY.value or (_CONFIGS.value and saved_json.exists()):
    saved = json.loads(saved_json.read_text())  # a run of named configs replaces only their rows
  if not _TABLE_ONLY.value:
    machine = {"cpu": measure.machine()["cpu"], "cores": len(throughput.available_cores()),
               "date": datetime.date.today().isoformat(), "load_average": os.getloadavg()}
    fresh, saved = saved is None, saved or {"machine": machine, "results": []}
    try:
      configs = {p: cli.load_config(p, field="--configs")
                 for p in _CONFIGS.value or paper_configs()}
    except cli.ConfigError as e:
      cli.fail(str(e))
    o = flags.FLAGS
    for path, config in configs.items():
      try:
        result = throughput.run(config, path, batch_size=o.batch_size, seconds=o.seconds,
                                windows=o.windows, warmup=o.warmup, examples=o.examples,
                                core_counts=["1", "all"], data_root="",
                                aot_dir=str(measure.RESULTS))
        print(throughput.summary(result), flush=True)
      except (ValueError, RuntimeError) as e:
        result = {"config": path, "error": str(e).splitlines()[0]}
        print(f"{path}: {result['error']}", flush=True)
      if fresh:
        machine["load_after"] = os.getloadavg()
      else:  # the saved machine line is another run's
        result["measured"] = {"date": machine["date"], "load_average": os.getloadavg()}
      saved["results"] = sorted([r for r in saved["results"] if r["config"] != path] + [result],
                                key=lambda r: r["config"])
      saved_json.write_text(json.dumps(saved, indent=1))
  print(measure.write(measure.RESULTS, "input_throughput", None,
                      table(saved["results"], saved["machine"])))


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  app.run(main, flags_parser=cli.parse_flags)
