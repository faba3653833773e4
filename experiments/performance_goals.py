"""The library's performance goals, reported as met / not met with numbers (benchmarks, not tests).

  python -m experiments.efficiency --config=configs/efficiency/performance_goals.py

Writes experiments/results/performance_goals.{md,json}. `config.goals` picks the
goals to measure; the others are copied from the saved JSON (so one goal can be
re-measured alone). Every goal measures the current library against a floor of
the hardware or the paper, in the same run:

1. Ratios of SAO Table 2 / KAO Table 1 (read from their results JSON): every
   efficient operator's speed-up over Attn and memory saving ≥ the paper's.
2. Close to the hardware: SAO at 56²×256 and KAO_QKV at 8×56²×8 take ≤ 3× one
   elementwise read + write pass over the same input.
3. Ham NMF inference at 1×512×128×128 takes ≤ 1.5× its compute floor: XLA
   FLOPs (solver loop counted K times) / the FLOP/s of a large matmul.
4. Ham one-step training memory (XLA temporaries of forward + backward) does
   not grow with the number of steps K (BPTT beside it).
5. Query-chunked relative attention trains (forward + backward, batch 1,
   8 heads × 32) at 112×112 within 4 GiB of XLA temporaries; the unchunked
   form is compiled for its memory_analysis only (~19 GiB), never run.
6. The ham (NMF, inference) ≥ 2× faster than the official PyTorch NMF2D
   (optional `torch`; skipped without it).
"""

import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab import ops
from experiments import measure

GIB = measure.GIB
MB = measure.MB


# ----------------------------------------------------------------------------------------------
# Goals.


def goal_table_ratios(config, out_dir: pathlib.Path) -> dict:
  """Goal 1 from the SAO / KAO results JSON."""
  rows = []
  for table in config.ratio_tables:
    path = out_dir / f"{table}.json"
    if not path.exists():
      rows.append({"table": table, "missing": str(path)})
      continue
    data = json.loads(path.read_text())
    for r in data["rows"]:
      p = r.get("paper") or {}
      if r["operator"] == data["config"]["baseline"] or p.get("speedup") is None:
        continue
      rows.append(dict(
          table=table, size=r["size"], operator=r["operator"],
          speedup=r["speedup"], paper_speedup=p["speedup"],
          saving_total=100 * r["memory_saving"], saving_temp=100 * r["temp_saving"],
          paper_saving=p.get("saving"),
          bound_total=100 * (1 - (r["arg_bytes"] + r["out_bytes"]) / (
              r["total_bytes"] / (1 - r["memory_saving"]) if r["memory_saving"] < 1 else 1)),
          speed_met=r["speedup"] >= p["speedup"],
          memory_met_total=p.get("saving") is None or 100 * r["memory_saving"] >= p["saving"],
          memory_met_temp=p.get("saving") is None or 100 * r["temp_saving"] >= p["saving"]))
  return {"rows": rows}


def goal_hardware(config) -> dict:
  """Goal 2: SAO / KAO_QKV time against one elementwise pass, in the same interleaved rounds."""
  from experiments import efficiency  # pylint: disable=g-import-not-at-top
  results = {}
  for name, (batch, side, channels) in (("sao", config.sao_size), ("kao_qkv", config.kao_size)):
    x = jax.random.normal(jax.random.key(0), (batch, side, side, 1, channels), jnp.float32)
    fns = {"library": efficiency.OPERATORS[name], "pass": efficiency.elementwise_pass}
    programs, accts, hlo = {}, {}, {}
    for key, fn in fns.items():
      compiled, accts[key] = measure.compile_fn(fn, x)
      programs[key] = (compiled, (x,))
      text = compiled.as_text()
      hlo[key] = {k: text.count(f" {k}(") for k in ("fusion", "dot", "transpose", "copy",
                                                     "reduce")}
    times = measure.time_side_by_side(programs, config.repeats, config.min_sample_s)
    r = dict(size=f"{batch}×{side}²×{channels}", hlo=hlo,
             **{f"{k}_time_s": t["time_s"] for k, t in times.items()},
             **{f"{k}_bytes_accessed": a["xla_bytes_accessed"] for k, a in accts.items()},
             **{f"{k}_temp_bytes": a["temp_bytes"] for k, a in accts.items()})
    for key in fns:
      r[f"{key}_over_pass"] = r[f"{key}_time_s"] / r["pass_time_s"]
    r["met"] = r["library_over_pass"] <= config.pass_ratio_goal
    results[name] = r
    print(name, {k: v for k, v in r.items() if k != "hlo"}, flush=True)
  return results


def _matmul(config):
  """(compiled n×n matmul, its argument, its FLOPs): the machine's compute rate when timed."""
  n = config.matmul_size
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  compiled, _ = measure.compile_fn(lambda a: a @ a, a)
  return compiled, a, 2.0 * n**3


def goal_ham_floor(config) -> dict:
  """Goal 3: Ham NMF inference time against its XLA FLOPs / large-matmul FLOP/s.

  The pieces of the layer at the same shapes, in the same rounds, show where the
  time above the floor goes.
  """
  from experiments import efficiency_modules  # pylint: disable=g-import-not-at-top
  c = config.ham
  model = efficiency_modules.build_module("ham_nmf", c.channels, c)
  fn, state = measure.inference_fn(model)
  x = jax.random.uniform(jax.random.key(0), (1, c.side, c.side, c.channels), jnp.float32)
  compiled, acct = measure.compile_fn(fn, state, x)
  with measure.unrolled_loops():  # FLOPs with every solver step counted
    flops = measure.compile_fn(fn, state, x)[1]["xla_flops"]
  mm, a, mm_flops = _matmul(config)
  programs = {"layer": (compiled, (state, x)), "matmul": (mm, (a,))}
  n, d, r = c.side * c.side, c.ham_dim, c.ham_rank
  tok = jax.random.uniform(jax.random.key(1), (1, n, d), jnp.float32)
  bases = ops.random_bases(jax.random.key(2), 1, d, r)
  rows = jax.random.uniform(jax.random.key(3), (n, c.channels), jnp.float32)
  solver = lambda t, b: ops.nmf(t, b, steps=c.ham_steps)
  pieces = {
      "nmf solver (K steps + final codes update)": (solver, (tok, bases)),
      "lower bread: GEMM + ReLU on rows (N·C·d)": (
          lambda t, w, b: jax.nn.relu(t @ w + b), (rows, jnp.ones((c.channels, d)) / d,
                                                   jnp.ones((d,)))),
      "x @ bases (N·d·r)": (lambda t, b: t @ b, (tok, bases)),
      "upper bread: codes @ (basesᵀ W_u) (N·r·C)": (
          lambda t, p: t @ p, (rows[:, :r], jnp.ones((r, c.channels))))}
  piece_acct = {}
  for key, (f, args) in pieces.items():
    pc, piece_acct[key] = measure.compile_fn(f, *args)
    programs[key] = (pc, args)
  piece_acct["nmf solver (K steps + final codes update)"]["xla_flops"] = 2.0 * measure.madd_of(
      solver, tok, bases)  # loops × trip count
  times = measure.time_side_by_side(programs, config.repeats, 0.0)
  rate = mm_flops / times["matmul"]["time_s"]
  time_s = times["layer"]["time_s"]
  result = dict(
      size=f"1×{c.channels}×{c.side}×{c.side}", steps=c.ham_steps,
      matmul_size=config.matmul_size,
      matmul_flops_per_s=rate, xla_flops=flops, xla_flops_uncorrected=acct["xla_flops"],
      temp_bytes=acct["temp_bytes"], time_s=time_s, floor_s=flops / rate,
      ratio=time_s * rate / flops, met=time_s * rate / flops <= config.floor_ratio_goal,
      pieces={k: dict(time_s=times[k]["time_s"], flops=p["xla_flops"],
                      flops_per_s=p["xla_flops"] / times[k]["time_s"], temp_bytes=p["temp_bytes"],
                      xla_bytes_accessed=p["xla_bytes_accessed"])
              for k, p in piece_acct.items()})
  print("ham floor", result, flush=True)
  return result


def goal_ham_memory(config) -> dict:
  """Goal 4: Ham training temporaries against K, one-step gradient vs BPTT."""
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  c = config.ham
  rows = []
  x = jax.ShapeDtypeStruct((1, c.side, c.side, c.channels), jnp.float32)
  for steps in config.memory_steps:
    row = {"steps": steps}
    for gradient in ("one_step", "bptt"):
      model = layers.Hamburger(c.channels, ham="nmf", dim=c.ham_dim, rank=c.ham_rank,
                               train_steps=steps, eval_steps=steps, gradient=gradient,
                               rngs=nnx.Rngs(0))
      fn, params, rest = measure.training_fn(model)
      _, acct = measure.compile_fn(fn, params, rest, x, x)
      row[gradient] = acct["temp_bytes"]
    rows.append(row)
    print("ham memory", row, flush=True)
  one = [r["one_step"] for r in rows]
  return {"rows": rows, "met": max(one) <= min(one) * (1 + config.memory_growth_tolerance),
          "growth": max(one) / min(one) - 1}


def goal_relative(config) -> dict:
  """Goal 5: relative attention forward + backward at 112², chunked vs unchunked."""
  side, heads, dim = config.relative_side, config.relative_heads, config.relative_dim
  q = jax.ShapeDtypeStruct((1, side, side, heads, dim), jnp.float32)
  rel = jax.ShapeDtypeStruct((2 * side - 1, dim), jnp.float32)

  def grad_fn(chunk):
    return measure.grad_of_square_sum(
        lambda *a: ops.relative_attention_2d(*a, query_chunk_size=chunk), (0, 1, 2, 3, 4))

  result = {"size": f"1×{side}²×{heads}×{dim}", "chunk": config.relative_chunk}
  for label, chunk in (("chunked", config.relative_chunk), ("unchunked", None)):
    compiled, acct = measure.compile_fn(grad_fn(chunk), q, q, q, rel, rel)
    result[label] = acct
    if label == "chunked" and config.relative_run:
      args = [jax.random.normal(jax.random.key(i), s.shape, s.dtype) * 0.1
              for i, s in enumerate((q, q, q, rel, rel))]
      start = time.perf_counter()
      grads = jax.block_until_ready(compiled(*args))
      result["chunked_run_s"] = time.perf_counter() - start
      result["chunked_grads_finite"] = bool(all(jnp.all(jnp.isfinite(g)) for g in grads))
    print("relative", label, acct, flush=True)
  result["met"] = result["chunked"]["temp_bytes"] <= config.relative_budget_gib * GIB
  return result


def _official_nmf2d(torch, x, rank, steps, bases=None, reconstruct=True):
  """The official NMF2D forward in evaluation (Enjoy-Hamburger seg/HamNet/hamburger/ham.py),
  written from its equations in torch on the CPU: x (B, C, H, W) viewed as (B, D, N); bases
  drawn by torch.rand and L2-normalised over D (unless given); codes softmax(xᵀbases) over R;
  `steps` multiplicative updates (codes, then bases) under no_grad; one more codes update
  (compute_coef); the reconstruction bases·codesᵀ back to (B, C, H, W)."""
  b, c, h, w = x.shape
  xv = x.view(b, c, h * w)
  xt = xv.transpose(1, 2)
  if bases is None:
    bases = torch.nn.functional.normalize(torch.rand((b, c, rank), device=x.device), dim=1)
  codes = torch.softmax(torch.bmm(xt, bases), dim=-1)

  def codes_update(codes, bases):
    return codes * torch.bmm(xt, bases) / (codes.bmm(bases.transpose(1, 2).bmm(bases)) + 1e-6)

  for _ in range(steps):
    codes = codes_update(codes, bases)
    bases = bases * torch.bmm(xv, codes) / (bases.bmm(codes.transpose(1, 2).bmm(codes)) + 1e-6)
  codes = codes_update(codes, bases)
  if not reconstruct:
    return bases, codes
  return torch.bmm(bases, codes.transpose(1, 2)).view(b, c, h, w)


def goal_ham_official(config) -> dict:
  """Goal 6: the ham (NMF, inference, reconstruction included) against the official PyTorch
  NMF2D, interleaved in the same rounds, with our XLA FLOPs and floor."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    return {"skipped": "torch is not installed (optional, benchmark only: pip install torch)"}
  c = config.ham
  side, d, r, steps = c.side, c.ham_dim, c.ham_rank, c.ham_steps
  n = side * side
  x = jax.random.uniform(jax.random.key(0), (1, side, side, d), jnp.float32)

  def ours(x, factors_only=False):
    bases, codes = ops.nmf(x.reshape(1, n, d), ops.random_bases(jax.random.key(0), 1, d, r),
                           steps=steps)
    if factors_only:
      return bases, codes
    return (codes @ jnp.swapaxes(bases, 1, 2)).reshape(x.shape)

  programs, flops = {}, {}
  for label, fn in (("ours", ours), ("ours, factors only", lambda x: ours(x, True))):
    compiled, _ = measure.compile_fn(fn, x)
    with measure.unrolled_loops():
      flops[label] = measure.compile_fn(fn, x)[1]["xla_flops"]
    programs[label] = (compiled, (x,))
  # On CUDA when torch has it (the paper's setting), else on the CPU; a CUDA call is timed
  # to its end (synchronize), as ours is by block_until_ready.
  device = "cuda" if torch.cuda.is_available() else "cpu"
  xt = torch.from_numpy(np.array(jnp.moveaxis(x, 3, 1))).to(device)

  def official(x, reconstruct=True):
    with torch.no_grad():
      out = _official_nmf2d(torch, x, r, steps, reconstruct=reconstruct)
    if device == "cuda":
      torch.cuda.synchronize()
    return out

  programs["official NMF2D (torch)"] = (official, (xt,))
  programs["official, factors only"] = (lambda x: official(x, False), (xt,))
  mm, a, mm_flops = _matmul(config)
  programs["matmul"] = (mm, (a,))
  # Same values from the same bases (float32 on both sides).
  bases = ops.random_bases(jax.random.key(0), 1, d, r)
  with torch.no_grad():
    theirs = _official_nmf2d(torch, xt, r, steps,
                             torch.from_numpy(np.array(bases)).to(device)).cpu().numpy()
  mine = jnp.moveaxis(programs["ours"][0](x), 3, 1)
  rel = float(jnp.max(jnp.abs(mine - theirs)) / jnp.max(jnp.abs(theirs)))
  times = measure.time_side_by_side(programs, config.repeats, 0.0)
  rate = mm_flops / times["matmul"]["time_s"]
  t = {k: v["time_s"] for k, v in times.items()}
  result = dict(
      size=f"1×{d}×{side}×{side}", rank=r, steps=steps, torch=torch.__version__,
      torch_device=device,
      torch_threads=torch.get_num_threads(), matmul_flops_per_s=rate,
      xla_flops=flops["ours"], xla_flops_factors=flops["ours, factors only"],
      floor_s=flops["ours"] / rate, floor_factors_s=flops["ours, factors only"] / rate,
      ours_s=t["ours"], ours_factors_s=t["ours, factors only"],
      official_s=t["official NMF2D (torch)"], official_factors_s=t["official, factors only"],
      speedup=t["official NMF2D (torch)"] / t["ours"],
      speedup_factors=t["official, factors only"] / t["ours, factors only"],
      max_rel_difference=rel, load_average=os.getloadavg())
  result["met"] = result["speedup"] >= config.official_speedup_goal
  print("ham official", result, flush=True)
  return result


GOALS = {"table_ratios": goal_table_ratios, "hardware": goal_hardware,
         "ham_floor": goal_ham_floor, "ham_memory": goal_ham_memory, "relative": goal_relative,
         "ham_official": goal_ham_official}


def run(config) -> dict:
  out_dir = measure.out_dir_of(config)
  unknown = set(config.goals) - set(GOALS)
  if unknown:
    raise ValueError(f"config.goals must be a subset of {tuple(GOALS)}, got {sorted(unknown)}")
  path = out_dir / f"{config.table}.json"
  previous = json.loads(path.read_text()) if path.exists() else {}
  result = {}
  for name, goal in GOALS.items():
    if name in config.goals:
      result[name] = goal(config, out_dir) if name == "table_ratios" else goal(config)
    elif name in previous:
      result[name] = previous[name]
    elif name == "ham_official":  # optional (torch); the report says it was not measured
      result[name] = {"skipped": f"not measured in this run or a previous one ({path})"}
    else:
      raise ValueError(f"goal {name!r} is neither in config.goals nor in {path}")
  return result


# ----------------------------------------------------------------------------------------------
# Report.


def _verdict(ok: bool) -> str:
  return "**met**" if ok else "**not met**"


def markdown(config, result, machine_line: str) -> str:
  lines = [f"# {config.title}", "",
           f"Measured on {machine_line}. Command: `python -m experiments.efficiency "
           f"--config=configs/efficiency/{config.table}.py`. Times: medians of "
           f"{config.repeats} interleaved samples after warm-up in one run; memory: XLA "
           "memory_analysis. Benchmarks, not tests.", ""]
  ratios = result["table_ratios"]["rows"]
  lines += ["## 1. Speed-up and memory saving against Attn ≥ the paper's (SAO Table 2, KAO "
            "Table 1)", "",
            "Memory saving on XLA's total (temporaries + input + output) and on temporaries "
            "only. 'bound' is the largest total saving any operator can reach: the input and "
            "the output are the same for every operator and cannot be saved.", "",
            "| table | input | operator | speed-up | paper | speed | saved total | bound | "
            "saved temp | paper saved | memory (total / temp) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in ratios:
    if "missing" in r:
      lines.append(f"| {r['table']} | not measured: {r['missing']} missing | | | | | | | | | |")
      continue
    ps = "" if r["paper_saving"] is None else f"{r['paper_saving']:.2f}%"
    lines.append(
        f"| {r['table']} | {r['size']} | {measure.LABELS[r['operator']]} | "
        f"{r['speedup']:.2f}× | {r['paper_speedup']:.2f}× | {_verdict(r['speed_met'])} | "
        f"{r['saving_total']:.2f}% | {r['bound_total']:.2f}% | {r['saving_temp']:.2f}% | {ps} | "
        f"{_verdict(r['memory_met_total'])} / {_verdict(r['memory_met_temp'])} |")
  lines += ["", f"## 2. Close to the hardware: ≤ {config.pass_ratio_goal}× one elementwise pass",
            "", "The operator and the pass (x·2) timed in the same interleaved rounds; the ratio "
            "to the pass is the measure (on a shared machine absolute times drift).", "",
            "| operator | input | pass ms | operator ms | / pass | goal | XLA bytes accessed MB "
            "(pass / operator) | temp MB | HLO ops |", "|---|---|---|---|---|---|---|---|---|"]
  for name, r in result["hardware"].items():
    ops_ = ", ".join(f"{v} {k}" for k, v in r["hlo"]["library"].items() if v)
    lines.append(
        f"| {measure.LABELS[name]} | {r['size']} | {1e3 * r['pass_time_s']:.4f} | "
        f"{1e3 * r['library_time_s']:.4f} | {r['library_over_pass']:.2f}× | "
        f"{_verdict(r['met'])} | {r['pass_bytes_accessed'] / MB:.2f} / "
        f"{r['library_bytes_accessed'] / MB:.2f} | {r['library_temp_bytes'] / MB:.2f} | {ops_} |")
  hf = result["ham_floor"]
  lines += ["", f"## 3. Ham NMF inference ≤ {config.floor_ratio_goal}× its compute floor", "",
            f"{_verdict(hf['met'])}: {hf['ratio']:.2f}×. Input {hf['size']}, K = {hf['steps']}, "
            f"evaluation mode: {1e3 * hf['time_s']:.1f} ms against a floor of "
            f"{1e3 * hf['floor_s']:.1f} ms = {hf['xla_flops'] / 1e9:.2f} GFLOP (loops unrolled; "
            f"cost_analysis counts a loop body once: {hf['xla_flops_uncorrected'] / 1e9:.2f} G) at "
            f"the {hf['matmul_size']}² matmul's {hf['matmul_flops_per_s'] / 1e9:.0f} GFLOP/s in "
            f"this run; {hf['temp_bytes'] / MB:.1f} MB of temporaries. The layer's pieces at the "
            "same shapes, same rounds:", "",
            "| piece | GFLOP | temp MB | XLA bytes accessed MB (loop body once) | time ms | "
            "GFLOP/s |", "|---|---|---|---|---|---|"]
  for k, p in hf["pieces"].items():
    lines.append(f"| {k} | {p['flops'] / 1e9:.2f} | {p['temp_bytes'] / MB:.1f} | "
                 f"{p['xla_bytes_accessed'] / MB:.1f} | {1e3 * p['time_s']:.1f} | "
                 f"{p['flops_per_s'] / 1e9:.0f} |")
  hm = result["ham_memory"]
  lines += ["", "## 4. Ham one-step training memory does not grow with K", "",
            f"Hamburger (NMF) forward + backward at {hf['size']}, XLA temporaries. "
            f"{_verdict(hm['met'])}: one-step grows by {100 * hm['growth']:.2f}% from the "
            f"smallest to the largest K (tolerance {100 * config.memory_growth_tolerance:.0f}%).",
            "", "| K | one-step temp MB | BPTT temp MB |", "|---|---|---|"]
  for r in hm["rows"]:
    lines.append(f"| {r['steps']} | {r['one_step'] / MB:.1f} | {r['bptt'] / MB:.1f} |")
  rl = result["relative"]
  run_note = ""
  if "chunked_run_s" in rl:
    run_note = (f" The chunked program was run once: {rl['chunked_run_s']:.1f} s, gradients "
                f"finite: {rl['chunked_grads_finite']}.")
  lines += ["", f"## 5. Query-chunked relative attention trains at {rl['size']} within "
            f"{config.relative_budget_gib} GiB", "",
            f"{_verdict(rl['met'])}: forward + backward (gradients w.r.t. q, k, v and both "
            f"tables), query_chunk_size = {rl['chunk']}.{run_note} The unchunked program is "
            "compiled for its memory analysis only.", "",
            "| form | temp GiB | total GiB |", "|---|---|---|",
            f"| chunked ({rl['chunk']}) | {rl['chunked']['temp_bytes'] / GIB:.2f} | "
            f"{rl['chunked']['total_bytes'] / GIB:.2f} |",
            f"| unchunked | {rl['unchunked']['temp_bytes'] / GIB:.2f} | "
            f"{rl['unchunked']['total_bytes'] / GIB:.2f} |"]
  ho = result.get("ham_official")
  if ho is not None:
    lines += ["", f"## 6. Ham NMF ≥ {config.official_speedup_goal}× faster than the official "
              f"PyTorch NMF2D (torch on {(ho.get('torch_device') or 'cpu').upper()})", ""]
    if "skipped" in ho:
      lines.append(f"Not measured: {ho['skipped']}.")
    else:
      lines += [
          f"{_verdict(ho['met'])}: {ho['speedup']:.2f}× (factors alone {ho['speedup_factors']:.2f}×)."
          f" The ham alone at {ho['size']} (NCHW for torch, NHWC for us), R = {ho['rank']}, "
          f"K = {ho['steps']}, inference: bases drawn, K steps, the final codes update, the "
          f"reconstruction. torch {ho['torch']} ({ho['torch_threads']} threads, under no_grad), "
          "written from the official ham.py's equations (`performance_goals._official_nmf2d`); ours is "
          "`ops.nmf` + codes·basesᵀ under jit. Both timed in the same interleaved rounds "
          f"(medians of {config.repeats}); load average at the end "
          f"{', '.join(f'{v:.1f}' for v in ho['load_average'])} on {os.cpu_count()} cores. "
          f"From the same bases, max |ours − official| / max |official| = "
          f"{ho['max_rel_difference']:.1e} (float32). Floor: XLA FLOPs (loops unrolled) at "
          f"the {config.matmul_size}² matmul's {ho['matmul_flops_per_s'] / 1e9:.0f} GFLOP/s.", "",
          "| program | GFLOP | floor ms | time ms | time / floor |", "|---|---|---|---|---|",
          f"| official NMF2D (torch), reconstruction included | | | "
          f"{1e3 * ho['official_s']:.1f} | |",
          f"| official, factors only | | | {1e3 * ho['official_factors_s']:.1f} | |",
          f"| ours, reconstruction included | {ho['xla_flops'] / 1e9:.2f} | "
          f"{1e3 * ho['floor_s']:.1f} | {1e3 * ho['ours_s']:.1f} | "
          f"{ho['ours_s'] / ho['floor_s']:.2f}× |",
          f"| ours, factors only | {ho['xla_flops_factors'] / 1e9:.2f} | "
          f"{1e3 * ho['floor_factors_s']:.1f} | {1e3 * ho['ours_factors_s']:.1f} | "
          f"{ho['ours_factors_s'] / ho['floor_factors_s']:.2f}× |"]
  return "\n".join(lines) + "\n"
