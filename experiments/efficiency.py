"""Operator efficiency tables (SAO Table 2, KAO Table 1) beside the papers' numbers.

  python -m experiments.efficiency --config=configs/efficiency/<table>.py[:tiny]

For every (size, operator) of the config, with Q = K = V = the input:
- MAdd: multiply-adds of the dot products in the traced computation
  (`experiments.model_stats.count_madd`), per example as the papers count;
- memory: XLA's `memory_analysis()` of the compiled operator — temporaries,
  and temporaries + arguments + outputs;
- time: median of `repeats` runs after a warm-up, `jax.block_until_ready`,
  the operators of one size measured side by side in one process.
Speed-up and memory saving are against "attn" at the same size. Writes
experiments/results/<table>.{md,json,png} with the machine they ran on.
"""

import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from absl import app
from ml_collections import config_flags

from attention_lab import ops
from experiments.model_stats import count_madd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

_CONFIG = config_flags.DEFINE_config_file("config", None, "Efficiency table config.")

LABELS = {"attn": "Attn", "attn_pool": "Attn+Pool", "attn_mean": "Attn1/N", "sao": "SAO",
          "kao_kv": "KAO_KV", "kao_qkv": "KAO_QKV"}


def _flat(x):
  return x.reshape(x.shape[0], -1, *x.shape[-2:])


OPERATORS = {
    "attn": lambda x: ops.dot_product_attention(_flat(x), _flat(x), _flat(x)),
    "attn_pool": lambda x: ops.dot_product_attention(_flat(x), *ops.pool_keys_values(x, x)),
    "attn_mean": lambda x: ops.dot_product_attention(_flat(x), _flat(x), _flat(x),
                                                     normalization="mean"),
    "sao": lambda x: ops.siamese_attention(_flat(x), _flat(x), _flat(x),
                                           jnp.ones(x.shape[-2:], x.dtype)),
    "kao_kv": lambda x: ops.kronecker_attention_kv(x, x, x),
    "kao_qkv": lambda x: ops.kronecker_attention_qkv(x, x, x),
}


def measure(op: str, x, repeats: int) -> dict:
  """MAdd per example, XLA memory and median time of one operator on x (B, S, S, H, D)."""
  fn = jax.jit(OPERATORS[op])
  compiled = fn.lower(x).compile()
  mem = compiled.memory_analysis()
  jax.block_until_ready(compiled(x))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(x))
    times.append(time.perf_counter() - start)
  return {
      "madd": count_madd(jax.make_jaxpr(OPERATORS[op])(x).jaxpr) / x.shape[0],
      "temp_bytes": mem.temp_size_in_bytes,
      "total_bytes": mem.temp_size_in_bytes + mem.argument_size_in_bytes
                     + mem.output_size_in_bytes,
      "time_s": float(np.median(times)),
  }


def machine() -> str:
  return (f"{platform.processor() or platform.machine()}, {jax.devices()[0].device_kind}, "
          f"jax {jax.__version__}")


def main(argv):
  del argv
  config = _CONFIG.value
  rows = []
  for side, channels in config.sizes:
    x = jax.random.normal(jax.random.key(0), (config.batch, side, side, config.heads,
                                              channels // config.heads))
    results = {op: measure(op, x, config.repeats) for op in config.operators}
    base = results["attn"]
    for op, r in results.items():
      paper = config.paper.get(op, {}).get(str(side))
      rows.append(dict(
          size=f"{config.batch}×{side}²×{channels}", side=side, operator=op, **r,
          speedup=base["time_s"] / r["time_s"],
          memory_saving=1 - r["total_bytes"] / base["total_bytes"],
          temp_saving=1 - r["temp_bytes"] / max(base["temp_bytes"], 1),
          paper_madd_m=paper[0] if paper else None, paper_memory_mb=paper[1] if paper else None,
          paper_time_ms=paper[2] if paper else None,
          paper_speedup=_paper_speedup(config, op, side)))
      print(rows[-1], flush=True)
  out = pathlib.Path(__file__).parent / "results"
  out.mkdir(exist_ok=True)
  (out / f"{config.table}.json").write_text(
      json.dumps({"machine": machine(), "rows": rows}, indent=1))
  (out / f"{config.table}.md").write_text(_markdown(config, rows))
  _plot(config, rows, out / f"{config.table}.png")


def _paper_speedup(config, op, side):
  explicit = config.get("paper_speedup", {}).get(op, {}).get(str(side))
  if explicit:
    return explicit
  base, own = config.paper.get("attn", {}).get(str(side)), config.paper.get(op, {}).get(str(side))
  return base[2] / own[2] if base and own else None


def _markdown(config, rows) -> str:
  fmt = lambda v, f: "" if v is None else format(v, f)
  lines = [f"# {config.title}", "", f"Machine: {machine()}. Time: median of {config.repeats} "
           "runs after warm-up; memory: XLA memory_analysis of the whole batch; MAdd: dot products "
           "of the traced computation, per example. Ratios are against Attn at the same size, measured in the same run.", "",
           "| input | operator | MAdd | paper MAdd | temp MB | total MB | paper MB | time ms | "
           "paper ms | speed-up | paper speed-up | total memory saved | temp memory saved |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
        f"| {r['size']} | {LABELS[r['operator']]} | {r['madd'] / 1e6:.2f}m | "
        f"{fmt(r['paper_madd_m'], '.2f')}{'m' if r['paper_madd_m'] else ''} | "
        f"{r['temp_bytes'] / 1e6:.2f} | {r['total_bytes'] / 1e6:.2f} | "
        f"{fmt(r['paper_memory_mb'], '.2f')} | {1e3 * r['time_s']:.3f} | "
        f"{fmt(r['paper_time_ms'], '.2f')} | {r['speedup']:.1f}× | "
        f"{fmt(r['paper_speedup'], '.1f')}{'×' if r['paper_speedup'] else ''} | "
        f"{100 * r['memory_saving']:.1f}% | {100 * r['temp_saving']:.1f}% |")
  return "\n".join(lines) + "\n"


def _plot(config, rows, path):
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for op in config.operators:
    mine = [r for r in rows if r["operator"] == op]
    sides = [r["side"] ** 2 for r in mine]
    axes[0].loglog(sides, [1e3 * r["time_s"] for r in mine], "o-", label=LABELS[op])
    axes[1].loglog(sides, [r["total_bytes"] / 1e6 for r in mine], "o-", label=LABELS[op])
  for ax, ylabel in zip(axes, ("time (ms)", "XLA memory (MB)")):
    ax.set_xlabel("positions H·W")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
  axes[0].legend()
  fig.suptitle(f"{config.title}\n{machine()}", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


if __name__ == "__main__":
  app.run(main)
