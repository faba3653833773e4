"""One command for an accelerator: every efficiency table, the relative-attention comparison,
and a short run of each default experiment, on the GPU or TPU present.

  python -m experiments.accelerator_report [--out=DIR] [--smoke] [--parts=NAME,...]

Runs each part as its own process (experiments/runs.py; a failure stops only its part):
- the efficiency tables (`python -m experiments.efficiency`): SAO Table 2 and KAO Table 1 in
  float32 and bfloat16 (with the device's fused regular attention beside XLA's), Ham Table
  3, Refined-SA Tables 2-3, AA Table 9, SAO Table 5 at the paper's batch in float32 and
  bfloat16, and the performance goals;
- the relative-attention comparison (`python -m experiments.relative_timm`);
- each default experiment (`python -m attention_lab.main`) at accelerator size (a larger
  global batch, 300 steps), with its examples/s, TFLOP/s per device and MFU read from the
  run's `perf/` TensorBoard scalars (the `Final:` line's examples/s beside them).

Writes under experiments/results/<device kind>/ (or --out): README.md (device, driver and
library versions, every part's status and time, the runs' speed), environment.json,
report.json, tables/, relative/, runs/<experiment>/ (workdirs) and logs/<part>.log.
--smoke runs every part at its config's `:tiny` preset on any device (the CPU included);
without it a CPU is refused (exit 2).
"""

import dataclasses
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time

from absl import app, flags

from attention_lab import cli
from experiments import runs

RESULTS = runs.REPO / "experiments" / "results"

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
PERF_TAGS = ("perf/examples_per_second", "perf/examples_per_second_per_device",
             "perf/step_seconds", "perf/tflops_per_device", "perf/mfu")


@dataclasses.dataclass
class Part:
  """One process of the report: `python -m module --config=config *overrides`."""
  name: str
  kind: str  # "table" | "relative" | "run"
  module: str
  config: str
  overrides: tuple[str, ...] = ()
  what: str = ""


def plan(out: pathlib.Path, smoke: bool) -> list[Part]:
  """Every part, in order (the goals table reads SAO / KAO's json). A table's part is named
  as its files: <table>[_<dtype> unless float32]."""
  preset = ":tiny" if smoke else ""
  parts = []

  def table(name, config, what, *overrides):
    parts.append(Part(name, "table", "experiments.efficiency",
                      f"configs/efficiency/{config}.py{preset}",
                      (f"--config.out_dir={out / 'tables'}", *overrides), what))

  for config, what in (("sao_table2", "SAO Table 2: operators, batch 1"),
                       ("kao_table1", "KAO Table 1: operators, batch 8")):
    table(config, config, f"{what}, float32")
    table(f"{config}_bfloat16", config, f"{what}, bfloat16", "--config.dtype=bfloat16")
  table("ham_table3", "ham_table3", "Ham Table 3: SA, A², Ham (CD, NMF) modules")
  table("isa_tables", "isa_tables", "Refined-SA Tables 2-3: SAGAN, ISAGAN, SGAN")
  table("aa_table9", "aa_table9", "AA Table 9: attention-map memory of AA-ResNet-50")
  paper_batch = () if smoke else ("--config.time_batch=128",)  # 128 images of 224²
  for dtype in ("float32", "bfloat16"):
    table("sao_table5" + ("" if dtype == "float32" else "_bfloat16"), "sao_table5",
          f"SAO Table 5: whole-network train steps, {dtype}",
          *(() if dtype == "float32" else ("--config.dtype=bfloat16",)), *paper_batch)
  table("performance_goals", "performance_goals",
        "Performance goals, incl. Ham NMF against the official PyTorch NMF2D")
  parts.append(Part("relative_timm", "relative", "experiments.relative_timm",
                    f"configs/efficiency/relative_timm.py{preset}",
                    (f"--config.out_dir={out / 'relative'}",),
                    "2D relative attention beside timm's BottleneckAttn"))
  for name, (config, batch) in RUNS.items():
    overrides = [f"--workdir={out / 'runs' / name}"]
    if not smoke:
      overrides += [f"--config.batch_size={batch}", f"--config.num_train_steps={RUN_STEPS}",
                    "--config.log_every_steps=50", f"--config.eval_every_steps={RUN_STEPS}",
                    f"--config.checkpoint_every_steps={RUN_STEPS}"]
      if name == "gan":  # its FID features come from the default experiment's classifier
        overrides.append(f"--config.eval.classifier_workdir={out / 'runs' / 'default'}")
    parts.append(Part(name, "run", "attention_lab.main", f"{config}{preset}",
                      tuple(overrides), f"default experiment {config}"))
  return parts


def device_slug(platform_name: str, device_kind: str) -> str:
  """A folder name for a device kind: 'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3'."""
  if platform_name == "cpu":
    return "cpu"
  return re.sub(r"[^a-z0-9]+", "_", device_kind.lower()).strip("_") or platform_name


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def _cuda_versions() -> dict:
  try:
    from jax._src.lib import cuda_versions  # pylint: disable=g-import-not-at-top
  except ImportError:
    return {}
  found = {}
  for key in ("cuda_runtime", "cuda_driver", "cudnn", "cublas", "cufft", "cusolver", "cupti",
              "cusparse"):
    try:
      found[key] = getattr(cuda_versions, f"{key}_get_version")()
    except Exception:  # pylint: disable=broad-except  (absent without a GPU or driver)
      pass
  return found


def _nvidia_smi() -> list[dict]:
  fields = ("name", "driver_version", "memory.total", "power.limit", "clocks.max.sm")
  if not shutil.which("nvidia-smi"):
    return []
  try:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
  except (subprocess.SubprocessError, OSError):
    return []
  return [dict(zip(fields, (v.strip() for v in l.split(",")))) for l in out.splitlines()
          if l.strip()]


def environment() -> dict:
  """The device, its driver and the library versions the numbers depend on."""
  import jax  # pylint: disable=g-import-not-at-top
  from experiments import measure  # pylint: disable=g-import-not-at-top
  d = jax.devices()[0]
  env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "platform": d.platform, "device_kind": d.device_kind,
         "device_count": jax.device_count(), "process_count": jax.process_count(),
         "compute_capability": getattr(d, "compute_capability", None),
         "host_cpu": measure.machine()["cpu"], "host_cores": os.cpu_count(),
         "python": platform.python_version(), "jax": jax.__version__}
  for package in ("jaxlib", "jax-cuda12-plugin", "libtpu", "flax", "torch"):
    env[package.replace("-", "_")] = _version(package)
  env["libtpu"] = env["libtpu"] or _version("libtpu-nightly")
  env.update(cuda=_cuda_versions(), nvidia_smi=_nvidia_smi(), torch_cuda=None)
  try:
    import torch  # pylint: disable=g-import-not-at-top
    env["torch_cuda"] = torch.version.cuda if torch.cuda.is_available() else None
  except ImportError:
    pass
  return env


def _records(path: pathlib.Path):
  """The records of a TFRecord file (length, its CRC, data, its CRC), read without
  TensorFlow; a truncated last record (a killed writer) is left out."""
  data, i = path.read_bytes(), 0
  while i + 12 <= len(data):
    (length,) = struct.unpack("<Q", data[i:i + 8])
    if i + 16 + length > len(data):
      return
    yield data[i + 12:i + 12 + length]
    i += 16 + length


def read_perf(workdir: pathlib.Path) -> dict:
  """{tag: [values in step order]} of the run's `perf/` TensorBoard scalars (may be empty)."""
  from tensorboard.compat.proto import event_pb2  # pylint: disable=g-import-not-at-top
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top
  found = {}
  for path in sorted(workdir.glob("events.out.tfevents.*")):
    for record in _records(path):
      event = event_pb2.Event.FromString(record)
      for v in event.summary.value:
        if v.tag.startswith("perf/"):
          number = (float(tensor_util.make_ndarray(v.tensor)) if v.HasField("tensor")
                    else float(v.simple_value))
          found.setdefault(v.tag, []).append((event.step, number))
  return {tag: [v for _, v in sorted(points)] for tag, points in found.items()}


def run_part(part: Part, out: pathlib.Path) -> dict:
  """Runs one part; its output goes to logs/<name>.log."""
  log = out / "logs" / f"{part.name}.log"
  run = runs.run_module(part.module, [f"--config={part.config}", *part.overrides], log=log)
  print(f"[{part.name}] {'ok' if not run.returncode else f'FAILED (exit {run.returncode})'} "
        f"in {run.wall_s:.1f} s", flush=True)
  return {"name": part.name, "kind": part.kind, "what": part.what, "command": run.command,
          "returncode": run.returncode, "seconds": run.wall_s,
          "log": str(log.relative_to(out)), "error": run.error, "final": run.final}


def run_summary(status: dict, out: pathlib.Path) -> dict:
  """Medians of the run's perf/ scalars and its Final line; absent tags are None."""
  workdir = out / "runs" / status["name"]
  perf = read_perf(workdir) if workdir.exists() else {}
  saved = workdir / "config.json"  # the run's own record of its config
  config = json.loads(saved.read_text()) if saved.exists() else {}
  return {"batch": config.get("batch_size"), "steps": config.get("num_train_steps"),
          **{tag.split("/", 1)[1]: statistics.median(perf[tag]) if perf.get(tag) else None
             for tag in PERF_TAGS},
          "final_examples_per_second": status["final"].get("examples_per_second"),
          "final": status["final"]}


def _fmt(v, f=".3g"):
  return "—" if v is None else format(v, f)


def _links(out: pathlib.Path, status: dict) -> str:
  files = {"table": [out / "tables" / f"{status['name']}.{e}" for e in ("md", "json")],
           "relative": [out / "relative" / "relative_timm.md"],
           "run": [out / "runs" / status["name"]]}[status["kind"]]
  return ", ".join([f"[{p.name}]({p.relative_to(out)})" for p in files if p.exists()]
                   + [f"[log]({status['log']})"])


def fused_notes(out: pathlib.Path) -> list[str]:
  """The operator tables' fused regular-attention rows: run, or why not."""
  lines = []
  for path in sorted((out / "tables").glob("*_table*.json")):
    for r in json.loads(path.read_text()).get("fused") or []:
      result = (f"{1e3 * r['time_s']:.3f} ms (XLA {1e3 * r['xla_attn_time_s']:.3f} ms)"
                if r.get("time_s") else f"not run: {r['reason']}")
      lines.append(f"| {path.stem} | {r['size']} | {r['label']} | {result} |")
  return lines


def summary_markdown(env: dict, statuses: list[dict], summaries: dict, out: pathlib.Path,
                     smoke: bool) -> str:
  capability = env.get("compute_capability")
  lines = [
      f"# Accelerator report: {env['device_kind']}", "",
      ("Smoke run (every part at its `:tiny` preset; the numbers mean nothing)" if smoke
       else "Measured") + f" on {env['date']}: {env['device_count']} × {env['device_kind']} "
      f"({env['platform']}{f', compute capability {capability}' if capability else ''}), "
      f"{env['process_count']} process(es); host {env['host_cpu']}, {env['host_cores']} cores. "
      f"Command: `python -m experiments.accelerator_report{' --smoke' if smoke else ''}`.", "",
      "| library | version |", "|---|---|",
      *(f"| {k} | {env[k]} |" for k in ("python", "jax", "jaxlib", "jax_cuda12_plugin",
                                         "libtpu", "flax", "torch", "torch_cuda") if env.get(k)),
      *(f"| {k} | {v} |" for k, v in (env.get("cuda") or {}).items()),
      *(f"| GPU {i} (nvidia-smi) | {', '.join(f'{k} {v}' for k, v in g.items())} |"
        for i, g in enumerate(env.get("nvidia_smi") or [])),
      "", "## Parts", "", "| part | what | status | seconds | results |", "|---|---|---|---|---|"]
  for s in statuses:
    state = "ok" if not s["returncode"] else f"**failed** (exit {s['returncode']}): `{s['error']}`"
    lines.append(f"| {s['name']} | {s['what']} | {state} | {s['seconds']:.1f} | "
                 f"{_links(out, s)} |")
  if summaries:
    lines += [
        "", "## Default experiments at accelerator size", "",
        "Medians over the run's log steps of its `perf/` TensorBoard scalars (compilation "
        "excluded); MFU where the device's peak is known (none on a CPU); '—' where the run "
        "wrote no such scalar. The `Final:` column is the run's own median examples/s.", "",
        "| experiment | global batch | steps | examples/s | examples/s per device | step ms | "
        "TFLOP/s per device | MFU | Final: examples/s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in summaries.items():
      step = None if r["step_seconds"] is None else 1e3 * r["step_seconds"]
      mfu = "—" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
      lines.append(
          f"| {name} | {r['batch'] or '—'} | {r['steps'] or '—'} | "
          f"{_fmt(r['examples_per_second'], '.1f')} | "
          f"{_fmt(r['examples_per_second_per_device'], '.1f')} | {_fmt(step, '.2f')} | "
          f"{_fmt(r['tflops_per_device'])} | {mfu} | {_fmt(r['final_examples_per_second'], '.1f')} |")
  fused = fused_notes(out)
  lines += ["", "## Fused regular attention (the strongest regular-attention baseline)", ""]
  lines += (["The operator tables time the device's fused kernel beside XLA's regular "
             "attention and give every speed-up also against the faster of the two "
             "(`experiments/efficiency_fused.py` states the kernels' rules).", "",
             "| table | input | kernel | time |", "|---|---|---|---|", *fused] if fused else
            ["None on this device (cuDNN flash attention needs a GPU, the Pallas flash "
             "kernel a TPU): the tables compare against XLA's regular attention only."])
  return "\n".join(lines) + "\n"


def report(env: dict, out: pathlib.Path, parts: list[Part], smoke: bool) -> list[dict]:
  """Runs the parts one after the other; rewrites report.json and README.md after each."""
  out.mkdir(parents=True, exist_ok=True)
  (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
  statuses, summaries = [], {}
  start = time.perf_counter()
  for part in parts:
    statuses.append(run_part(part, out))
    if part.kind == "run":
      summaries[part.name] = run_summary(statuses[-1], out)
    data = {"environment": env, "smoke": smoke, "parts": statuses, "runs": summaries,
            "seconds": time.perf_counter() - start}
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "README.md").write_text(summary_markdown(env, statuses, summaries, out, smoke))
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
  out = (pathlib.Path(_OUT.value) if _OUT.value
         else RESULTS / device_slug(env["platform"], env["device_kind"])).resolve()
  parts = plan(out, _SMOKE.value)
  unknown = set(_PARTS.value) - {p.name for p in parts}
  if unknown:
    cli.fail(f"--parts has unknown names {sorted(unknown)}; expected some of "
             f"{[p.name for p in parts]}")
  parts = [p for p in parts if p.name in _PARTS.value] if _PARTS.value else parts
  statuses = report(env, out, parts, _SMOKE.value)
  sys.exit(1 if any(s["returncode"] for s in statuses) else 0)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
