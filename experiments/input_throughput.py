"""Input-pipeline rate of every paper config against what one accelerator host needs.

  python -m experiments.input_throughput [--configs=a.py,b.py] [--seconds=10] [--windows=3] [--warmup=5]

Runs `attention_lab.data.throughput` (see its docstring for the method) for each train
config of the papers (configs/{sanet,aa,kanet,hamburger,isa}/*.py: the paper configs of
experiments/aot_table.py) and writes experiments/results/input_throughput.{md,json}.
"""

import datetime
import glob
import json
import os
import platform

from absl import app, flags

from attention_lab.data import throughput
from attention_lab import cli

_CONFIGS = flags.DEFINE_list("configs", None, "Config files (default: every paper config).")
# --seconds, --windows, --warmup, --batch_size, --examples: attention_lab.data.throughput's.
_SECONDS, _WINDOWS, _WARMUP = throughput._SECONDS, throughput._WINDOWS, throughput._WARMUP  # pylint: disable=protected-access
_BATCH, _EXAMPLES = throughput._BATCH, throughput._EXAMPLES  # pylint: disable=protected-access
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only rebuild the table from the JSON.")

RESULTS = os.path.join(os.path.dirname(__file__), "results")
PAPERS = ("sanet", "aa", "kanet", "hamburger", "isa")


def paper_configs() -> list[str]:
  return sorted(p for paper in PAPERS for p in glob.glob(f"configs/{paper}/*.py")
                if not p.endswith("__init__.py") and "def get_config" in open(p).read())


def machine() -> dict:
  model = platform.processor()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    model = names[0] if names else model
  return {"cpu": model, "cores": len(throughput.available_cores()),
          "date": datetime.date.today().isoformat(), "load_average": os.getloadavg()}


def _fmt(value, digits=0):
  return "—" if value is None else f"{value:,.{digits}f}"


def table(results: list[dict], host: dict) -> str:
  rows = ["| config | dataset (data) | ex/s 1 core | ex/s all cores | v5e host needs ex/s "
          "(source) | cores for v5e host | 8×H100 host needs ex/s | cores for 8×H100 host |",
          "|" + "---|" * 8]
  for r in results:
    link = f"[{r['config']}](../../{r['config']})"
    if "error" in r:
      rows.append(f"| {link} | not measured: {r['error']} |" + " |" * 6)
      continue
    one = r["rates"].get("1", {}).get("examples_per_s")
    all_key = max(r["rates"], key=int)
    every = r["rates"][all_key]["examples_per_s"]
    v5e, h100 = r["v5e_host"] or {}, r["h100x8_host"] or {}
    rows.append(
        f"| {link} | {r['dataset']} ({r['data']}) | {_fmt(one, 1)} | {_fmt(every, 1)} "
        f"({all_key}) | {_fmt(v5e.get('examples_per_s'))} ({v5e.get('source', 'no aot')}) | "
        f"{_fmt(v5e.get('cores_needed'), 1)} | {_fmt(h100.get('examples_per_s'))} | "
        f"{_fmt(h100.get('cores_needed'), 1)} |")
  measured = {r["config"] for r in results}
  for path in paper_configs():
    if path not in measured:
      rows.append(f"| [{path}](../../{path}) | not measured yet |" + " |" * 6)
  return "\n".join([
      "# Input-pipeline rate per paper config (`python -m experiments.input_throughput`)",
      "",
      f"Machine: {host['cpu']}, {host['cores']} cores, {host['date']}; a shared machine "
      f"(load average {host['load_average'][0]:.1f} on {host['cores']} cores at the start, "
      "other engineers' jobs beside this one), so the rates are lower bounds.",
      "",
      "`python -m attention_lab.data.throughput --config=<config>` for each row: the task's",
      "own train stream (read, decode, augment, batch; no model), in a fresh process pinned",
      "to 1 core and to all cores (`os.sched_setaffinity` + TF thread pools of that size),",
      f"median of {_WINDOWS.value} windows of {_SECONDS.value:g} s after {_WARMUP.value:g} s "
      f"of warm-up, batches of {_BATCH.value}. Data: the real dataset where prepared here,",
      f"else {_EXAMPLES.value} stand-in examples in the dataset's real on-disk format",
      "(`attention_lab.data.fake_files`: photo crops JPEG-encoded at ImageNet ~400×350, COCO",
      "~640×480, VOC 500×375, ADE20K 512×683, CelebA 178×218; CIFAR 32×32 PNG; CARE npz",
      "float32 patches), repeated.",
      "",
      "Needed = examples/s one accelerator host consumes at the roofline step time: v5e host",
      "= 4 chips (ct5lp-hightpu-4t, 112 vCPUs), per-host batch / step time of the v5e:2x2",
      "aot compile (v5e:4x4 × 4/16 where 2x2 does not fit); 8×H100 host = 8 / the H100 SXM",
      "roofline time of one example, max(FLOPs / peak at the model's dtype, bytes / 3.35",
      "TB/s), with the train FLOPs and bytes per example of the TPU compile (the GPU aot rows",
      "replace it where present; XLA:GPU fuses differently, so an estimate). A GAN consumes d_steps images per",
      "batch element. Cores = needed / the 1-core rate. Roofline times are lower bounds, so",
      "the needs are upper bounds.",
      "", *rows, ""])


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]!r}")
  out = os.path.join(RESULTS, "input_throughput")
  if _TABLE_ONLY.value:
    with open(out + ".json") as f:
      saved = json.load(f)
    host, results = saved["machine"], saved["results"]
  else:
    host, results = machine(), []
    paths = _CONFIGS.value or paper_configs()
    try:
      configs = {path: cli.load_config(path, field="--configs") for path in paths}
    except cli.ConfigError as e:
      cli.fail(str(e))
    for path, config in configs.items():
      try:
        result = throughput.run(
            config, path, batch_size=_BATCH.value, seconds=_SECONDS.value,
            windows=_WINDOWS.value, warmup=_WARMUP.value, examples=_EXAMPLES.value,
            core_counts=["1", "all"], data_root="", aot_dir=RESULTS)
        print(throughput.summary(result), flush=True)
      except (ValueError, RuntimeError) as e:
        result = {"config": path, "error": str(e).splitlines()[0]}
        print(f"{path}: {result['error']}", flush=True)
      results.append(result)
      with open(out + ".json", "w") as f:
        json.dump({"machine": host, "results": results}, f, indent=1)
  text = table(results, host)
  with open(out + ".md", "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  app.run(main, flags_parser=cli.parse_flags)
