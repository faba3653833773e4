"""Refined-SA Tables 2-3: SAGAN, ISAGAN and SGAN (G + D) — forward and training-iteration time,
and the largest training batch within a memory budget, by XLA's memory analysis of the compiled
(never run) iteration on XLA:CPU or, `config.largest_batch`, XLA:GPU for a GPU target config of
attention_lab/gpu_targets/ (no GPU needed; JAX's CUDA plugin is). The registry's unconditional
sagan_generator / sagan_discriminator; attention "sa" | "refined" | "conv" (Sec. 5.2)."""

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

import attention_lab.models.sagan  # noqa: F401  (registers sagan_generator / sagan_discriminator)
from attention_lab import devices, models
from experiments import measure, plots
from experiments.measure import GIB, LABELS, MB

ATTENTION = {"sagan": "sa", "isagan": "refined", "sgan": "conv"}


def build(config, variant: str):
  """(generator, discriminator, source) for "sagan" | "isagan" | "sgan"."""
  kw = dict(num_classes=0, attention=ATTENTION[variant], resolution=config.image_size,
            width=config.width, spectral_norm=config.get("spectral_norm", True))
  # unsafe_rbg: initial values do not change the programs, and its initialisers compile fast.
  rngs = lambda s: nnx.Rngs(jax.random.key(s, impl="unsafe_rbg"))
  g = models.create("sagan_generator", rngs=rngs(0), latent_dim=config.z_dim, **kw)
  d = models.create("sagan_discriminator", rngs=rngs(1), **kw)
  return g, d, f"registry sagan_generator / sagan_discriminator (attention={kw['attention']!r})"


def forward_fn(g, d):
  """(D(G(z)) in evaluation mode as fn(gstate, dstate, z), (gstate, dstate))."""
  generate, gstate = measure.inference_fn(g)
  discriminate, dstate = measure.inference_fn(d)
  return (lambda gs, ds, z: discriminate(ds, generate(gs, z))), (gstate, dstate)


def train_fn(g, d):
  """(step, state) of one training iteration: D's hinge loss on a real and a generated batch,
  then G's loss, each differentiated w.r.t. its network's parameters (no optimizer)."""
  g.train()
  d.train()
  gdef, gp, gr = nnx.split(g, nnx.Param, ...)
  ddef, dp, dr = nnx.split(d, nnx.Param, ...)
  rest = lambda m: nnx.state(m, nnx.Not(nnx.Param))

  def step(gp, gr, dp, dr, z, real):
    def d_loss(dp, dr, gr):
      gen, disc = nnx.merge(gdef, gp, gr, copy=True), nnx.merge(ddef, dp, dr, copy=True)
      fake = jax.lax.stop_gradient(gen(z))
      loss = jnp.mean(jax.nn.relu(1 - disc(real))) + jnp.mean(jax.nn.relu(1 + disc(fake)))
      return loss, (rest(gen), rest(disc))

    (_, (gr, dr)), d_grads = jax.value_and_grad(d_loss, has_aux=True)(dp, dr, gr)

    def g_loss(gp, gr, dr):
      gen, disc = nnx.merge(gdef, gp, gr, copy=True), nnx.merge(ddef, dp, dr, copy=True)
      return -jnp.mean(disc(gen(z))), (rest(gen), rest(disc))

    (_, (gr, dr)), g_grads = jax.value_and_grad(g_loss, has_aux=True)(gp, gr, dr)
    return g_grads, d_grads, gr, dr

  return step, (gp, gr, dp, dr)


def inputs(config, batch):
  """ShapeDtypeStructs of a batch's (z, real images)."""
  return (jax.ShapeDtypeStruct((batch, config.z_dim), jnp.float32),
          jax.ShapeDtypeStruct((batch, config.image_size, config.image_size, 3), jnp.float32))


def _on(device, tree):
  """Abstract copies of `tree`'s arrays placed on `device` (None: as they are)."""
  if device is None:
    return tree
  sharding = jax.sharding.SingleDeviceSharding(device)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def largest_batch(config, step, state, batch: int, budget_bytes: float, max_batch=None,
                  device=None, known=None):
  """(largest batch within the budget or None, probes): the iteration compiled (for `device`,
  None: this host) at doubling batches from `batch` until XLA's total exceeds `budget_bytes` or
  the batch passes `max_batch`; `known`: {batch: accounting} already compiled."""
  largest, probes = None, []
  while max_batch is None or batch <= max_batch:
    acct = (known or {}).get(batch) or measure.compile_fn(
        step, *_on(device, (*state, *inputs(config, batch))))[1]
    fits = acct["total_bytes"] <= budget_bytes
    probes.append({"batch": batch, "total_bytes": acct["total_bytes"],
                   "temp_bytes": acct["temp_bytes"], "fits": fits})
    print(f"batch {batch}: {acct['total_bytes'] / GIB:.2f} GiB", flush=True)
    if not fits:
      break
    largest, batch = batch, batch * 2
  return largest, probes


def _target(name: str, budget_gib: float):
  """(device, budget bytes, compiler) of "cpu" (this host, `budget_gib`) or a GPU target
  config's compile-only device (its memory as CUDA reports it)."""
  if name == "cpu":
    return None, budget_gib * GIB, "XLA:CPU"
  (device,) = devices.gpu_devices(name)
  return device, devices.lookup(device.device_kind).memory_bytes, f"XLA:GPU, {device.device_kind}"


def run(config) -> dict:
  rows, programs = {}, {}
  searches = [dict(s) for s in config.get("largest_batch", ())]
  targets = [_target(s["target"], s.get("budget_gib", 0)) for s in searches]  # fail fast
  for variant in config.variants if config.get("timed", True) else ():
    g, d, source = build(config, variant)
    (fwd, fstate), (step, tstate) = forward_fn(g, d), train_fn(g, d)
    row = rows[variant] = dict(variant=variant, source=source, params_g=measure.params_of(g),
                               params_d=measure.params_of(d))
    z, real = inputs(config, config.batch)
    for program, fn, args in (("forward", fwd, (*fstate, z)), ("train", step, (*tstate, z, real))):
      compiled, row[program] = measure.compile_fn(fn, *args)
      programs[(variant, program)] = (compiled, measure.concrete(args))
    row["largest_batch"], row["probes"] = largest_batch(
        config, step, tstate, config.batch, config.memory_budget_gib * GIB, config.max_batch,
        known={config.batch: row["train"]})
    row.update(madd_forward=measure.madd_of(fwd, *fstate, z) / config.batch,
               paper=dict(config.paper).get(variant))
  measure.time_programs(rows, programs, config)
  for search, (device, budget, compiler) in zip(searches, targets):
    sub = ml_collections.ConfigDict({**config.to_dict(), **search})
    search.update(compiler=compiler, budget_gib=budget / GIB, rows=[])
    for variant in config.variants:
      g, d, _ = build(sub, variant)
      largest, probes = largest_batch(sub, *train_fn(g, d), search["start"], budget,
                                      device=device)
      search["rows"].append({"variant": variant, "largest_batch": largest, "probes": probes})
  return {"rows": list(rows.values()), "largest_batch": searches}


def _largest(r) -> str:
  if r["largest_batch"] is None:
    return f"< {r['probes'][0]['batch']}"
  return f"≥ {r['largest_batch']}" if r["probes"][-1]["fits"] else str(r["largest_batch"])


def markdown(config, result, machine: str) -> str:
  rows, b, paper = result["rows"], config.batch, dict(config.paper)
  bp = paper[config.baseline]
  lines = measure.header(config, machine, config.about if rows else "")
  if rows:
    lines += measure.md_table({
        "model": lambda r: LABELS[r["variant"]], "source": lambda r: r["source"],
        "params G + D": lambda r: f"{(r['params_g'] + r['params_d']) / 1e6:.2f}M",
        "MAdd / image (fwd)": lambda r: f"{r['madd_forward'] / 1e9:.2f}G",
        "forward s / 30k img": lambda r: f"{r['forward']['time_s'] * 30000 / b:.2f}",
        "paper s / 30k": lambda r: f"{r['paper'][0]:.3f}",
        "fwd speed-up": lambda r: f"{r['forward']['speedup']:.2f}×",
        "paper fwd speed-up": lambda r: f"{bp[0] / r['paper'][0]:.2f}×",
        "backward s / 10 batches": lambda r: f"{10 * r['train']['time_s']:.2f}",
        "paper s / 10 batches": lambda r: f"{r['paper'][1]:.3f}",
        "bwd speed-up": lambda r: f"{r['train']['speedup']:.2f}×",
        "paper bwd speed-up": lambda r: f"{bp[1] / r['paper'][1]:.2f}×",
        f"train memory at {b} (MB)": lambda r: f"{r['train']['total_bytes'] / MB:.0f}",
        "largest batch ≤ budget": _largest, "paper largest": lambda r: r["paper"][2]}, rows)
    batches = max((r["probes"] for r in rows), key=len)
    lines += ["", "Training-iteration memory (XLA total, GiB) by batch:", "",
              "| model | " + " | ".join(str(p["batch"]) for p in batches) + " |",
              "|---|" + "---|" * len(batches)]
    lines += [f"| {LABELS[r['variant']]} | " + " | ".join(
        f"{p['total_bytes'] / GIB:.2f}{'' if p['fits'] else ' (over)'}" for p in r["probes"])
        + " |" for r in rows]
  searches = [dict(s, **r) for s in result.get("largest_batch") or () for r in s["rows"]]
  if searches:
    lines += ["", "## Largest training batch by compiler", "",
              "The iteration compiled (never run) at doubling batches until XLA's total exceeds "
              "the budget: XLA:CPU's, or XLA:GPU's for a GPU target config (budget: its memory "
              "as CUDA reports it).", ""] + measure.md_table({
        "model": lambda r: LABELS[r["variant"]],
        "compiler (budget)": lambda r: f"{r['compiler']} ({r['budget_gib']:.2f} GiB)",
        "image, width": lambda r: f"{r['image_size']}², {r['width']}",
        "largest batch ≤ budget": _largest,
        "paper (GTX 1080 Ti, 11 GB, 64²)": lambda r: paper[r["variant"]][2],
        "GiB by batch": lambda r: ", ".join(
            f"{p['batch']}: {p['total_bytes'] / GIB:.2f}" for p in r["probes"])}, searches)
  return "\n".join(lines) + "\n"


def plot(config, result, path, machine: str) -> str | None:
  """isa_tables: speed-ups and largest batches, ours beside the paper's; no plot for the others."""
  del machine
  if config.table != "isa_tables":
    return None
  rows = result["rows"]
  base = rows[0]["paper"]
  largest = lambda v: float(str(v).replace("≥", "").strip())
  plots.grouped_bars(path, "Refined-SA Tables 2-3", [r["variant"].upper() for r in rows], [
      (f"{what} speed-up over SAGAN", {"paper": [base[i] / r["paper"][i] for r in rows],
                                       "ours": [r[key]["speedup"] for r in rows]})
      for i, what, key in ((0, "forward", "forward"), (1, "backward", "train"))] + [
          ("largest batch (paper: 11 GB GPU; ours: 11 GiB)", {
              "paper": [largest(r["paper"][2]) for r in rows],
              "ours": [r["largest_batch"] or 0 for r in rows]})])
  return plots.link("Plot (ours beside the paper's; paper's ≥ 1024 drawn at 1024)", path)
