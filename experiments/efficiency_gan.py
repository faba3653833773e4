"""Refined-SA Tables 2-3: SAGAN, ISAGAN and SGAN (generator + discriminator).

Run through `python -m experiments.efficiency --config=configs/efficiency/isa_tables.py`.

- Forward: evaluation-mode D(G(z)) for one batch, reported per batch and scaled
  to the paper's unit (seconds per 30k images).
- Backward: one training iteration — the discriminator's hinge loss on a real
  and a generated batch, then the generator's loss, each differentiated w.r.t.
  its network's parameters (no optimiser update) — per batch and scaled to the
  paper's unit (seconds per 10 batches).
- Largest batch: the training iteration is compiled (never run) at doubling
  batch sizes; the largest whose XLA memory (temporaries + arguments + outputs)
  stays within `memory_budget_gib` is reported — the paper's GTX 1080 Ti had
  11 GB.
Models: the registry's unconditional `sagan_generator` / `sagan_discriminator`
(attention_lab/models/sagan.py: SAGAN's residual G and D, spectral norm, the
context module at 32×32) at `config.image_size`, `config.width` and latent
`config.z_dim`; the paper's three models differ only there (Refined-SA Sec. 5.2):
SAGAN "sa", ISAGAN "refined", SGAN "conv" (the attention "replaced by
convolution layers"). `config.spectral_norm` (default True, SAGAN's) toggles
spectral normalisation. The paper ran the heykeetae DCGAN-style SAGAN instead
(attention at 16² and 32² in G, 8² and 4² in D): at width 16 ours matches its
cost (G + D 0.62 vs 0.64 GMAdd per 64² image) and its 64 channels at the 32²
attention; at SAGAN's width 64 the convolutions are 14× larger and the
attention is ~4% of the forward MAdd (SA 8.69G vs refined 8.34G per image).
"""

import jax
import jax.numpy as jnp
from flax import nnx

import attention_lab.models.sagan  # noqa: F401  (registers sagan_generator / sagan_discriminator)
from attention_lab import models
from experiments import measure
from experiments.measure import GIB, MB

ATTENTION = {"sagan": "sa", "isagan": "refined", "sgan": "conv"}


def build(config, variant: str, seed: int = 0):
  """(generator, discriminator, source) for "sagan" | "isagan" | "sgan"."""
  attention = ATTENTION[variant]
  kw = dict(num_classes=0, attention=attention, resolution=config.image_size,
            width=config.width, spectral_norm=config.get("spectral_norm", True))
  # unsafe_rbg keys: initial values do not change timings, and their initialisers compile far
  # faster than threefry's on a small CPU.
  rngs = lambda s: nnx.Rngs(jax.random.key(s, impl="unsafe_rbg"))
  g = models.create("sagan_generator", rngs=rngs(seed), latent_dim=config.z_dim, **kw)
  d = models.create("sagan_discriminator", rngs=rngs(seed + 1), **kw)
  return g, d, f"registry sagan_generator / sagan_discriminator (attention={attention!r})"


def forward_fn(g, d):
  """(forward(gstate, dstate, z) = D(G(z)) in evaluation mode, (gstate, dstate))."""
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


def inputs(config, batch, abstract=False):
  """(z, real images) of a batch; ShapeDtypeStructs when `abstract`."""
  shapes = ((batch, config.z_dim), (batch, config.image_size, config.image_size, 3))
  if abstract:
    return tuple(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)
  return (jax.random.normal(jax.random.key(0), shapes[0]),
          jax.random.uniform(jax.random.key(1), shapes[1], minval=-1, maxval=1))


def largest_batch(config, step, state, batch: int, budget_bytes: float, max_batch=None,
                  place=lambda tree: tree, known=None):
  """(largest batch within the budget or None, probes): the training iteration compiled
  (never run) at doubling batches from `batch` until XLA's total exceeds `budget_bytes` (or
  the batch `max_batch`); `place` gives the abstract arguments their device; `known`:
  {batch: accounting} already compiled."""
  largest, probes = None, []
  while max_batch is None or batch <= max_batch:
    acct = (known or {}).get(batch) or measure.compile_fn(
        step, *place((*state, *inputs(config, batch, abstract=True))))[1]
    fits = acct["total_bytes"] <= budget_bytes
    probes.append({"batch": batch, "total_bytes": acct["total_bytes"],
                   "temp_bytes": acct["temp_bytes"], "fits": fits})
    print(f"batch {batch}: {acct['total_bytes'] / GIB:.2f} GiB", flush=True)
    if not fits:
      break
    largest, batch = batch, batch * 2
  return largest, probes


def run(config) -> dict:
  rows, programs = {}, {}
  for variant in config.variants:
    g, d, source = build(config, variant)
    z, real = inputs(config, config.batch)
    fwd, fstate = forward_fn(g, d)
    fwd_compiled, fwd_acct = measure.compile_fn(fwd, *fstate, z)
    step, tstate = train_fn(g, d)
    step_compiled, step_acct = measure.compile_fn(step, *tstate, z, real)
    programs[(variant, "forward")] = (fwd_compiled, (*fstate, z))
    programs[(variant, "train")] = (step_compiled, (*tstate, z, real))
    largest, probes = largest_batch(config, step, tstate, config.batch,
                                    config.memory_budget_gib * GIB, config.max_batch,
                                    known={config.batch: step_acct})
    rows[variant] = dict(
        variant=variant, source=source, params_g=measure.params_of(g),
        params_d=measure.params_of(d), forward=fwd_acct, train=step_acct,
        largest_batch=largest, probes=probes,
        madd_forward=measure.madd_of(fwd, *fstate, z) / config.batch,
        paper=dict(config.paper).get(variant))
  for program in ("forward", "train"):
    chosen = {k: v for k, v in programs.items() if k[1] == program}
    for (variant, _), t in measure.time_side_by_side(
        chosen, config.repeats, config.min_sample_s).items():
      rows[variant][program]["time_s"] = t["time_s"]
      rows[variant][program]["time_samples"] = t["samples"]
  base = rows[config.baseline]
  for r in rows.values():
    for program in ("forward", "train"):
      r[program]["speedup"] = base[program]["time_s"] / r[program]["time_s"]
    print(r, flush=True)
  return {"rows": list(rows.values())}


def markdown(config, result, machine_line: str) -> str:
  b = config.batch
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine_line}. Command: `{measure.command_of(config)}`.", "",
      f"Batch {b}, {config.image_size}×{config.image_size} images, z of {config.z_dim}, width "
      f"{config.width}, float32. Forward = "
      "evaluation-mode D(G(z)); backward = one training iteration (D hinge loss on real + "
      "fake, then G loss; gradients, no optimiser). Times are medians of "
      f"{config.repeats} interleaved samples, scaled to the paper's units (forward: per 30k "
      "images = t·30000/batch; backward: per 10 batches = 10·t). Memory: XLA memory_analysis "
      "of the training iteration (temporaries + arguments + outputs). Largest batch: "
      f"doubling from {b} while that memory ≤ {config.memory_budget_gib} GiB (the paper: "
      "'ok'/'no' on one GTX 1080 Ti, 11 GB). Paper: Refined-SA Tables 2-3 (PyTorch, GPU).", "",
      "| model | source | params G + D | MAdd / image (fwd) | forward s / 30k img | paper | "
      "speed-up | paper speed-up | backward s / 10 batches | paper | speed-up | "
      f"paper speed-up | train memory at {b} (MB) | largest batch ≤ budget | paper largest |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  base_paper = dict(config.paper)[config.baseline]
  for r in result["rows"]:
    p = r["paper"]
    f, t = r["forward"], r["train"]
    fwd30k = f["time_s"] * 30000 / b
    bwd10 = 10 * t["time_s"]
    largest = r["largest_batch"]
    if largest is None:
      largest_s = f"< {r['probes'][0]['batch']}"
    else:
      largest_s = f"≥ {largest}" if r["probes"][-1]["fits"] else str(largest)
    lines.append(
        f"| {measure.LABELS[r['variant']]} | {r['source']} | "
        f"{(r['params_g'] + r['params_d']) / 1e6:.2f}M | {r['madd_forward'] / 1e9:.2f}G | "
        f"{fwd30k:.2f} | {p[0]:.3f} | {f['speedup']:.2f}× | {base_paper[0] / p[0]:.2f}× | "
        f"{bwd10:.2f} | {p[1]:.3f} | {t['speedup']:.2f}× | {base_paper[1] / p[1]:.2f}× | "
        f"{t['total_bytes'] / MB:.0f} | {largest_s} | {p[2]} |")
  lines += ["", "Training-iteration memory (XLA total, GiB) by batch:", "",
            "| model | " + " | ".join(str(p["batch"]) for p in max(
                (r["probes"] for r in result["rows"]), key=len)) + " |",
            "|---|" + "---|" * max(len(r["probes"]) for r in result["rows"])]
  for r in result["rows"]:
    lines.append(f"| {measure.LABELS[r['variant']]} | " + " | ".join(
        f"{p['total_bytes'] / GIB:.2f}{'' if p['fits'] else ' (over)'}" for p in r["probes"])
        + " |")
  return "\n".join(lines) + "\n"
