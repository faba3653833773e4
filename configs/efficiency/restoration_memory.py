"""SAO paper Table 7's training-step memory: 3D U-Net, U-Net+SAO and U-Net+Attn.

  python -m experiments.efficiency --config=configs/efficiency/restoration_memory.py

XLA memory of the train step (L1 loss, gradients, Adam, float32, state donated) of
configs/sanet/care_planaria.py's model (3D U-Net, depth 3, widths 32-64-128, 4 heads) at the
paper's 16×64×64×1 patches, batch 16; compiled, never run. U-Net+Attn's top decoder level
attends over N = 65,536 voxels, so it runs with query chunks (`query_chunk_size`).
Hardware/runtime: about 4 minutes on a 2-core CPU. `:tiny` in seconds.
"""

import ml_collections


def _net(label, attention, chunk=None, **size):
  return {"label": label, "model": "unet3d", "paper": None, "overrides": {
      "num_classes": 1, "in_channels": 1, "attention": attention, "features": 32, "depth": 3,
      "heads": 4, "attention_kwargs": {"query_chunk_size": chunk} if chunk else None, **size}}


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "nets"
  config.table = "restoration_memory"
  config.title = "SAO Table 7 training step memory (3D U-Net, 16×64×64 patches, batch 16)"
  config.patch = (16, 64, 64)
  config.paper_batch = 16
  config.time_batch = 0  # memory only
  config.learning_rate = 4e-4
  config.repeats = 1
  config.min_sample_s = 0.0
  config.memory_unit = "GiB"
  config.fused_attention = "none"
  config.out_dir = ""
  config.render_only = False
  config.about = (
      "XLA `memory_analysis()` of the compiled (not run) train step (L1 loss, gradients, Adam, "
      "float32, state donated) on XLA:CPU, one device, batch {paper_batch} of {patch} volumes. "
      "U-Net+Attn's top decoder level attends over N = 65,536 voxels; its logits exist one query "
      "chunk at a time. Ratios against the plain U-Net.")
  nets = [_net("U-Net", "none"), _net("U-Net+SAO", "siamese")]
  nets += [_net(f"U-Net+Attn (query chunk {c})", "softmax", c) for c in (64, 256, 1024)]
  if preset == "tiny":
    config.patch, config.paper_batch = (4, 8, 8), 2
    nets = [_net("U-Net", "none", features=4, depth=2),
            _net("U-Net+Attn (query chunk 16)", "softmax", 16, features=4, depth=2)]
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for restoration_memory; expected 'tiny'")
  config.comparisons = ({"title": "SAO Table 7", "baseline": "U-Net", "nets": tuple(nets)},)
  return config
