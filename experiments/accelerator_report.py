"""One command for an accelerator: every efficiency table, the relative-attention comparison
and a short run of each default experiment, on the GPU or TPU present.

  python -m experiments.accelerator_report [--out=DIR] [--smoke] [--parts=NAME,...]

Each part is its own process (experiments/runs.py; a failure stops only its part). Writes under
experiments/results/<device kind>/ (or --out): README.md (device, versions, each part's status
and links, the runs' speed), environment.json, report.json, tables/, relative/, runs/, logs/.
--smoke: every part at its `:tiny` preset, on any device.
"""

import collections
import contextlib
import datetime
import importlib.metadata
import json
import pathlib
import re
import sys
import time

from absl import app, flags

from attention_lab import cli
from experiments import measure, runs

_OUT = cli.define_once(flags.DEFINE_string, "out", "",
                       "Output folder; default experiments/results/<device kind>.")
_SMOKE = flags.DEFINE_bool("smoke", False, "Every part at its :tiny preset (any device).")
_PARTS = flags.DEFINE_list("parts", [], "Only these parts (names as in the summary).")

RUN_STEPS = 300
# Default experiments at accelerator size: (config, global batch). The CPU configs' batches
# (8-64) leave an accelerator idle; these fill one device and stay valid on 8.
RUNS = {"default": ("configs/default.py", 1024),
        "segmentation": ("configs/segmentation/default.py", 64),
        "restoration": ("configs/restoration/default.py", 64),
        "gan": ("configs/gan/default.py", 256),
        "detection": ("configs/detection/default.py", 128)}
PERF = ("examples_per_second", "examples_per_second_per_device", "step_seconds",
        "tflops_per_device", "mfu")
Part = collections.namedtuple("Part", "name kind module config overrides")


def plan(out: pathlib.Path, smoke: bool) -> list[Part]:
  """Every part, in order (the goals table reads SAO / KAO's json); a table's part is named
  as its files: <table>[_bfloat16]."""
  tiny, bf16 = (":tiny" if smoke else ""), "--config.dtype=bfloat16"
  paper_batch = () if smoke else ("--config.time_batch=128",)  # SAO T5: 128 images of 224²
  tables = [("sao_table2", ()), ("sao_table2", (bf16,)), ("kao_table1", ()),
            ("kao_table1", (bf16,)), ("ham_table3", ()), ("isa_tables", ()), ("aa_table9", ()),
            ("sao_table5", paper_batch), ("sao_table5", (bf16, *paper_batch)),
            ("performance_goals", ())]
  parts = [Part(c + "_bfloat16" * (bf16 in o), "table", "experiments.efficiency",
                f"configs/efficiency/{c}.py{tiny}", (f"--config.out_dir={out / 'tables'}", *o))
           for c, o in tables]
  parts.append(Part("relative_timm", "relative", "experiments.relative_timm",
                    f"configs/efficiency/relative_timm.py{tiny}",
                    (f"--config.out_dir={out / 'relative'}",)))
  for name, (config, batch) in RUNS.items():  # run_part gives each its workdir under runs/
    overrides = [] if smoke else [
        f"--config.batch_size={batch}", f"--config.num_train_steps={RUN_STEPS}",
        "--config.log_every_steps=50", f"--config.eval_every_steps={RUN_STEPS}",
        f"--config.checkpoint_every_steps={RUN_STEPS}"]
    if name == "gan" and not smoke:  # FID features from the default experiment's classifier
      overrides.append(f"--config.eval.classifier_workdir={out / 'runs' / 'default'}")
    parts.append(Part(name, "run", "attention_lab.main", f"{config}{tiny}", tuple(overrides)))
  return parts


def device_slug(platform_name: str, device_kind: str) -> str:
  """A folder name for a device kind: 'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3'."""
  return re.sub(r"[^a-z0-9]+", "_", device_kind.lower()).strip("_") or platform_name


def environment() -> dict:
  """The device, its driver and the library versions the numbers depend on (JAX's own
  environment report: versions, devices, and nvidia-smi's driver and CUDA on a GPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  d = jax.devices()[0]
  env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "platform": d.platform, "device_kind": d.device_kind,
         "device_count": jax.device_count(), "process_count": jax.process_count(),
         "compute_capability": getattr(d, "compute_capability", None),
         "host": measure.machine_line(), "jax_environment": jax.print_environment_info(True)}
  for package in ("jax", "jaxlib", "jax-cuda12-plugin", "libtpu", "flax", "torch"):
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
      env[package.replace("-", "_")] = importlib.metadata.version(package)
  with contextlib.suppress(Exception):  # no CUDA plugin, no GPU
    from jax._src.lib import cuda_versions  # pylint: disable=g-import-not-at-top
    env["cudnn"] = cuda_versions.cudnn_get_version()
  return env


def run_part(part: Part, out: pathlib.Path) -> dict:
  """Runs one part (its output to logs/<name>.log); a run trains in a fresh runs/<name>/, its
  speed from its final JSON."""
  log, workdir = out / "logs" / f"{part.name}.log", out / "runs" / part.name
  if part.kind == "run":
    run = runs.train(part.config, part.overrides, workdir=workdir, log=log)
  else:
    run = runs.run_module(part.module, [f"--config={part.config}", *part.overrides], log=log)
  print(f"[{part.name}] {'ok' if not run.returncode else f'FAILED (exit {run.returncode})'} "
        f"in {run.wall_s:.1f} s", flush=True)
  status = {"name": part.name, "kind": part.kind, "command": run.command,
            "returncode": run.returncode, "seconds": run.wall_s,
            "log": str(log.relative_to(out)), "error": run.error, "final": run.final}
  if part.kind == "run":
    saved = workdir / "config.json"  # the run's own record of its config
    config = json.loads(saved.read_text()) if saved.exists() else {}
    status["speed"] = {"batch": config.get("batch_size"), "steps": config.get(
        "num_train_steps"), **{k: run.final.get(f"perf/{k}") for k in PERF}}
  return status


def summary_markdown(env: dict, statuses: list[dict], out: pathlib.Path, smoke: bool) -> str:
  f = lambda v, spec=".3g": "—" if v is None else format(v, spec)  # pylint: disable=C3001
  versions = ", ".join(f"{k} {env[k]}" for k in ("jax", "jaxlib", "jax_cuda12_plugin", "libtpu",
                                                 "cudnn", "flax", "torch") if env.get(k))
  lines = [
      f"# Accelerator report: {env['device_kind']}", "",
      ("Smoke run (every part at its `:tiny` preset; the numbers mean nothing)" if smoke
       else "Measured") + f" on {env['date']}: {env['device_count']} × {env['device_kind']} "
      f"({env['platform']}, compute capability {env['compute_capability'] or '—'}), "
      f"{env['process_count']} process(es); host {env['host']}. Libraries: {versions}. Command: "
      f"`python -m experiments.accelerator_report{' --smoke' if smoke else ''}`.", "",
      "```", env["jax_environment"].strip(), "```", "", "## Parts", "",
      "| part | status | seconds | results |", "|---|---|---|---|"]
  for s in statuses:
    files = {"table": [out / "tables" / f"{s['name']}.{e}" for e in ("md", "json")],
             "relative": [out / "relative" / "relative_timm.md"],
             "run": [out / "runs" / s["name"]]}[s["kind"]]
    links = [f"[{p.name}]({p.relative_to(out)})" for p in files if p.exists()]
    links.append(f"[log]({s['log']})")
    state = "ok" if not s["returncode"] else f"**failed** (exit {s['returncode']}): `{s['error']}`"
    lines.append(f"| {s['name']} | {state} | {s['seconds']:.1f} | "
                 f"{', '.join(links)} |")
  lines += ["", "## Default experiments at accelerator size", "",
            "Medians over the run's log steps of its `perf/` scalars (compilation excluded); "
            "MFU where the device's peak is known (none on a CPU).", "",
            "| experiment | global batch | steps | examples/s | examples/s per device | step ms | "
            "TFLOP/s per device | MFU |", "|---|---|---|---|---|---|---|---|"]
  for s in (s for s in statuses if "speed" in s):
    r = s["speed"]
    lines.append(f"| {s['name']} | {r['batch'] or '—'} | {r['steps'] or '—'} | "
                 f"{f(r['examples_per_second'], '.1f')} | "
                 f"{f(r['examples_per_second_per_device'], '.1f')} | "
                 f"{f(r['step_seconds'] and 1e3 * r['step_seconds'], '.2f')} | "
                 f"{f(r['tflops_per_device'])} | {f(r['mfu'] and 100 * r['mfu'], '.1f')} |")
  fused = [f"[{p.stem}](tables/{p.stem}.md)" for p in sorted((out / "tables").glob("*.json"))
           if json.loads(p.read_text() or "{}").get("fused")]
  lines += ["", "Fused regular attention (cuDNN on a GPU, Pallas on a TPU), timed beside XLA's "
            "regular attention, with the speed-ups against the faster of the two: " + (
                ", ".join(fused) if fused else "None on this device; the tables compare "
                "against XLA's regular attention only.")]
  return "\n".join(lines) + "\n"


def report(env: dict, out: pathlib.Path, parts: list[Part], smoke: bool) -> list[dict]:
  """Runs the parts one after the other; rewrites report.json and README.md after each."""
  out.mkdir(parents=True, exist_ok=True)
  (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
  statuses, start = [], time.perf_counter()
  for part in parts:
    statuses.append(run_part(part, out))
    (out / "report.json").write_text(json.dumps(
        {"environment": env, "smoke": smoke, "parts": statuses, "seconds": time.perf_counter()
         - start, "runs": {s["name"]: s["speed"] for s in statuses if "speed" in s}},
        indent=1, default=str))
    (out / "README.md").write_text(summary_markdown(env, statuses, out, smoke))
  failed = [s["name"] for s in statuses if s["returncode"]]
  print(f"accelerator_report: {len(statuses) - len(failed)}/{len(statuses)} parts ok in "
        f"{time.perf_counter() - start:.0f} s; summary {out / 'README.md'}"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
  return statuses


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; flags are --out, --smoke and --parts")
  import jax  # pylint: disable=g-import-not-at-top
  if jax.default_backend() == "cpu" and not _SMOKE.value:
    cli.fail("no GPU or TPU here (jax backend 'cpu'); --smoke checks the command at tiny "
             "size on the CPU")
  env = environment()
  out = pathlib.Path(_OUT.value or measure.RESULTS / device_slug(env["platform"],
                                                                 env["device_kind"])).resolve()
  parts = plan(out, _SMOKE.value)
  if unknown := set(_PARTS.value) - {p.name for p in parts}:
    cli.fail(f"--parts has unknown names {sorted(unknown)}; expected some of "
             f"{[p.name for p in parts]}")
  parts = [p for p in parts if p.name in _PARTS.value or not _PARTS.value]
  sys.exit(1 if any(s["returncode"] for s in report(env, out, parts, _SMOKE.value)) else 0)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
