"""AA paper Table 9: memory of the attention maps per stage of AA-ResNet-50 (per image).

  python -m experiments.efficiency --config=configs/efficiency/aa_table9.py

Paper (appendix A.2): Nh·(HW)² bfloat16 per layer, 600 KB at 14×14, 37.5 KB at 7×7; 6 MB in
training, 600 KB at inference. Beside it XLA's temporaries of our AugmentedConv at those sizes.
Hardware/runtime: under a minute on a 2-core CPU (compile only). `:tiny` in seconds.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "aa"
  config.table = "aa_table9"
  config.title = "AA Table 9: attention-map memory per stage of AA-ResNet-50 (per image)"
  config.kappa = 0.2
  config.upsilon = 0.1
  config.heads = 8
  # AA Sec. 4.1: "a minimum of 20 dimensions per head for the keys", as our AA-ResNet-50 builds
  # its layers (dk = max(κ·Fout, 20·Nh) = 160 at every stage); the maps do not depend on dk.
  config.min_key_dims_per_head = 20
  config.about = (
      "AA-ResNet-50 attention layers (κ = {kappa}, υ = {upsilon}, Nh = {heads}, ≥ "
      "{min_key_dims_per_head} key dimensions per head, relative logits; stage 2 attends on a "
      "3×3/2-pooled grid), batch 1, bfloat16 compute. 'maps' = Nh·(HW)² per layer by "
      "arithmetic (paper: bfloat16; ours keeps logits and softmax in float32, ×2). XLA temp = "
      "`memory_analysis().temp_size_in_bytes` of one AugmentedConv layer, inference forward and "
      "training forward + backward, and of the same 3×3 convolution without attention; "
      "'attention Δ' = AA − conv.")
  # "auto": the relative attention also through the device's fused kernel (cuDNN flash on a
  # GPU, Pallas flash on a TPU; none on a CPU), memory only; or "none".
  config.fused_attention = "auto"
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  # ResNet-50 bottleneck 3×3 convolutions at 224²: stage 2 (conv3_x) 128 channels at 28²,
  # attention on the pooled 14² grid; stage 3 (conv4_x) 256 at 14²; stage 4 (conv5_x) 512 at 7².
  config.stages = (
      {"name": "stage 2", "layers": 4, "channels": 128, "side": 28, "downsample": True,
       "attention_side": 14},
      {"name": "stage 3", "layers": 6, "channels": 256, "side": 14, "downsample": False,
       "attention_side": 14},
      {"name": "stage 4", "layers": 3, "channels": 512, "side": 7, "downsample": False,
       "attention_side": 7},
  )
  # Paper: (memory per layer, params, FLOPS) per stage; totals (training, inference).
  config.paper = (("stage 2", ("600KB", "43k", "22M")), ("stage 3", ("600KB", "90k", "40M")),
                  ("stage 4", ("37.5KB", "190k", "19M")))
  config.paper_totals = ("6MB", "600KB")
  if preset == "tiny":
    config.stages = (
        {"name": "stage 2", "layers": 4, "channels": 16, "side": 8, "downsample": True,
         "attention_side": 4},
    )
  return config
