"""Training steps of whole networks, as the tasks train them (`measure.train_step`), the state
donated: XLA memory at the paper's batch (compiled, never run) and time side by side at
`time_batch` (0: memory only). SAO Table 5 (classification: cross-entropy, SGD momentum 0.9)
and SAO Table 7's memory (`config.patch`: restoration, L1 on volumes, Adam)."""

import jax
import jax.numpy as jnp
import optax

from attention_lab import models
from experiments import efficiency_fused as fused_lib
from experiments import measure, plots

UNITS = {"GB": 1e9, "GiB": measure.GIB}


def _overrides(net) -> dict:
  """The net's model overrides; with `fused` (a kernel), its GlobalAttentions' regular attention
  through that kernel (`attention_kwargs`, which replace the registry's)."""
  overrides = dict(net.get("overrides", {}))
  if net.get("fused"):
    overrides["attention_kwargs"] = {**dict(overrides.get("attention_kwargs") or {}),
                                     "attention_fn": fused_lib.regular_attention(net["fused"])}
  return overrides


def _step(net, config, abstract: bool):
  """The net's train step and its state (float32 parameters)."""
  if config.get("patch"):
    kwargs, tx = {}, optax.adam(config.learning_rate)
    loss = lambda prediction, target: jnp.mean(jnp.abs(prediction - target))
  else:
    kwargs = {"num_classes": 1000, "image_size": config.image_size,
              "dtype": config.get("dtype", "float32")}
    tx = optax.sgd(config.learning_rate, momentum=0.9)
    loss = lambda logits, labels: optax.softmax_cross_entropy_with_integer_labels(
        logits, labels).mean()
  build = lambda rngs: models.create(net["model"], rngs=rngs, **{**kwargs, **_overrides(net)})
  return measure.train_step(build, tx, loss, abstract=abstract)


def _batch(config, batch: int, abstract: bool):
  """(inputs, targets): volumes and themselves (restoration), or images and labels."""
  if config.get("patch"):
    x = jax.ShapeDtypeStruct((batch, *config.patch, 1), jnp.float32)
    return (x, x) if abstract else measure.concrete((x, x))
  shape = (batch, config.image_size, config.image_size, 3)
  if abstract:
    return jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.int32)
  key = jax.random.key(1)
  return jax.random.normal(key, shape), jax.random.randint(key, (batch,), 0, 1000)


def _measure(net, config):
  """(XLA accounting at the paper's batch, donated; (compiled, args) at `time_batch` or None:
  nothing donated, so one set of arguments serves every timed call; parameter count)."""
  step, state = _step(net, config, abstract=True)
  memory = measure.compile_fn(step, state, *_batch(config, config.paper_batch, True),
                              donate_argnums=0)[1]
  params = sum(x.size for x in jax.tree.leaves(state["params"]))
  if not config.time_batch:
    return memory, None, params
  step, state = _step(net, config, abstract=False)
  args = (state, *_batch(config, config.time_batch, False))
  return memory, (measure.compile_fn(step, *args)[0], args), params


def run(config) -> dict:
  rows, cache, not_run, machine = [], {}, [], measure.machine()
  kernel = fused_lib.kernel_of(config)
  for comparison in map(dict, config.comparisons):
    nets = [dict(n) for n in comparison["nets"]]
    nets += [dict(n, label=f"{n['label']} ({fused_lib.LABELS[kernel]})", fused=kernel, paper=None)
             for n in nets if kernel and n["label"] in tuple(config.get("fused_nets", ()))]
    programs = {}
    for net in list(nets):
      key = (net["model"], str(sorted(dict(net.get("overrides", {})).items())), net.get("fused"))
      try:
        if key not in cache:  # a baseline shared by two comparisons compiles once
          cache[key] = _measure(net, config)
      except NotImplementedError as e:  # the fused kernel's rules exclude this net
        if not net.get("fused"):
          raise
        nets.remove(net)
        not_run.append({"label": net["label"], "reason": str(e)})
        continue
      net["memory"], program, net["params"] = cache[key]
      if program:
        programs[net["label"]] = program
      print(f"{net['label']}: peak {net['memory']['peak_bytes'] / 1e9:.2f} GB", flush=True)
    times = measure.time_side_by_side(programs, config.repeats, config.min_sample_s)
    base = next(n for n in nets if n["label"] == comparison["baseline"])
    for net in nets:
      t = times.get(net["label"], {})
      paper, bpaper = net.get("paper") or {}, base.get("paper") or {}
      both = lambda key: paper.get(key) and bpaper.get(key)
      net.update(
          time_s=t.get("time_s"), time_samples=t.get("samples"),
          memory_ratio=net["memory"]["peak_bytes"] / base["memory"]["peak_bytes"],
          time_ratio=t.get("time_s") and t["time_s"] / times[base["label"]]["time_s"],
          paper_memory_ratio=paper["memory_gb"] / bpaper["memory_gb"] if both("memory_gb")
          else None,
          paper_time_ratio=paper["time_s"] / bpaper["time_s"] if both("time_s")
          else paper.get("time_ratio"))
      rows.append(dict(comparison=comparison["title"], baseline=comparison["baseline"], **net))
    result = {"rows": rows, "goal": _goal(config, rows), "fused_not_run": not_run}
    measure.write(measure.out_dir_of(config), measure.output_stem(config),  # kept if stopped
                  {**result, "machine": machine, "partial": True},
                  markdown(config, result, measure.machine_line(machine)))
  return result


def _goal(config, rows) -> dict:
  sanet = next((r for r in rows if r["label"] == "SANet" and r["time_ratio"]), None)
  if sanet is None:
    return {}
  return {"what": f"SANet train step ≤ {config.goal_max_ratio}× MobileNetV2's",
          "ratio": sanet["time_ratio"], "met": sanet["time_ratio"] <= config.goal_max_ratio}


def markdown(config, result, machine: str) -> str:
  unit = config.get("memory_unit", "GB")
  mem = lambda key, digits=2: lambda r: f"{r['memory'][key] / UNITS[unit]:.{digits}f}"
  ratio = lambda key: lambda r: measure.fmt(r[key], ".3f", "×", "—")
  columns = {
      "comparison": lambda r: r["comparison"], "network": lambda r: r["label"],
      "params": lambda r: f"{r['params'] / 1e6:.2f}M",
      f"XLA peak {unit} (batch {config.paper_batch})": mem("peak_bytes"),
      f"temp {unit}": mem("temp_bytes"), f"args {unit}": mem("arg_bytes", 3),
      "paper GB": lambda r: measure.fmt((r.get("paper") or {}).get("memory_gb"), ".1f",
                                        missing="—"),
      "memory ratio": ratio("memory_ratio"), "paper memory ratio": ratio("paper_memory_ratio"),
      f"step ms (batch {config.time_batch})": lambda r: measure.fmt(
          r["time_s"] and 1e3 * r["time_s"], ".0f", missing="—"),
      "time ratio": ratio("time_ratio"), "paper time ratio": ratio("paper_time_ratio")}
  if not config.time_batch:  # memory only
    columns = dict(list(columns.items())[:-3])
  lines = measure.header(config, machine, config.about) + measure.md_table(columns, result["rows"])
  lines += [f"| | {r['label']} | not run: {r['reason']} |" + " |" * (len(columns) - 3)
            for r in result.get("fused_not_run") or []]
  goal = result.get("goal") or {}
  if goal:
    lines += ["", f"Performance goal: {goal['what']}: measured {goal['ratio']:.3f}× — "
              f"{measure.verdict(goal['met'])}."]
  return "\n".join(lines) + "\n"


def plot(config, result, path, machine: str) -> str | None:
  """sao_table5: memory and time ratios, ours beside the paper's; no plot for the others."""
  del machine
  if config.table != "sao_table5":
    return None
  rows = result["rows"]
  plots.grouped_bars(
      path, "SAO Table 5: training-step memory and time (ratios)",
      [f"{r['label']}\n({r['comparison'].split(' (')[0]})" for r in rows],
      [(f"{what} ratio to the baseline", {"paper": [r.get(f"paper_{what}_ratio") for r in rows],
                                          "ours": [r[f"{what}_ratio"] for r in rows]})
       for what in ("memory", "time")], rotate=60)
  return plots.link("Plot (ratios, ours beside the paper's)", path)
