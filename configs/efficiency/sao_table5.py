"""SAO paper Table 5: memory and time of training whole networks (MobileNetV2, SANet, AttnNet).

  python -m experiments.efficiency --config=configs/efficiency/sao_table5.py

Reproduces: Siamese Attention Networks, Table 5 — memory at inputs of
128×224²×3 and "model execution time of 100 iterations": MobileNetV2 7.4 GB
14.4 s, SANet 7.5 GB 14.9 s, AttnNet 11.7 GB 27.1 s (GPU, TensorFlow; the
paper does not say whether an iteration is a training or an inference step,
nor the GPU; its training used RTX 2080 Ti). What must reproduce are the
ratios to MobileNetV2: memory 1.014× / 1.581×, time 1.035× / 1.882×.
Performance goal: SANet's train step ≤ 1.10× MobileNetV2's.
The same protocol for KANet_KV / KANet_QKV against MobileNetV2 (the KAO
paper has no whole-network table) and for AA-ResNet-50 against ResNet-50 (AA
Table 2: AA (υ = 0.25) trains +25% slower than ResNet-50 on a V100 at
batch 128; no memory given).

Memory is XLA's accounting of the step compiled for batch 128 (no need to run
it); time is measured at `time_batch` images of 224² on this CPU.
Hardware/runtime: ~10-15 minutes on a 2-core CPU (compiling 14 train steps
dominates). `:tiny` (small images, tiny widths) runs in about a minute.
"""

import ml_collections


def _nets(*items):
  return tuple({"label": label, "model": model, "overrides": overrides, "paper": paper}
               for label, model, overrides, paper in items)


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "nets"
  config.table = "sao_table5"
  config.title = "SAO Table 5: cost of a training step of whole networks (and KANet, AA-ResNet-50)"
  config.image_size = 224
  config.paper_batch = 128
  config.time_batch = 8
  config.learning_rate = 0.1
  config.repeats = 5
  config.min_sample_s = 0.0
  config.goal_max_ratio = 1.10
  config.dtype = "float32"  # compute dtype (parameters float32); the accelerator report adds bfloat16
  # "auto": the nets in `fused_nets` also run with the device's fused regular attention
  # (cuDNN flash on a GPU, Pallas flash on a TPU; none on a CPU), or "none".
  config.fused_attention = "auto"
  config.fused_nets = ("AttnNet",)
  config.out_dir = ""
  config.render_only = False  # True: re-render the md from the saved json, no measuring
  config.comparisons = (
      {"title": "SAO Table 5", "baseline": "MobileNetV2",
       "nets": _nets(("MobileNetV2", "mobilenet_v2", {}, {"memory_gb": 7.4, "time_s": 14.4}),
                     ("SANet", "sanet", {}, {"memory_gb": 7.5, "time_s": 14.9}),
                     ("AttnNet", "attnnet", {}, {"memory_gb": 11.7, "time_s": 27.1}))},
      {"title": "KANet (same protocol)", "baseline": "MobileNetV2",
       "nets": _nets(("MobileNetV2", "mobilenet_v2", {}, None),
                     ("KANet_KV", "kanet_kv", {}, None),
                     ("KANet_QKV", "kanet_qkv", {}, None))},
      {"title": "AA-ResNet-50 (AA Table 2 Δ_Train)", "baseline": "ResNet-50",
       "nets": _nets(("ResNet-50", "resnet50", {}, None),
                     ("AA-ResNet-50 (κ=2υ=0.2)", "aa_resnet50", {}, None),
                     ("AA-ResNet-50 (κ=υ=0.25)", "aa_resnet50",
                      {"kappa": 0.25, "upsilon": 0.25}, {"time_ratio": 1.25}))},
  )
  if preset == "tiny":
    config.image_size = 32
    config.paper_batch = 4
    config.time_batch = 2
    config.repeats = 1
    small = {"width": 0.25}
    config.comparisons = (
        {"title": "SAO Table 5", "baseline": "MobileNetV2",
         "nets": _nets(("MobileNetV2", "mobilenet_v2", small, {"memory_gb": 7.4, "time_s": 14.4}),
                       ("SANet", "sanet", small, {"memory_gb": 7.5, "time_s": 14.9}))},
    )
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for sao_table5; expected 'tiny'")
  return config
