"""One command for an accelerator: the efficiency tables in device time, whole networks beside
PyTorch, a speed run of each default experiment and, with --tests, the operator tests, on the
GPU or TPU present, within a time budget. Runs from the source tree without TensorFlow:

  PYTHONPATH=. python -m experiments.accelerator_report [--budget_s=420] [--tests]
      [--resume] [--networks_budget_s=S] [--archive=PATH.tar.gz] [--out=DIR] [--smoke]
      [--parts=NAME,...]
  PYTHONPATH=. python -m experiments.accelerator_report --check   # preflight, < 60 s

Parts, most valuable first (`plan`): 1. SAO Table 2 and KAO Table 1 in float32 and bfloat16
(device time, the calibration rows, the cuDNN flash row in 16 bits); 2. the default
experiment's speed run and the whole networks (ResNet-50 and timm's first, then AA-ResNet-50,
then the others, within what is left of the budget: experiments/networks.py); 3. with
--tests, `pytest tests/ops` on the device (over up to 8 processes where pytest-xdist is
installed); 4. the rest (Ham Table 3, SAO Table 5, relative attention against timm, ISA, AA
Table 9, the performance goals, the other four experiments). The speed runs train on
device-resident random batches (`--config.dataset.synthetic=True`): the step alone.

Budget: a part whose estimate (`EXPECTED_S`, scaled by how the finished parts compared with
theirs) does not fit in the time left is listed as not run with that estimate; a running part
is stopped at the budget's end; the networks part is given what is left and stops in time
itself. Each part is its own process (experiments/runs.py; a failure stops only its part) and
the summary is rewritten as each finishes: under experiments/results/<device kind>/ (or --out)
README.md (device, versions, each part's status and links, calibration, networks, the runs'
speed), environment.json, report.json, tables/, relative/, runs/, logs/. A report starts
afresh (removing those files of an earlier one) unless --resume: then the parts already done
are kept and the others run, the networks part measuring only the networks it lacks; so one
report can span two commands. --archive packs the folder into one .tar.gz. --smoke: every
part at its `:tiny` preset, on any device.
"""

import collections
import contextlib
import datetime
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import sys
import tarfile
import time

from absl import app, flags

from attention_lab import cli, devices
from experiments import measure, runs

_OUT = cli.define_once(flags.DEFINE_string, "out", "",
                       "Output folder; default experiments/results/<device kind>.")
_SMOKE = flags.DEFINE_bool("smoke", False, "Every part at its :tiny preset (any device).")
_PARTS = flags.DEFINE_list("parts", [], "Only these parts (names as in the summary).")
_BUDGET = flags.DEFINE_float("budget_s", 420.0, "Seconds for the whole report; parts that "
                             "would not fit are listed as not run.")
_ARCHIVE = flags.DEFINE_string("archive", "", "Also pack the output folder into this .tar.gz.")
_TESTS = flags.DEFINE_bool("tests", False, "Also run `pytest tests/ops` on the device (after "
                           "the networks).")
_NETWORKS_S = flags.DEFINE_float("networks_budget_s", 0.0, "At most these seconds for the "
                                 "networks part (0: all that is left of the budget).")
_RESUME = flags.DEFINE_bool("resume", False, "Keep the parts an earlier report in --out "
                            "finished; run the others (and the networks it lacks).")
_CHECK = flags.DEFINE_bool("check", False, "Preflight only: versions, device, MFU peak, a tiny "
                           "jit, a cuDNN attention call, and which parts can run.")

RUN_STEPS = 300
# Default experiments at accelerator size: (config, global batch). The CPU configs' batches
# (8-64) leave an accelerator idle; these fill one device and stay valid on 8.
RUNS = {"default": ("configs/default.py", 1024),
        "segmentation": ("configs/segmentation/default.py", 64),
        "restoration": ("configs/restoration/default.py", 64),
        "gan": ("configs/gan/default.py", 256),
        "detection": ("configs/detection/default.py", 128)}
SYNTHETIC = "--config.dataset.synthetic=True"  # device-resident random batches: the step alone
PERF = ("examples_per_second", "examples_per_second_per_device", "step_seconds",
        "tflops_per_device", "mfu")
# Expected seconds of each part, process start included: (on a GPU / TPU, with --smoke). The
# smoke column is measured on a shared 2-core CPU. The accelerator column: one H100's
# (experiments/results/nvidia_h100_80gb_hbm3/report.json: default 8 s; the operator tables
# 39-50 s with wall timing's 50 ms samples, which device time no longer takes, plus ~5 s of
# calibration); the networks part: its first two entries (ResNet-50 and timm's, compiles
# included: configs/efficiency/networks.py), the rest fill what is left; tests: 617 XLA
# compiles over 8 processes (3,355 eager ones in one process ran past 357 s); the others
# estimates.
EXPECTED_S = {
    "sao_table2": (40, 12), "sao_table2_bfloat16": (40, 12), "kao_table1": (35, 14),
    "kao_table1_bfloat16": (35, 14), "default": (20, 20), "networks": (180, 60),
    "tests": (120, 60), "ham_table3": (90, 19), "sao_table5": (90, 45),
    "sao_table5_bfloat16": (80, 45), "relative_timm": (60, 11), "isa_tables": (60, 40),
    "aa_table9": (30, 13), "performance_goals": (45, 29), "segmentation": (60, 45),
    "restoration": (60, 40), "gan": (90, 60), "detection": (90, 55)}
# Parts given what is left of the budget (`--config.budget_s`), less this margin for their
# process start and calibration.
BUDGETED = {"networks": 30.0}
# Environment of a part: torch shares the GPU with JAX in the relative and networks parts, and
# the test processes share it in the tests part, so JAX allocates as it goes; the tests run on
# the device (tests/conftest.py picks the CPU unless JAX_PLATFORMS is set).
PART_ENV = {"relative_timm": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            "networks": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            "tests": {"JAX_PLATFORMS": "", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
# What a fresh report removes of an earlier one in its folder.
OUTPUTS = ("README.md", "report.json", "environment.json", "tables", "relative", "runs", "logs")
TEST_WORKERS = 8  # pytest processes sharing the device in the tests part
RESERVE_S = 5.0  # kept at the budget's end for the summary and the archive
SCALE_LIMITS = (0.5, 4.0)  # how far measured / expected may rescale the estimates
ARCHIVE_MAX_FILE_BYTES = 16 * 2**20  # larger files (checkpoints) are listed, not packed
# Minor versions this report ran with; another version is one line in the report.
TESTED_WITH = {"python": ("3.11", "3.12"), "jax": ("0.10", "0.11"), "flax": ("0.12",)}
PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt",
            "jax-cuda13-pjrt", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "libtpu", "flax",
            "optax", "orbax-checkpoint", "numpy", "ml-collections", "clu", "torch", "timm")
# Modules a part imports beyond its command's module and, for a run, its task's module
# (probed by --check).
NEEDS = {"nets": ("attention_lab.train.tasks.base",), "detection": ("pycocotools",),
         "tests": ("pytest",)}

Part = collections.namedtuple("Part", "name kind module config overrides tier")


def plan(out: pathlib.Path, smoke: bool, tests: bool = False, resume: bool = False
         ) -> list[Part]:
  """Every part, most valuable first (the goals table reads SAO / KAO's json, the GAN's FID
  the default run's classifier); a table's part is named as its files: <table>[_bfloat16]."""
  tiny, bf16 = (":tiny" if smoke else ""), "--config.dtype=bfloat16"
  paper_batch = () if smoke else ("--config.time_batch=128",)  # SAO T5: 128 images of 224²

  def table(name, tier, *overrides):
    return Part(name + "_bfloat16" * (bf16 in overrides), "table", "experiments.efficiency",
                f"configs/efficiency/{name}.py{tiny}",
                (f"--config.out_dir={out / 'tables'}", *overrides), tier)

  def run(name, tier):  # run_part gives each its workdir under runs/
    config, batch = RUNS[name]
    overrides = [SYNTHETIC] + ([] if smoke else [
        f"--config.batch_size={batch}", f"--config.num_train_steps={RUN_STEPS}",
        "--config.log_every_steps=50", f"--config.eval_every_steps={RUN_STEPS}",
        f"--config.checkpoint_every_steps={RUN_STEPS}"])
    if name == "gan" and not smoke:  # FID features from the default experiment's classifier
      overrides.append(f"--config.eval.classifier_workdir={out / 'runs' / 'default'}")
    return Part(name, "run", "attention_lab.main", f"{config}{tiny}", tuple(overrides), tier)

  return [
      table("sao_table2", 1), table("sao_table2", 1, bf16), table("kao_table1", 1),
      table("kao_table1", 1, bf16),
      run("default", 2), table("networks", 2, f"--config.resume={resume}"),
      *([Part("tests", "tests", "pytest", "", test_arguments(), 3)] if tests else []),
      table("ham_table3", 4),
      table("sao_table5", 4, *paper_batch), table("sao_table5", 4, bf16, *paper_batch),
      Part("relative_timm", "relative", "experiments.relative_timm",
           f"configs/efficiency/relative_timm.py{tiny}", (f"--config.out_dir={out / 'relative'}",),
           4),
      table("isa_tables", 4), table("aa_table9", 4), table("performance_goals", 4),
      *(run(name, 4) for name in ("segmentation", "restoration", "gan", "detection"))]


def test_arguments(workers: int = TEST_WORKERS) -> tuple[str, ...]:
  """pytest's arguments for the operator tests: over `workers` processes where pytest-xdist is
  installed, since their time is XLA compiles, which run on the host's CPU cores."""
  workers = min(workers, os.cpu_count() or 1)
  spread = workers > 1 and importlib.util.find_spec("xdist") is not None
  return ("tests/ops", "-p", "no:cacheprovider", *(("-n", str(workers)) if spread else ()))


class Budget:
  """The time left of `seconds` from `start`, and each part's estimate: its `EXPECTED_S`
  entry times the ratio measured / expected of the parts that succeeded so far."""

  def __init__(self, seconds: float, smoke: bool, start: float | None = None):
    self.seconds, self.column = seconds, int(smoke)
    self.start = time.perf_counter() if start is None else start
    self.measured, self.expected = 0.0, 0.0

  def left(self) -> float:
    return self.seconds - (time.perf_counter() - self.start)

  def scale(self) -> float:
    if not self.expected:
      return 1.0
    return min(max(self.measured / self.expected, SCALE_LIMITS[0]), SCALE_LIMITS[1])

  def estimate(self, name: str) -> float:
    return EXPECTED_S[name][self.column] * self.scale()

  def fits(self, name: str) -> bool:
    return self.estimate(name) <= self.left() - RESERVE_S

  def done(self, name: str, seconds: float) -> None:
    self.measured += seconds
    self.expected += EXPECTED_S[name][self.column]


class OverBudget(Exception):
  """The budget's end came while a part ran (its process is killed by subprocess.run)."""


@contextlib.contextmanager
def deadline(seconds: float):
  """Raises OverBudget in the main thread after `seconds` (SIGALRM)."""
  def expire(*_):
    raise OverBudget()

  if seconds == float("inf"):
    yield
    return
  previous = signal.signal(signal.SIGALRM, expire)
  signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def device_slug(platform_name: str, device_kind: str) -> str:
  """A folder name for a device kind: 'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3'."""
  return re.sub(r"[^a-z0-9]+", "_", device_kind.lower()).strip("_") or platform_name


def versions() -> dict:
  """Python's and the installed PACKAGES' versions (absent packages left out)."""
  found = {"python": platform.python_version()}
  for package in PACKAGES:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
      found[package.replace("-", "_")] = importlib.metadata.version(package)
  return found


def untested(found: dict) -> list[str]:
  """One line per version this report was not tested with."""
  return [f"{name} {found[name]}: not tested with this report (tested with {name} "
          f"{' / '.join(v + '.x' for v in minors)})" for name, minors in TESTED_WITH.items()
          if name in found and ".".join(found[name].split(".")[:2]) not in minors]


def peak_entry(device_kind: str) -> str:
  """The attention_lab/devices.py entry MFU divides by, in words."""
  entry = devices.lookup(device_kind)
  if entry is None:
    return f"none for {device_kind!r} (attention_lab/devices.py): no MFU"
  peaks = ", ".join(f"{dtype} {flops / 1e12:g} TFLOP/s" for dtype, flops in
                    entry.peak_flops.items())
  return f"'{entry.name}' of attention_lab/devices.py: {peaks}"


def environment() -> dict:
  """The device, its driver and the library versions the numbers depend on (JAX's own
  environment report: versions, devices, and nvidia-smi's driver and CUDA on a GPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  d = jax.devices()[0]
  found = versions()
  return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "platform": d.platform, "device_kind": d.device_kind,
          "device_count": jax.device_count(), "process_count": jax.process_count(),
          "compute_capability": getattr(d, "compute_capability", None),
          "peak_flops": peak_entry(d.device_kind), "host": measure.machine_line(),
          "commit": measure.commit(),
          "versions": found, "untested": untested(found),
          "jax_environment": jax.print_environment_info(True)}


def run_part(part: Part, out: pathlib.Path, seconds_left: float, cap_s: float = 0.0) -> dict:
  """Runs one part (its output to logs/<name>.log), stopped after `seconds_left`; a run trains
  in a fresh runs/<name>/, its speed from its final JSON; a BUDGETED part is given the time
  left (at most `cap_s`, if set)."""
  log, workdir = out / "logs" / f"{part.name}.log", out / "runs" / part.name
  status = {"name": part.name, "kind": part.kind, "tier": part.tier,
            "log": str(log.relative_to(out))}
  overrides = list(part.overrides)
  if part.name in BUDGETED:
    seconds_left = min(seconds_left, cap_s or seconds_left)
    overrides.append(f"--config.budget_s={max(seconds_left - BUDGETED[part.name], 1.0):.0f}")
  start, env = time.perf_counter(), PART_ENV.get(part.name, {})
  try:
    with deadline(seconds_left):
      if part.kind == "run":
        run = runs.train(part.config, overrides, workdir=workdir, log=log, env=env)
      elif part.kind == "tests":
        run = runs.run_module(part.module, overrides, log=log, env=env)
      else:
        run = runs.run_module(part.module, [f"--config={part.config}", *overrides], log=log,
                              env=env)
  except OverBudget:
    status.update(state="stopped", seconds=time.perf_counter() - start, returncode=None,
                  error=f"stopped at the budget's end after {time.perf_counter() - start:.0f} s")
    print(f"[{part.name}] {status['error']}", flush=True)
    return status
  status.update(state="failed" if run.returncode else "ok", command=run.command,
                returncode=run.returncode, seconds=run.wall_s, error=run.error,
                final=run.final)
  print(f"[{part.name}] {'ok' if not run.returncode else f'FAILED (exit {run.returncode})'} "
        f"in {run.wall_s:.1f} s", flush=True)
  if part.kind == "tests":  # pytest's last line: "N passed, M failed in S s"
    status["summary"] = next((l.strip("= ") for l in reversed(run.output.splitlines())
                              if l.strip()), "")
  saved = out / "tables" / f"{part.name}.json"
  if part.kind == "table" and saved.exists():  # a budgeted part left some entries out
    not_run = json.loads(saved.read_text()).get("not_run") or []
    if not_run:
      status.update(incomplete=True, summary=f"{len(not_run)} not run within the budget: "
                    + ", ".join(n["label"] for n in not_run))
  if part.kind == "run":
    saved = workdir / "config.json"  # the run's own record of its config
    config = json.loads(saved.read_text()) if saved.exists() else {}
    status["speed"] = {"batch": config.get("batch_size"), "steps": config.get(
        "num_train_steps"), **{k: run.final.get(f"perf/{k}") for k in PERF}}
  return status


def not_run(part: Part, estimate: float, left: float) -> dict:
  return {"name": part.name, "kind": part.kind, "tier": part.tier, "state": "not run",
          "estimate_s": estimate, "returncode": None, "seconds": 0.0,
          "error": f"estimated {estimate:.0f} s, {max(left, 0):.0f} s of the budget left"}


def _results_links(s: dict, out: pathlib.Path) -> str:
  files = {"table": [out / "tables" / f"{s['name']}.{e}" for e in ("md", "json")],
           "relative": [out / "relative" / "relative_timm.md"],
           "run": [out / "runs" / s["name"]], "tests": []}[s["kind"]]
  links = [f"[{p.name}]({p.relative_to(out)})" for p in files if p.exists()]
  if (out / s.get("log", "-")).exists():
    links.append(f"[log]({s['log']})")
  return ", ".join(links) or "—"


def _parts_lines(statuses: list[dict], out: pathlib.Path, budget_s: float) -> list[str]:
  lines = ["## Parts", "",
           f"In order of value (priority 1 first) within a budget of {budget_s:g} s; a part whose "
           "estimate did not fit in the time left is not run.", "",
           "| part | priority | status | seconds | results |", "|---|---|---|---|---|"]
  for s in statuses:
    state = {"ok": "ok", "not run": "not run", "stopped": "**stopped**"}.get(
        s["state"], f"**failed** (exit {s['returncode']})")
    state += " (earlier command)" if s.get("earlier") else ""
    detail = (s.get("summary") or (s["error"] if s["state"] != "ok" else "")).replace("|", "\\|")
    lines.append(f"| {s['name']} | {s['tier']} | {state}{f': `{detail}`' if detail else ''} | "
                 f"{s['seconds']:.1f} | {_results_links(s, out)} |")
  return lines


def _section(md: pathlib.Path, title: str) -> list[str]:
  """The lines of `md`'s section `## title` (to the next `## `), headed one level lower and
  its links made relative to the report's folder; [] where there is none."""
  lines = md.read_text().splitlines() if md.exists() else []
  if f"## {title}" not in lines:
    return []
  body = lines[lines.index(f"## {title}") + 1:]
  body = body[:next((i for i, l in enumerate(body) if l.startswith("## ")), len(body))]
  return ["", f"### {title} ([{md.stem}](tables/{md.name}))", *body]


def _runs_lines(statuses: list[dict]) -> list[str]:
  f = lambda v, spec=".3g": "—" if v is None else format(v, spec)  # pylint: disable=C3001
  lines = ["", "## Default experiments at accelerator size", "",
           "Train step alone (`--config.dataset.synthetic=True`: device-resident random "
           "batches). Medians over the run's log steps of its `perf/` scalars (compilation "
           "excluded); MFU where the device's peak is known (none on a CPU).", "",
           "| experiment | global batch | steps | examples/s | examples/s per device | step ms | "
           "TFLOP/s per device | MFU % |", "|---|---|---|---|---|---|---|---|"]
  for s in (s for s in statuses if "speed" in s):
    r = s["speed"]
    lines.append(f"| {s['name']} | {r['batch'] or '—'} | {r['steps'] or '—'} | "
                 f"{f(r['examples_per_second'], '.1f')} | "
                 f"{f(r['examples_per_second_per_device'], '.1f')} | "
                 f"{f(r['step_seconds'] and 1e3 * r['step_seconds'], '.2f')} | "
                 f"{f(r['tflops_per_device'])} | {f(r['mfu'] and 100 * r['mfu'], '.1f')} |")
  return lines


def summary_markdown(env: dict, statuses: list[dict], out: pathlib.Path, smoke: bool,
                     budget_s: float) -> str:
  libraries = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
  lines = [
      f"# Accelerator report: {env['device_kind']}", "",
      ("Smoke run (every part at its `:tiny` preset; the numbers mean nothing)" if smoke
       else "Measured") + f" on {env['date']}: {env['device_count']} × {env['device_kind']} "
      f"({env['platform']}, compute capability {env['compute_capability'] or '—'}), "
      f"{env['process_count']} process(es); host {env['host']}. Libraries: {libraries}. "
      f"MFU's peak: {env['peak_flops']}. Command: `PYTHONPATH=. python -m "
      f"experiments.accelerator_report {env.get('arguments', '')}`.",
      "", *(f"- {line}" for line in env["untested"]), *([""] if env["untested"] else []),
      "```", env["jax_environment"].strip(), "```", "", *_parts_lines(statuses, out, budget_s),
      "", "## Measured here", *_section(out / "tables" / "sao_table2.md",
                                        "Timing and calibration"),
      *_section(out / "tables" / "networks.md", "Goals"), *_runs_lines(statuses)]
  fused = [f"[{p.stem}](tables/{p.stem}.md)" for p in sorted((out / "tables").glob("*.json"))
           if json.loads(p.read_text() or "{}").get("fused")]
  lines += ["", "Fused regular attention (cuDNN on a GPU, Pallas on a TPU), timed beside XLA's "
            "regular attention, with the speed-ups against the faster of the two: " + (
                ", ".join(fused) if fused else "None on this device; the tables compare "
                "against XLA's regular attention only.")]
  return "\n".join(lines) + "\n"


def write_summary(env, statuses, out, smoke, budget_s, start) -> None:
  (out / "report.json").write_text(json.dumps(
      {"environment": env, "smoke": smoke, "budget_s": budget_s, "parts": statuses,
       "seconds": time.perf_counter() - start,
       "runs": {s["name"]: s["speed"] for s in statuses if "speed" in s}},
      indent=1, default=str))
  (out / "README.md").write_text(summary_markdown(env, statuses, out, smoke, budget_s))


def earlier_parts(out: pathlib.Path, resume: bool) -> dict:
  """{name: status} of the parts an earlier report in `out` finished (ok and complete), where
  `resume`; else the earlier report's files are removed (a report folder only: one with a
  report.json) and nothing is kept."""
  saved = out / "report.json"
  if not saved.exists():
    return {}
  if resume:
    return {s["name"]: {**s, "earlier": True} for s in json.loads(saved.read_text())["parts"]
            if s["state"] == "ok" and not s.get("incomplete")}
  for name in OUTPUTS:
    path = out / name
    if path.is_dir():
      shutil.rmtree(path)
    elif path.exists():
      path.unlink()
  return {}


def report(env: dict, out: pathlib.Path, parts: list[Part], smoke: bool,
           budget: Budget | None = None, resume: bool = False,
           networks_budget_s: float = 0.0) -> list[dict]:
  """Runs the parts in order while they fit in `budget` (default: unlimited), after the ones
  an earlier report finished where `resume`; rewrites report.json and README.md after each.
  `networks_budget_s`: at most that for the networks part (0: what is left)."""
  budget = budget or Budget(float("inf"), smoke)
  done = earlier_parts(out, resume)
  out.mkdir(parents=True, exist_ok=True)
  (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
  statuses = []
  write_summary(env, statuses, out, smoke, budget.seconds, budget.start)
  for part in parts:
    if part.name in done:
      statuses.append(done[part.name])
      print(f"[{part.name}] done by an earlier command", flush=True)
    elif not budget.fits(part.name):
      statuses.append(not_run(part, budget.estimate(part.name), budget.left()))
      print(f"[{part.name}] not run: {statuses[-1]['error']}", flush=True)
    else:
      estimate = budget.estimate(part.name)
      statuses.append({**run_part(part, out, budget.left() - RESERVE_S, networks_budget_s),
                       "estimate_s": estimate})
      # A failure's time says nothing of the others', nor a part given all that was left.
      if statuses[-1]["state"] == "ok" and part.name not in BUDGETED:
        budget.done(part.name, statuses[-1]["seconds"])
    write_summary(env, statuses, out, smoke, budget.seconds, budget.start)
  counts = collections.Counter(s["state"] for s in statuses)
  print(f"accelerator_report: {counts['ok']}/{len(statuses)} parts ok in "
        f"{time.perf_counter() - budget.start:.0f} s; summary {out / 'README.md'}" + "".join(
            f"; {state}: {', '.join(s['name'] for s in statuses if s['state'] == state)}"
            for state in ("failed", "stopped", "not run") if counts[state]), flush=True)
  return statuses


def archive(out: pathlib.Path, path: pathlib.Path) -> list[str]:
  """Packs `out` into the .tar.gz `path` (as out's folder name); files over
  ARCHIVE_MAX_FILE_BYTES (checkpoints) are left out and named in its LEFT_OUT.txt. Returns
  those left out."""
  left_out = []
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, "w:gz") as tar:
    for file in sorted(p for p in out.rglob("*") if p.is_file()):
      if file.resolve() == path.resolve():
        continue
      if file.stat().st_size > ARCHIVE_MAX_FILE_BYTES:
        left_out.append(str(file.relative_to(out)))
        continue
      tar.add(file, arcname=str(pathlib.Path(out.name) / file.relative_to(out)))
    if left_out:
      text = "".join(f"{name}\n" for name in left_out).encode()
      info = tarfile.TarInfo(str(pathlib.Path(out.name) / "LEFT_OUT.txt"))
      info.size, info.mtime = len(text), int(time.time())
      tar.addfile(info, io.BytesIO(text))
  print(f"archive {path}: {path.stat().st_size / 2**20:.1f} MiB" + (
      f"; left out (over {ARCHIVE_MAX_FILE_BYTES / 2**20:g} MiB): {', '.join(left_out)}"
      if left_out else ""), flush=True)
  return left_out


def _why_not(*steps) -> str | None:
  """Why a step fails, in one line, or None: a step is a module name (imported) or a
  function (called)."""
  for step in steps:
    try:
      importlib.import_module(step) if isinstance(step, str) else step()
    except Exception as e:  # pylint: disable=broad-except  # any failure is the answer
      return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
  return None


def can_run(part: Part) -> str:
  """'ok...', or why `part` cannot run here (its config, the modules it imports), in one line."""
  if part.kind == "tests":
    return _why_not(*NEEDS["tests"]) or "ok"
  config = None

  def load():
    nonlocal config
    config = cli.load_config(part.config, root=str(runs.REPO))

  if why := _why_not(load):  # ml_collections missing, a bad file
    return f"config {part.config}: {why}"
  if part.kind == "run":
    steps = (f"attention_lab.train.tasks.{config.get('task', 'classification')}",
             *NEEDS.get(part.name, ()))
  elif part.kind == "table":  # the table's module (efficiency.table imports it)
    steps = (part.module, lambda: importlib.import_module(part.module).table(config.kind),
             *NEEDS.get(config.kind, ()))
  else:
    steps = (part.module,)
  why = _why_not(*steps)
  if why or part.name not in ("relative_timm", "networks"):
    return why or "ok"
  if timm := _why_not("torch", "timm"):
    return f"ok, without PyTorch ({timm})"
  import torch  # pylint: disable=g-import-not-at-top
  where = "cuda" if torch.cuda.is_available() else "cpu"
  return f"ok, timm {importlib.metadata.version('timm')} with torch {torch.__version__} ({where})"


def check(smoke: bool, tests: bool) -> int:
  """The preflight: prints versions, device, MFU's peak, a tiny jit, a cuDNN attention call and
  which parts can run. Exit status 1 if the tiny jit fails."""
  start = time.perf_counter()
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  found = versions()
  print("versions: " + ", ".join(f"{k} {v}" for k, v in found.items()))
  for line in untested(found):
    print(f"  {line}")
  d = jax.devices()[0]
  print(f"device: {jax.device_count()} × {d.device_kind} ({d.platform}"
        + (f", compute capability {d.compute_capability}" if hasattr(d, "compute_capability")
           else "") + ")")
  print(f"peak FLOP/s for MFU: {peak_entry(d.device_kind)}")
  status = 0
  try:
    t = time.perf_counter()
    x = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 65536
    y = jax.jit(lambda a: jnp.tanh(a @ a.T).sum())(x)
    expected = float(jnp.tanh(jnp.asarray(x, jnp.float32) @ x.T).sum())
    print(f"tiny jit: ok in {time.perf_counter() - t:.2f} s (sum {float(y):.4f}, "
          f"eager {expected:.4f})")
  except Exception as e:  # pylint: disable=broad-except
    status = 1
    print(f"tiny jit: FAILED: {type(e).__name__}: {e}")
  timing = measure.timing()  # probes CUPTI and the profiler trace on an accelerator
  print(f"device time: {timing['method']}" + (f" ({timing['why']})" if timing["why"] else ""))
  try:
    t = time.perf_counter()
    q = jax.random.normal(jax.random.key(0), (2, 128, 4, 64), jnp.bfloat16)
    fused = jax.nn.dot_product_attention(q, q, q, implementation="cudnn")
    xla = jax.nn.dot_product_attention(q, q, q, implementation="xla")
    diff = float(jnp.max(jnp.abs(fused.astype(jnp.float32) - xla.astype(jnp.float32))))
    print(f"cuDNN attention: ok in {time.perf_counter() - t:.2f} s, max |cuDNN - XLA| = "
          f"{diff:.2g} (bfloat16, 2×128 tokens, 4 heads × 64)")
  except Exception as e:  # pylint: disable=broad-except
    print(f"cuDNN attention: not available on {d.platform} ({type(e).__name__}: "
          f"{(str(e).splitlines() or [''])[0]})")
  parts = plan(pathlib.Path("report"), smoke, tests)
  print(f"parts ({'--smoke' if smoke else 'accelerator size'}, most valuable first):")
  able = 0
  for part in parts:
    why = can_run(part)
    able += why.startswith("ok")
    print(f"  {part.tier} {part.name}: {why}")
  print(f"check: {able} of {len(parts)} parts can run; {time.perf_counter() - start:.1f} s")
  return status


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; flags are --budget_s, --networks_budget_s, "
             "--archive, --tests, --resume, --check, --out, --smoke and --parts")
  start = time.perf_counter()
  if _CHECK.value:
    sys.exit(check(_SMOKE.value, _TESTS.value))
  if _ARCHIVE.value and not _ARCHIVE.value.endswith((".tar.gz", ".tgz")):
    cli.fail(f"--archive={_ARCHIVE.value!r}: expected a path ending in .tar.gz")
  import jax  # pylint: disable=g-import-not-at-top
  if jax.default_backend() == "cpu" and not _SMOKE.value:
    cli.fail("no GPU or TPU here (jax backend 'cpu'); --smoke checks the command at tiny "
             "size on the CPU")
  env = {**environment(), "arguments": " ".join(sys.argv[1:])}
  for line in env["untested"]:
    print(line, flush=True)
  out = pathlib.Path(_OUT.value or measure.RESULTS / device_slug(env["platform"],
                                                                 env["device_kind"])).resolve()
  parts = plan(out, _SMOKE.value, _TESTS.value, _RESUME.value)
  if unknown := set(_PARTS.value) - {p.name for p in parts}:
    cli.fail(f"--parts has unknown names {sorted(unknown)}; expected some of "
             f"{[p.name for p in parts]}")
  parts = [p for p in parts if p.name in _PARTS.value or not _PARTS.value]
  statuses = report(env, out, parts, _SMOKE.value, Budget(_BUDGET.value, _SMOKE.value, start),
                    _RESUME.value, _NETWORKS_S.value)
  if _ARCHIVE.value:
    archive(out, pathlib.Path(_ARCHIVE.value).resolve())
  sys.exit(1 if any(s["state"] in ("failed", "stopped") for s in statuses) else 0)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
