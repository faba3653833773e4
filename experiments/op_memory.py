"""XLA memory accounting of the operators: what they hold beyond their inputs and outputs.

  python -m experiments.op_memory

Compiles each operator for abstract inputs (no data, deterministic on any
machine) and writes experiments/results/op_memory.md with temporary bytes from
`.compile().memory_analysis()`:
- SAO at SAO Table 2 sizes and KAO_QKV at KAO Table 1 sizes, as a ratio to
  input + output bytes (goal ≤ 2);
- query-chunked relative attention: forward temporaries per grid position
  (goal: constant, i.e. linear growth in H·W), and forward + backward at 112²;
- NMF forward + backward temporaries against the number of steps (one-step
  gradient: flat; BPTT grows).
"""

import jax
import jax.numpy as jnp

from attention_lab import ops
from experiments import measure

_S = jax.ShapeDtypeStruct
_F32 = jnp.float32


def _memory(fn, *args):
  """(temporary bytes, argument + output bytes) of fn compiled for args."""
  acct = measure.compile_fn(fn, *args)[1]
  return acct["temp_bytes"], acct["arg_bytes"] + acct["out_bytes"]


def main(argv):
  del argv
  lines = ["# Operator memory (XLA memory_analysis, float32)", ""]
  lines += ["| operator | size | temp bytes | in+out bytes | temp / (in+out) |", "|---|---|---|---|---|"]
  for n, c in ((14, 64), (28, 128), (56, 256)):
    temp, io = _memory(lambda x, w: ops.siamese_attention(x, x, x, w),
                       _S((1, n * n, 1, c), _F32), _S((1, c), _F32))
    lines.append(f"| siamese_attention | 1×{n}²×{c} | {temp} | {io} | {temp / io:.3f} |")
  for n in (14, 28, 56):
    temp, io = _memory(lambda x: ops.kronecker_attention_qkv(x, x, x), _S((8, n, n, 1, 8), _F32))
    lines.append(f"| kronecker_attention_qkv | 8×{n}²×8 | {temp} | {io} | {temp / io:.3f} |")

  chunk = 256
  lines += ["", f"Relative attention forward, batch 1, 8 heads × 32, query_chunk_size={chunk}:", "",
            "| grid | H·W | temp MiB | temp bytes / position |", "|---|---|---|---|"]
  for n in (16, 32, 48, 64):
    temp, _ = _memory(
        lambda q, r: ops.relative_attention_2d(q, q, q, r, r, query_chunk_size=chunk),
        _S((1, n, n, 8, 32), _F32), _S((2 * n - 1, 32), _F32))
    lines.append(f"| {n}×{n} | {n * n} | {temp / 2**20:.2f} | {temp / (n * n):.0f} |")

  lines += ["", "Relative attention forward + backward at 112×112, batch 1, 8 heads × 32:", "",
            "| query_chunk_size | temp GiB |", "|---|---|"]
  for c in (None, 448):
    fn = measure.grad_of_square_sum(
        lambda q, r, c=c: ops.relative_attention_2d(q, q, q, r, r, query_chunk_size=c), (0, 1))
    temp, _ = _memory(fn, _S((1, 112, 112, 8, 32), _F32), _S((223, 32), _F32))
    lines.append(f"| {c} | {temp / 2**30:.2f} |")

  lines += ["", "NMF forward + backward (gradient w.r.t. x), x 2×1024×64, rank 16:", "",
            "| steps | one_step temp bytes | bptt temp bytes |", "|---|---|---|"]
  for steps in (1, 2, 4, 8, 12):
    row = []
    for gradient in ("one_step", "bptt"):
      fn = measure.grad_of_square_sum(
          lambda x, b, g=gradient, s=steps: ops.nmf(x, b, steps=s, gradient=g)[1])
      row.append(_memory(fn, _S((2, 1024, 64), _F32), _S((2, 64, 16), _F32))[0])
    lines.append(f"| {steps} | {row[0]} | {row[1]} |")

  print(measure.write(measure.RESULTS, "op_memory", None, "\n".join(lines) + "\n"))


if __name__ == "__main__":
  measure.run(main)
