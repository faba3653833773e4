"""SAO Table 5: cost of training whole networks (forward + backward + optimizer update).

Run through `python -m experiments.efficiency --config=configs/efficiency/sao_table5.py`.

For every network of a comparison (config.comparisons), one real train step
as the tasks train (`measure.train_step`, the library's TrainableModel):
softmax cross-entropy on integer labels, gradients of every parameter, the
BatchNorm statistics carried, SGD with momentum 0.9 applied (the SAO
recipe's optimizer), the state donated as in the trainer. Two measurements:

- memory: XLA's `memory_analysis()` of the step compiled for the paper's
  batch (128×224²×3) — compiled only, never run. Peak = temporaries +
  arguments + outputs − aliased (donated) bytes, i.e. what one device must
  hold during the step;
- time: the same step compiled for `time_batch` images of 224² (a batch this
  CPU can run), the networks timed side by side in interleaved rounds
  (experiments.measure.time_side_by_side, median of `repeats` samples).

Ratios are against the comparison's baseline (MobileNetV2 for SAO Table 5 and
the KANets, ResNet-50 for the AA-ResNet-50s), beside the paper's ratios
(SAO Table 5: 7.4 / 7.5 / 11.7 GB and 14.4 / 14.9 / 27.1 s for 100 iterations on a
GPU; AA Table 2: Δ_Train of AA (υ = 0.25) over ResNet-50, +25%, V100, batch 128).
"""

import jax
import jax.numpy as jnp
import optax

from attention_lab import models
from experiments import measure

GB = 1e9


def _build(name: str, overrides: dict, config):
  """The network's builder: float32 parameters computing in `config.dtype`."""
  return lambda rngs: models.create(name, num_classes=1000, rngs=rngs,
                                    image_size=config.image_size,
                                    **{"dtype": _dtype(config), **overrides})


def _dtype(config) -> str:
  return config.get("dtype", "float32")


def _step(name, overrides, config, abstract: bool):
  """The train step (softmax cross-entropy, SGD momentum 0.9) and its state."""
  loss = lambda logits, labels: optax.softmax_cross_entropy_with_integer_labels(
      logits, labels).mean()
  return measure.train_step(_build(name, overrides, config),
                            optax.sgd(config.learning_rate, momentum=0.9), loss,
                            abstract=abstract)


def _batch(config, batch: int, abstract: bool):
  shape = (batch, config.image_size, config.image_size, 3)
  if abstract:
    return jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.int32)
  key = jax.random.key(1)
  return jax.random.normal(key, shape), jax.random.randint(key, (batch,), 0, 1000)


def memory_at(name, overrides, config) -> dict:
  """XLA accounting of one train step at the paper's batch, compiled from shapes only, the
  state donated as the trainer does."""
  step, state = _step(name, overrides, config, abstract=True)
  return measure.compile_fn(step, state, *_batch(config, config.paper_batch, True),
                            donate_argnums=0)[1]


def timed_program(name, overrides, config):
  """(compiled step, concrete args) at `time_batch`; the step donates nothing, so one set of
  arguments serves every timed call (the update is still computed and written out)."""
  step, state = _step(name, overrides, config, abstract=False)
  args = (state, *_batch(config, config.time_batch, False))
  return measure.compile_fn(step, *args)[0], args


def _with_fused_attention(nets, config) -> list:
  """The comparison's nets plus, for each net in `config.fused_nets`, the same net with the
  device's fused regular attention (experiments/efficiency_fused.py; none on a CPU)."""
  from experiments import efficiency_fused  # pylint: disable=g-import-not-at-top
  kernel = efficiency_fused.kernel_of(config)
  if not kernel:
    return nets
  extra = [dict(n, label=f"{n['label']} ({efficiency_fused.LABELS[kernel]})", fused=kernel,
                paper=None)
           for n in nets if n["label"] in tuple(config.get("fused_nets", ()))]
  return nets + extra


def _measured(net, config, memory_cache, program_cache):
  """(memory, program) of a net, compiled once per (model, overrides, kernel)."""
  from experiments import efficiency_fused  # pylint: disable=g-import-not-at-top
  overrides = dict(net.get("overrides", {}))
  kernel = net.get("fused")
  key = (net["model"], tuple(sorted(overrides.items())), kernel)
  if key not in memory_cache:  # a baseline shared by two comparisons compiles once
    if kernel:
      with efficiency_fused.replaced_regular_attention(kernel):
        memory_cache[key] = memory_at(net["model"], overrides, config)
        program_cache[key] = timed_program(net["model"], overrides, config)
    else:
      memory_cache[key] = memory_at(net["model"], overrides, config)
      program_cache[key] = timed_program(net["model"], overrides, config)
  return memory_cache[key], program_cache[key]


def run(config) -> dict:
  rows, memory_cache, program_cache, not_run = [], {}, {}, []
  for comparison in config.comparisons:
    comparison = dict(comparison)
    nets = _with_fused_attention([dict(n) for n in comparison["nets"]], config)
    programs = {}
    for net in list(nets):
      try:
        net["memory"], programs[net["label"]] = _measured(net, config, memory_cache,
                                                          program_cache)
      except NotImplementedError as e:  # the fused kernel's rules exclude this net
        if not net.get("fused"):
          raise
        nets.remove(net)
        not_run.append({"label": net["label"], "reason": str(e)})
        print(f"{net['label']}: not run: {e}", flush=True)
        continue
      print(f"{net['label']}: peak {net['memory']['peak_bytes'] / GB:.2f} GB at batch "
            f"{config.paper_batch}", flush=True)
    times = measure.time_side_by_side(programs, config.repeats, config.min_sample_s)
    base = next(n for n in nets if n["label"] == comparison["baseline"])
    for net in nets:
      t = times[net["label"]]
      params = _step(net["model"], dict(net.get("overrides", {})), config, True)[1]["params"]
      net.update(time_s=t["time_s"], time_samples=t["samples"],
                 params=sum(x.size for x in jax.tree.leaves(params)))
    for net in nets:
      net["memory_ratio"] = net["memory"]["peak_bytes"] / base["memory"]["peak_bytes"]
      net["time_ratio"] = net["time_s"] / times[comparison["baseline"]]["time_s"]
      paper = net.get("paper") or {}
      bpaper = base.get("paper") or {}
      net["paper_memory_ratio"] = (paper["memory_gb"] / bpaper["memory_gb"]
                                   if paper.get("memory_gb") and bpaper.get("memory_gb") else None)
      net["paper_time_ratio"] = (paper["time_s"] / bpaper["time_s"]
                                 if paper.get("time_s") and bpaper.get("time_s")
                                 else paper.get("time_ratio"))
      rows.append(dict(comparison=comparison["title"], baseline=comparison["baseline"], **net))
      print({k: v for k, v in net.items() if k != "time_samples"}, flush=True)
    _write_partial(config, {"rows": rows, "goal": _goal(config, rows), "fused_not_run": not_run})
  return {"rows": rows, "goal": _goal(config, rows), "fused_not_run": not_run}


def _write_partial(config, result):
  """Writes the comparisons measured so far (a long run keeps what it has if stopped)."""
  result = {**result, "machine": measure.machine(), "partial": True}
  measure.write(measure.out_dir_of(config), measure.output_stem(config), result,
                markdown(config, result, measure.machine_line(result["machine"])))


def _goal(config, rows) -> dict:
  sanet = next((r for r in rows if r["label"] == "SANet"), None)
  if sanet is None:
    return {}
  return {"what": f"SANet train step ≤ {config.goal_max_ratio}× MobileNetV2's",
          "ratio": sanet["time_ratio"], "met": sanet["time_ratio"] <= config.goal_max_ratio}


def markdown(config, result, machine_line: str) -> str:
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine_line}. Command: `{measure.command_of(config)}`.", "",
      "One training step: forward, softmax cross-entropy, backward, SGD momentum update, "
      f"float32 parameters, {_dtype(config)} compute. **Memory**: XLA `memory_analysis()` of the step compiled (not run) for "
      f"{config.paper_batch}×{config.image_size}²×3, peak = temporaries + arguments + outputs − "
      "donated (aliased) bytes. **Time**: the step compiled for "
      f"{config.time_batch}×{config.image_size}²×3 and timed side by side with the other nets "
      f"of its comparison (median of {config.repeats} interleaved samples after warm-up). "
      "Ratios against the comparison's baseline. Paper columns: SAO Table 5 (memory and time "
      "of 100 iterations at 128×224²×3, GPU); AA Table 2 Δ_Train (V100, batch 128) for "
      "AA (υ = 0.25).", "",
      "| comparison | network | params | XLA peak GB (batch "
      f"{config.paper_batch}) | temp GB | paper GB | memory ratio | paper memory ratio | "
      f"step ms (batch {config.time_batch}) | time ratio | paper time ratio |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in result["rows"]:
    p = r.get("paper") or {}
    lines.append(
        f"| {r['comparison']} | {r['label']} | {r['params'] / 1e6:.2f}M | "
        f"{r['memory']['peak_bytes'] / GB:.2f} | {r['memory']['temp_bytes'] / GB:.2f} | "
        f"{measure.fmt(p.get('memory_gb'), '.1f', missing='—')} | {r['memory_ratio']:.3f}× | "
        f"{measure.fmt(r['paper_memory_ratio'], '.3f', '×', '—')} | {1e3 * r['time_s']:.0f} | "
        f"{r['time_ratio']:.3f}× | {measure.fmt(r['paper_time_ratio'], '.3f', '×', '—')} |")
  for r in result.get("fused_not_run") or []:
    lines.append(f"| | {r['label']} | not run: {r['reason']} | | | | | | | | |")
  goal = result.get("goal") or {}
  if goal:
    lines += ["", f"Performance goal: {goal['what']}: measured {goal['ratio']:.3f}× — "
              f"{'met' if goal['met'] else 'NOT met'}."]
  return "\n".join(lines) + "\n"
