"""Whole networks on this device: the train step the tasks run (`measure.train_step`: the
library's TrainableModel, optax SGD with momentum, softmax cross-entropy), bfloat16 compute,
device-resident random batches, beside PyTorch (timm, channels_last, bf16 autocast,
torch.compile or eager) in the same process. The table kind "networks" of
experiments/efficiency.py:

  python -m experiments.efficiency --config=configs/efficiency/networks.py[:tiny]

Entries run in the config's order (most valuable first) while `config.budget_s` allows (each
entry's estimate, scaled by how the finished ones compared with theirs); the table is written
after each, so a stopped run keeps what it measured, and `config.resume` measures only the
entries the saved JSON lacks. Time: wall time of `steps` back-to-back steps after `warmup`,
the host running ahead of the device (waited for at the end), for both frameworks alike.
"""

import json
import time

import jax
import jax.numpy as jnp
import optax

from attention_lab import devices, models
from experiments import measure

SCALE_LIMITS = (0.25, 4.0)  # how far measured / expected may rescale the estimates
TORCH_DEVICE_NOTE = "torch.cuda.max_memory_allocated"


def _loss(logits, labels):
  return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                         labels).mean()


def _jax_batch(entry, config):
  """(images, labels) on the device: labels per image, or per pixel for a segmenter."""
  size, batch = entry.get("image_size", config.image_size), entry["batch"]
  key_x, key_y = jax.random.split(jax.random.key(0))
  x = jax.random.normal(key_x, (batch, size, size, 3), jnp.float32)
  shape = (batch, size, size) if entry.get("task") == "segmentation" else (batch,)
  return x, jax.random.randint(key_y, shape, 0, entry.get("classes", 1000))


def _run_steps(step, state, warmup: int, steps: int, finish):
  """(state, compile + warm-up seconds, seconds per step): `steps` back-to-back calls timed
  after `warmup`, `finish(state)` waiting for the device."""
  start = time.perf_counter()
  for _ in range(warmup):
    state = step(state)
  finish(state)
  warm = time.perf_counter() - start
  start = time.perf_counter()
  for _ in range(steps):
    state = step(state)
  finish(state)
  return state, warm, (time.perf_counter() - start) / steps


def measure_jax(entry, config) -> dict:
  """An entry's train step, compiled with the state donated, timed; its model FLOPs (2 × the
  jaxpr's multiply-adds), XLA's accounting and memory peak."""
  kwargs = {"num_classes": entry.get("classes", 1000), "dtype": config.compute_dtype,
            **({} if entry.get("task") == "segmentation" else {"image_size": entry.get(
                "image_size", config.image_size)}), **dict(entry.get("overrides", {}))}
  build = lambda rngs: models.create(entry["model"], rngs=rngs, **kwargs)
  tx = optax.sgd(config.learning_rate, momentum=0.9)
  start = time.perf_counter()
  step, state = measure.train_step(build, tx, _loss, abstract=False)
  x, y = _jax_batch(entry, config)
  compiled, acct = measure.compile_fn(step, state, x, y, donate_argnums=0)
  compile_s = time.perf_counter() - start
  flops = 2.0 * measure.madd_of(step, state, x, y)
  _, warm, step_s = _run_steps(lambda s: compiled(s, x, y), state, config.warmup, config.steps,
                               jax.block_until_ready)
  return dict(compile_s=compile_s + warm, step_s=step_s, flops=flops, mode="XLA (jit)",
              xla_flops=acct["xla_flops"], xla_bytes=acct["xla_bytes_accessed"],
              memory_bytes=acct["peak_bytes"], memory_source="XLA peak")


def _torch_model(entry, config, device):
  import timm  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  size = entry.get("image_size", config.image_size)
  model = timm.create_model(entry["model"], num_classes=1000,
                            **({"img_size": size} if entry.get("img_size") else {}))
  return model.to(device, memory_format=torch.channels_last).train()


def measure_torch(entry, config, compile_model: bool, why_eager: str = "") -> dict:
  """timm's `entry["model"]` trained as ours (SGD momentum, cross-entropy) in channels_last
  with bf16 autocast, torch.compile'd (eager where it fails or `compile_model` is False);
  FLOPs by torch's FlopCounterMode on one eager step."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch.utils import flop_counter  # pylint: disable=g-import-not-at-top
  device = "cuda" if torch.cuda.is_available() else "cpu"
  if config.torch_threads:
    torch.set_num_threads(config.torch_threads)
  size, batch = entry.get("image_size", config.image_size), entry["batch"]
  model = _torch_model(entry, config, device)
  opt = torch.optim.SGD(model.parameters(), lr=config.learning_rate, momentum=0.9)
  x = torch.randn(batch, 3, size, size, device=device).contiguous(
      memory_format=torch.channels_last)
  y = torch.randint(0, 1000, (batch,), device=device)

  def step_of(forward):
    def step(_):
      opt.zero_grad(set_to_none=True)
      with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(forward(x), y)
      loss.backward()
      opt.step()
    return step

  with flop_counter.FlopCounterMode(display=False) as counter:
    step_of(model)(None)
  finish = lambda _: torch.cuda.synchronize() if device == "cuda" else None
  mode, start = "eager" + (f" ({why_eager})" if why_eager else ""), time.perf_counter()
  if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
  try:
    step = step_of(torch.compile(model) if compile_model else model)
    step_s = _run_steps(step, None, config.warmup, config.steps, finish)[2]
    mode = "torch.compile" if compile_model else mode
  except Exception as e:  # pylint: disable=broad-except  # the compiler's failure: eager
    mode = f"eager (torch.compile failed: {type(e).__name__})"
    step = step_of(model)
    step_s = _run_steps(step, None, config.warmup, config.steps, finish)[2]
  memory = torch.cuda.max_memory_allocated() if device == "cuda" else None
  del model, opt, x, y, step
  torch._dynamo.reset()  # pylint: disable=protected-access  # frees the compiled graphs
  if device == "cuda":
    torch.cuda.empty_cache()  # JAX allocates after this, in the same GPU
  return dict(compile_s=time.perf_counter() - start - step_s * config.steps, step_s=step_s,
              flops=float(counter.get_total_flops()), mode=mode, xla_flops=None,
              xla_bytes=None, memory_source=TORCH_DEVICE_NOTE, memory_bytes=memory)


def torch_missing() -> str | None:
  """Why PyTorch entries cannot run here (None if they can)."""
  try:
    import timm  # pylint: disable=g-import-not-at-top,unused-import
    import torch  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    return f"{e.name or 'torch'} is not installed"
  return None


def _derived(row, peak, bandwidth) -> dict:
  """images/s, TFLOP/s, MFU and the fraction of the roofline max(FLOPs / peak, bytes /
  bandwidth): FLOPs the larger of the model's and XLA's (XLA:GPU's cost analysis misses
  some custom-call GEMMs), bytes XLA's."""
  step_s, flops = row["step_s"], row["flops"]
  out = dict(images_per_s=row["batch"] / step_s, tflops=flops / step_s / 1e12,
             mfu=flops / step_s / peak if peak else None, roofline_fraction=None)
  if peak and bandwidth and row.get("xla_bytes"):
    roof = max(max(flops, row["xla_flops"] or 0) / peak, row["xla_bytes"] / bandwidth)
    out["roofline_fraction"] = roof / step_s
  return out


class _Budget:
  """Seconds left of `seconds` (0: unlimited) and estimates scaled by the finished entries."""

  def __init__(self, seconds: float):
    self.seconds, self.start, self.measured, self.expected = seconds, time.perf_counter(), 0, 0

  def fits(self, estimate: float) -> bool:
    scale = min(max(self.measured / self.expected, SCALE_LIMITS[0]), SCALE_LIMITS[1]) if (
        self.expected) else 1.0
    return not self.seconds or (time.perf_counter() - self.start + estimate * scale
                                <= self.seconds)

  def done(self, estimate: float, seconds: float) -> None:
    self.measured, self.expected = self.measured + seconds, self.expected + estimate


def _measure_entry(entry, config, budget: _Budget):
  """(row, None) of a measured entry, or (None, why not): over the budget; a PyTorch entry
  whose torch.compile does not fit runs eager if that fits (`eager_estimate_s`)."""
  estimate, torch_entry = entry["estimate_s"], entry["framework"] == "torch"
  compile_model = torch_entry and config.torch_compile and entry.get("compile", True)
  why_eager = "" if compile_model or not torch_entry else "torch.compile not asked for"
  if not budget.fits(estimate):
    eager = entry.get("eager_estimate_s")
    if not (compile_model and eager and budget.fits(eager)):
      return None, f"estimated {estimate:.0f} s: over the budget of {config.budget_s:.0f} s"
    compile_model, why_eager, estimate = False, "torch.compile did not fit the budget", eager
  start = time.perf_counter()
  measured = (measure_torch(entry, config, compile_model, why_eager) if torch_entry
              else measure_jax(entry, config))
  budget.done(estimate, time.perf_counter() - start)
  return dict(label=entry["label"], framework=entry["framework"], model=entry["model"],
              batch=entry["batch"], image_size=entry.get("image_size", config.image_size),
              baseline=entry.get("baseline"), seconds=time.perf_counter() - start,
              **measured), None


def goals(config, rows) -> dict:
  """Our ResNet-50's images/s over PyTorch's (goal ≥ `config.resnet50_goal`), and each
  network's step-time overhead over its plain backbone (same batch and size), ours against
  each of timm's attention ResNets' (goal: no higher)."""
  by = {r["label"]: r for r in rows}
  ours, twin = (by.get(label) for label in config.resnet50_pair)
  result = {}
  if ours and twin:
    ratio = ours["images_per_s"] / twin["images_per_s"]
    result["resnet50"] = dict(ours=ours["images_per_s"], torch=twin["images_per_s"],
                              ratio=ratio, met=ratio >= config.resnet50_goal)
  overheads = {r["label"]: r["step_s"] / by[r["baseline"]]["step_s"] for r in rows
               if r.get("baseline") in by}
  timm = {k: v for k, v in overheads.items() if by[k]["framework"] == "torch"}
  result["timm_overheads"] = timm
  result["overheads"] = {k: dict(overhead=v, baseline=by[k]["baseline"],
                                 met={t: v <= tv for t, tv in timm.items()})
                         for k, v in overheads.items() if by[k]["framework"] == "jax"}
  return result


def _kept_rows(config, path) -> dict:
  """{label: row} of the saved JSON's measured rows, where `config.resume` asks for them."""
  if not (config.resume and path.exists()):
    return {}
  return {r["label"]: {**r, "kept_from": json.loads(path.read_text()).get("commit")}
          for r in json.loads(path.read_text()).get("rows", [])}


def run(config) -> dict:
  out, stem, machine = measure.out_dir_of(config), measure.output_stem(config), measure.machine()
  kept = _kept_rows(config, out / f"{stem}.json")
  no_torch = torch_missing()
  entry = devices.lookup(jax.devices()[0].device_kind)
  peak, bandwidth = ((entry.peak(config.compute_dtype), entry.memory_bandwidth) if entry
                     else (None, None))
  rows, not_run, budget = [], [], _Budget(config.budget_s)
  for e in (dict(e) for e in config.entries):
    if e["framework"] == "torch" and no_torch:
      continue
    row, why = (kept[e["label"]], None) if e["label"] in kept else _measure_entry(e, config,
                                                                                   budget)
    if row is None:
      not_run.append({"label": e["label"], "reason": why})
      print(f"{e['label']}: not run: {why}", flush=True)
      continue
    rows.append({**row, **_derived(row, peak, bandwidth)})
    print({k: v for k, v in rows[-1].items()}, flush=True)
    result = {"rows": rows, "not_run": not_run, "torch_missing": no_torch,
              "goals": goals(config, rows), "incomplete": bool(not_run)}
    measure.write(out, stem, {**result, "machine": machine, "partial": True},  # kept if stopped
                  markdown(config, result, measure.machine_line(machine)))
  return {"rows": rows, "not_run": not_run, "torch_missing": no_torch,
          "goals": goals(config, rows), "incomplete": bool(not_run)}


def _goal_lines(config, g) -> list:
  lines = ["", "## Goals", ""]
  r50 = g.get("resnet50")
  lines.append(
      f"- ResNet-50 ≥ {config.resnet50_goal:g}× PyTorch's images/s: " + (
          f"{r50['ratio']:.2f}× ({r50['ours']:.0f} against {r50['torch']:.0f} images/s) — "
          f"{measure.verdict(r50['met'])}" if r50 else "not measured")
      + f". Published anchor: {config.resnet50_anchor}.")
  timm = g.get("timm_overheads") or {}
  for label, o in (g.get("overheads") or {}).items():
    verdicts = ", ".join(f"{measure.verdict(met)} against {t} ({timm[t]:.2f}×)"
                         for t, met in o["met"].items()) or "timm's not measured"
    lines.append(f"- {label} costs {o['overhead']:.2f}× {o['baseline']}'s step: {verdicts}.")
  return lines


def markdown(config, result, machine: str) -> str:
  gib = lambda b: "—" if b is None else f"{b / 2**30:.1f}"
  pct = lambda v: measure.fmt(v and 100 * v, ".1f", "%", "—")
  columns = {
      "network": lambda r: r["label"], "framework": lambda r: (
          f"{'JAX' if r['framework'] == 'jax' else 'PyTorch'}: {r['mode']}"),
      "batch": lambda r: str(r["batch"]), "image": lambda r: f"{r['image_size']}²",
      "images/s": lambda r: f"{r['images_per_s']:.1f}",
      "step ms": lambda r: f"{1e3 * r['step_s']:.2f}",
      "compile + warm-up s": lambda r: f"{r['compile_s']:.1f}",
      "TFLOP/s": lambda r: f"{r['tflops']:.3g}", "MFU": lambda r: pct(r["mfu"]),
      "of XLA's roofline": lambda r: pct(r["roofline_fraction"]),
      "memory GiB": lambda r: f"{gib(r['memory_bytes'])} ({r['memory_source']})",
      "run at": lambda r: measure.short_commit(r.get("kept_from")) if "kept_from" in r
      else "this run"}
  lines = measure.header(config, machine, config.about) + measure.md_table(
      columns, result["rows"])
  if result.get("torch_missing"):
    lines += ["", f"PyTorch: not measured ({result['torch_missing']})."]
  if result["not_run"]:
    lines += [""] + [f"- {n['label']}: not run: {n['reason']}" for n in result["not_run"]]
  return "\n".join(lines + _goal_lines(config, result["goals"])) + "\n"


def plot(config, result, path, machine: str) -> None:
  """No plot: the table is the figure."""
  del config, result, path, machine
