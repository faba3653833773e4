"""XLA memory of one SAO Table 7 training step: U-Net vs U-Net+Attn vs U-Net+SAO.

  python -m experiments.restoration_memory [--chunks=64,256,1024] [--batch=16]

Compiles (never runs) the training step of configs/sanet/care_planaria.py's
model (3D U-Net, depth 3, widths 32-64-128, attention after the bottom and
decoder blocks, 4 heads, Q/K/V projected) at the paper's 16×64×64×1 patch and
batch 16: L1 loss, gradients, Adam update, float32, state donated
(`measure.train_step`, the library's TrainableModel). Reports XLA's
`memory_analysis()` (temporaries, arguments, outputs) for XLA:CPU on one
device; the top decoder level attends over N = 16·64·64 = 65,536 voxels, so
the softmax variant is compiled with query chunks (`query_chunk_size`), each
chunk's (batch, heads, chunk, N) logits rematerialised in the backward pass.
Writes experiments/results/restoration_memory.{md,json} (or --out_dir).
"""

import time

import jax
import jax.numpy as jnp
import optax
from absl import flags

from attention_lab import models
from experiments import measure

_CHUNKS = flags.DEFINE_list("chunks", ["64", "256", "1024"], "Query chunk sizes for softmax.")
_BATCH = flags.DEFINE_integer("batch", 16, "Batch size.")
_OUT = flags.DEFINE_string("out_dir", "", "Output folder (default experiments/results).")
PATCH = (16, 64, 64)
NAMES = {"none": "U-Net", "softmax": "U-Net+Attn", "siamese": "U-Net+SAO"}


def step_memory(attention: str, chunk: int | None, batch: int) -> dict:
  kwargs = {"query_chunk_size": chunk} if chunk else None
  build = lambda rngs: models.create("unet3d", num_classes=1, in_channels=1, attention=attention,
                                     features=32, depth=3, heads=4, attention_kwargs=kwargs,
                                     rngs=rngs)
  l1 = lambda prediction, target: jnp.mean(jnp.abs(prediction - target))
  step, state = measure.train_step(build, optax.adam(4e-4), l1, abstract=True)
  patch = jax.ShapeDtypeStruct((batch, *PATCH, 1), jnp.float32)
  start = time.perf_counter()
  _, acct = measure.compile_fn(step, state, patch, patch, donate_argnums=0)
  gib = lambda b: b / 2**30
  return {"attention": attention, "query_chunk_size": chunk, "temp_gib": gib(acct["temp_bytes"]),
          "argument_gib": gib(acct["arg_bytes"]), "output_gib": gib(acct["out_bytes"]),
          "compile_s": time.perf_counter() - start}


def main(argv):
  del argv
  chunks = [int(c) for c in _CHUNKS.value]
  if _BATCH.value < 1 or any(c < 1 for c in chunks):
    raise ValueError(f"--batch = {_BATCH.value}, --chunks = {_CHUNKS.value}: must be ≥ 1")
  rows = [step_memory("none", None, _BATCH.value), step_memory("siamese", None, _BATCH.value)]
  rows += [step_memory("softmax", c, _BATCH.value) for c in chunks]
  lines = [
      f"# SAO Table 7 training step memory (3D U-Net, 16×64×64 patches, batch {_BATCH.value})",
      "", "`python -m experiments.restoration_memory`: XLA `memory_analysis()` of the compiled "
      "(not run) train step (L1 loss, gradients, Adam, float32) on XLA:CPU, one device. "
      "U-Net+Attn's top decoder level attends over N = 65,536 voxels; its logits exist one "
      "query chunk at a time.", "", f"Measured on {measure.machine_line()}.", "",
      "| model | query chunk | temporaries (GiB) | arguments (GiB) | outputs (GiB) |",
      "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {NAMES[r['attention']]} | {r['query_chunk_size'] or '-'} | "
                 f"{r['temp_gib']:.2f} | {r['argument_gib']:.3f} | {r['output_gib']:.3f} |")
    print(lines[-1], flush=True)
  out = measure.out_dir_of({"out_dir": _OUT.value})
  measure.write(out, "restoration_memory", rows, "\n".join(lines) + "\n")


if __name__ == "__main__":
  measure.run(main)
