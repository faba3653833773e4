"""Measuring helpers shared by the efficiency tables (experiments/efficiency.py).

XLA accounting of a compiled program (cost_analysis flops, memory_analysis
temporaries / arguments / outputs), multiply-adds of a traced function,
interleaved side-by-side timing (median of samples after warm-up, each ended
by jax.block_until_ready), parameter counts, and NNX inference / training
step builders. No flags are defined here, so table modules can import it.
"""

import math
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from experiments.model_stats import count_madd

RESULTS = pathlib.Path(__file__).parent / "results"
MB = 1e6
GIB = 2**30

LABELS = {"attn": "Attn", "attn_pool": "Attn+Pool", "attn_mean": "Attn1/N", "sao": "SAO",
          "kao_kv": "KAO_KV", "kao_qkv": "KAO_QKV", "sa": "SA", "a2": "A²",
          "ham_cd": "Ham (CD)", "ham_nmf": "Ham (NMF)", "sagan": "SAGAN", "isagan": "ISAGAN",
          "sgan": "SGAN", "sa_fused": "SA (fused attention)"}


def output_stem(config) -> str:
  """The table's file name: `config.table`, with the compute dtype appended unless float32."""
  dtype = config.get("dtype", "float32")
  return config.table if dtype == "float32" else f"{config.table}_{dtype}"


def command_of(config) -> str:
  """The command that measures the table (the dtype override where it is not float32)."""
  dtype = config.get("dtype", "float32")
  return (f"python -m experiments.efficiency --config=configs/efficiency/{config.table}.py"
          + ("" if dtype == "float32" else f" --config.dtype={dtype}"))


# ----------------------------------------------------------------------------------------------
# Measuring: XLA accounting and side-by-side timing.


def machine() -> dict:
  """What the numbers were measured on."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  dev = jax.devices()[0]
  return {"cpu": cpu, "cores": os.cpu_count(), "device": f"{dev.platform}:{dev.device_kind}",
          "jax": jax.__version__, "python": platform.python_version()}


def machine_line(m: dict | None = None) -> str:
  m = m or machine()
  return f"{m['cpu']}, {m['cores']} cores, device {m['device']}, jax {m['jax']}"


def compile_fn(fn: Callable, *args):
  """Compiles fn for args (arrays or ShapeDtypeStructs); returns (compiled, XLA accounting)."""
  compiled = jax.jit(fn).lower(*args).compile()
  mem = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})
  acct = {"xla_flops": float(cost.get("flops", float("nan"))),
          "xla_bytes_accessed": float(cost.get("bytes accessed", float("nan"))),
          "temp_bytes": int(mem.temp_size_in_bytes),
          "arg_bytes": int(mem.argument_size_in_bytes),
          "out_bytes": int(mem.output_size_in_bytes)}
  acct["total_bytes"] = acct["temp_bytes"] + acct["arg_bytes"] + acct["out_bytes"]
  return compiled, acct


def madd_of(fn: Callable, *args) -> int:
  """Multiply-adds of the dot products and convolutions of fn's jaxpr (loops × trip count)."""
  return count_madd(jax.make_jaxpr(fn)(*args).jaxpr)


def _sample(compiled, args, inner: int) -> float:
  start = time.perf_counter()
  out = None
  for _ in range(inner):
    out = compiled(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / inner


def time_side_by_side(programs: dict, repeats: int, min_sample_s: float = 0.01,
                      warmup: int = 1) -> dict:
  """{name: (compiled, args)} → {name: {time_s (median), samples, inner}}.

  Warm-up, then per program an inner count so one sample lasts ≥ min_sample_s,
  then `repeats` interleaved rounds (every program once per round), so slow
  drifts of a shared machine's load hit all programs alike.
  """
  inner = {}
  for name, (compiled, args) in programs.items():
    for _ in range(max(1, warmup)):
      _sample(compiled, args, 1)
    once = min(_sample(compiled, args, 1) for _ in range(2)) if min_sample_s > 0 else 1.0
    inner[name] = max(1, min(1000, math.ceil(min_sample_s / max(once, 1e-7))))
  samples = {name: [] for name in programs}
  for _ in range(repeats):
    for name, (compiled, args) in programs.items():
      samples[name].append(_sample(compiled, args, inner[name]))
  return {name: {"time_s": statistics.median(s), "samples": s, "inner": inner[name]}
          for name, s in samples.items()}


def params_of(model) -> int:
  return sum(math.prod(v.shape) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))


def inference_fn(model):
  """(fn(state, x) -> y, state) of a module in evaluation mode."""
  model.eval()
  graphdef, state = nnx.split(model)
  return (lambda state, x: nnx.merge(graphdef, state)(x)), state


def training_fn(model):
  """(fn(params, rest, x, g) -> (grads, new rest), params, rest): one forward + backward.

  The loss is <out, g> for a fixed cotangent g (as inside a network), gradients
  w.r.t. the parameters and the input; non-parameter state (batch-norm
  statistics, RNG counters) is carried through as in a train step.
  """
  model.train()
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def step(params, rest, x, g):
    def loss(params, x, rest):
      m = nnx.merge(graphdef, params, rest, copy=True)
      out = m(x)
      return jnp.vdot(out.astype(jnp.float32), g), nnx.state(m, nnx.Not(nnx.Param))

    (_, new_rest), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        params, x, rest)
    return grads, new_rest

  return step, params, rest
