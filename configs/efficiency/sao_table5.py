"""SAO paper Table 5: memory and time of training whole networks (MobileNetV2, SANet, AttnNet).

  python -m experiments.efficiency --config=configs/efficiency/sao_table5.py

Paper (GPU, 128×224²×3): 7.4 / 7.5 / 11.7 GB, 14.4 / 14.9 / 27.1 s per 100 iterations; the
ratios to MobileNetV2 must reproduce. Goal: SANet's train step ≤ 1.10× MobileNetV2's. The same
protocol for the KANets and for AA-ResNet-50 against ResNet-50 (AA Table 2: +25% at υ = 0.25).
Hardware/runtime: ~10-15 minutes on a 2-core CPU. `:tiny` in about a minute.
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
  config.about = (
      "One training step: forward, softmax cross-entropy, backward, SGD momentum update, float32 "
      "parameters, {dtype} compute. **Memory**: XLA `memory_analysis()` of the step compiled (not "
      "run) for {paper_batch}×{image_size}²×3, peak = temporaries + arguments + outputs − donated "
      "(aliased) bytes. **Time**: the step compiled for {time_batch}×{image_size}²×3 and timed "
      "side by side with the other nets of its comparison (median of {repeats} samples; "
      "method: Timing and calibration, below). Ratios against the comparison's baseline. Paper columns: SAO "
      "Table 5 (memory and time of 100 iterations at 128×224²×3, GPU); AA Table 2 Δ_Train "
      "(V100, batch 128) for AA (υ = 0.25).")
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
    config.calibration = "tiny"  # measure.calibration at tiny sizes
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
