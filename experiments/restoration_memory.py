"""XLA memory of one SAO Table 7 training step: U-Net vs U-Net+Attn vs U-Net+SAO.

  python -m experiments.restoration_memory [--chunks=256,1024] [--batch=16]

Compiles (never runs) the training step of configs/sanet/care_planaria.py's
model (3D U-Net, depth 3, widths 32-64-128, attention after the bottom and
decoder blocks, 4 heads, Q/K/V projected) at the paper's 16×64×64×1 patch and
batch 16: L1 loss, gradients, Adam update, float32, state donated. Reports
XLA's `memory_analysis()` (temporaries, arguments, outputs) for XLA:CPU on one
device; the top decoder level attends over N = 16·64·64 = 65,536 voxels, so
the softmax variant is compiled with query chunks (`query_chunk_size`), each
chunk's (batch, heads, chunk, N) logits rematerialised in the backward pass.
Writes experiments/results/restoration_memory.{md,json}.
"""

import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import optax
from absl import app, flags

from attention_lab import models
from attention_lab.train.tasks import base

_CHUNKS = flags.DEFINE_list("chunks", ["256", "1024"], "Query chunk sizes for softmax.")
_BATCH = flags.DEFINE_integer("batch", 16, "Batch size.")
PATCH = (16, 64, 64)
RESULTS = pathlib.Path(__file__).parent / "results"
NOTE = (  # from the measured table (see the results file); update when it changes
    "\nWithout chunks the top level's logits alone would be 16·4·65,536² float32 = 1 TiB. With chunks of c queries, U-Net+Attn's temporaries grow as ≈ 1.75 GiB + c·0.067-0.080 GiB: a chunk's logits are 16·4·c·65,536·4 B = c·0.0156 GiB and the step holds about five such arrays (logits, softmax, their gradients), one chunk at a time. U-Net+SAO needs 1.44× the plain U-Net's temporaries, U-Net+Attn 3.9× (c = 64) to 39× (c = 1,024). configs/sanet/care_*.py use c = 256 (18.9 GiB: a 24 GB GPU or larger).\n")


def step_memory(attention: str, chunk: int | None, batch: int) -> dict:
  kwargs = {"query_chunk_size": chunk} if chunk else None
  net = base.TrainableModel(
      lambda rngs: models.create("unet3d", num_classes=1, in_channels=1, attention=attention,
                                 features=32, depth=3, heads=4, attention_kwargs=kwargs,
                                 rngs=rngs), optax.adam(4e-4), 0)
  state = jax.eval_shape(net.init)

  def train_step(state, x, y):
    def loss_fn(params):
      model = net.model({**state, "params": params}, train=True)
      return jnp.mean(jnp.abs(model(x) - y))

    grads = jax.grad(loss_fn)(state["params"])
    return net.update(state, grads, state["rest"])

  patch = jax.ShapeDtypeStruct((batch, *PATCH, 1), jnp.float32)
  start = time.perf_counter()
  compiled = jax.jit(train_step, donate_argnums=0).lower(state, patch, patch).compile()
  seconds = time.perf_counter() - start
  memory = compiled.memory_analysis()
  gib = lambda b: b / 2**30
  return {"attention": attention, "query_chunk_size": chunk,
          "temp_gib": gib(memory.temp_size_in_bytes),
          "argument_gib": gib(memory.argument_size_in_bytes),
          "output_gib": gib(memory.output_size_in_bytes),
          "compile_s": seconds}


def main(argv):
  del argv
  rows = [step_memory("none", None, _BATCH.value), step_memory("siamese", None, _BATCH.value)]
  rows += [step_memory("softmax", int(c), _BATCH.value) for c in _CHUNKS.value]
  lines = ["| model | query chunk | temporaries (GiB) | arguments (GiB) | outputs (GiB) |",
           "|---|---|---|---|---|"]
  names = {"none": "U-Net", "softmax": "U-Net+Attn", "siamese": "U-Net+SAO"}
  for r in rows:
    lines.append(f"| {names[r['attention']]} | {r['query_chunk_size'] or '-'} | "
                 f"{r['temp_gib']:.2f} | {r['argument_gib']:.3f} | {r['output_gib']:.3f} |")
    print(lines[-1], flush=True)
  header = (
      "# SAO Table 7 training step memory (3D U-Net, 16×64×64 patches, batch "
      f"{_BATCH.value})\n\n`python -m experiments.restoration_memory`: XLA "
      "`memory_analysis()` of the compiled (not run) train step (L1 loss, gradients, Adam, "
      "float32) on XLA:CPU, one device. U-Net+Attn's top decoder level attends over "
      "N = 65,536 voxels; its logits exist one query chunk at a time.\n\n"
      f"Machine: {platform.machine()}, jax {jax.__version__}.\n\n")
  (RESULTS / "restoration_memory.md").write_text(header + "\n".join(lines) + "\n" + NOTE)
  (RESULTS / "restoration_memory.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
  app.run(main)
