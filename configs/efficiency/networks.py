"""Whole networks on the accelerator: the train step of ResNet-50, AA-ResNet-50, MobileNetV2 and
its SAO / KAO networks (SAO Table 5's family) and HamNet, beside PyTorch's (timm) ResNet-50 and
attention ResNets, on one device.

  python -m experiments.efficiency --config=configs/efficiency/networks.py[:tiny]

Goals: our ResNet-50 ≥ 1.0× timm's images/s (a published anchor: about 2,600 images/s for
ResNet-50 with PyTorch AMP on one H100 SXM); each attention network's step-time overhead over
its plain backbone no higher than timm's BoTNet / HaloNet over their ResNet-26t.
Hardware/runtime: a GPU or TPU; entries in order of value within `budget_s` (the accelerator
report gives it what is left of its budget): ~60-90 s each on an H100, most of it compiling.
`:tiny` (CPU, seconds each): ResNet-50 at width 1/8, the digits model with and without SAO and
timm's models eager, at 32².
"""

import ml_collections


def _entry(label, framework, model, batch, estimate_s, **options):
  return {"label": label, "framework": framework, "model": model, "batch": batch,
          "estimate_s": estimate_s, **options}


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "networks"
  config.table = "networks"
  config.title = "Whole networks: the train step on this device, beside PyTorch"
  config.image_size = 224
  config.compute_dtype = "bfloat16"  # compute; parameters float32
  config.learning_rate = 0.1
  config.warmup = 3  # steps before timing (the first compiles)
  config.steps = 20  # timed steps
  config.budget_s = 0.0  # 0: every entry; else those whose scaled estimate still fits
  config.resume = False  # keep the saved JSON's rows; measure only the missing entries
  config.torch_compile = True  # for the entries with compile=True (else eager, labelled)
  config.torch_threads = 0  # PyTorch's host threads (0: its default)
  config.out_dir = ""
  config.render_only = False
  config.resnet50_pair = ("ResNet-50", "timm resnet50")
  config.resnet50_goal = 1.0
  config.resnet50_anchor = "about 2,600 images/s, PyTorch AMP, one H100 SXM"
  config.about = (
      "One training step as the tasks run it (`measure.train_step`: TrainableModel, SGD "
      "momentum 0.9, softmax cross-entropy), {compute_dtype} compute, float32 parameters, random "
      "batches resident on the device; PyTorch: timm's model in channels_last, bf16 autocast, "
      "the same optimiser and loss, torch.compile or eager as the row says. **Time**: wall time "
      "of {steps} back-to-back steps after {warmup} warm-up steps, the host running ahead of "
      "the device (JAX: `block_until_ready`, PyTorch: `torch.cuda.synchronize` at the end), so "
      "the dispatch is hidden. **TFLOP/s and MFU**: model FLOPs (ours: 2 × the multiply-adds "
      "of the step's dot products and convolutions; PyTorch: `FlopCounterMode`) per second, "
      "MFU against the device's {compute_dtype} peak (attention_lab/devices.py). **Roofline**: "
      "max(FLOPs / peak, XLA bytes accessed / HBM bandwidth) over the step time, FLOPs the "
      "larger of the model's and XLA's cost analysis. **Memory**: XLA's peak of the donated "
      "step; PyTorch's most allocated. timm's 26t networks run at 256² (HaloNet needs it); "
      "HamNet at a 512² crop (its papers' 512 / 513) with per-pixel labels.")
  config.entries = (
      _entry("ResNet-50", "jax", "resnet50", 256, 70),
      _entry("timm resnet50", "torch", "resnet50", 256, 100, eager_estimate_s=20),
      _entry("AA-ResNet-50", "jax", "aa_resnet50", 256, 100, baseline="ResNet-50"),
      _entry("timm resnet26t", "torch", "resnet26t", 256, 20, image_size=256, compile=False),
      _entry("timm botnet26t", "torch", "botnet26t_256", 256, 25, image_size=256,
             img_size=True, compile=False, baseline="timm resnet26t"),
      _entry("timm halonet26t", "torch", "halonet26t", 256, 25, image_size=256, img_size=True,
             compile=False, baseline="timm resnet26t"),
      _entry("MobileNetV2", "jax", "mobilenet_v2", 256, 45),
      _entry("SANet", "jax", "sanet", 256, 60, baseline="MobileNetV2"),
      _entry("MobileNetV2 + SAO", "jax", "mobilenet_v2_sao", 256, 60, baseline="MobileNetV2"),
      _entry("KANet_KV", "jax", "kanet_kv", 256, 60, baseline="MobileNetV2"),
      _entry("HamNet without its Hamburger", "jax", "hamnet", 8, 90, image_size=512,
             task="segmentation", classes=21,
             overrides={"ham_options": {"without": ("hamburger",)}}),
      _entry("HamNet", "jax", "hamnet", 8, 100, image_size=512, task="segmentation", classes=21,
             baseline="HamNet without its Hamburger"),
  )
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.image_size = 32
    config.warmup = 1
    config.steps = 2
    cnn = {"width": 4, "in_channels": 3}  # the digits model: SAO over its plain form, cheaply
    config.entries = (
        _entry("ResNet-50", "jax", "resnet50", 2, 30, overrides={"width": 0.125}),
        _entry("timm resnet50", "torch", "resnet50", 2, 10),
        _entry("CNN", "jax", "attention_cnn", 2, 5, overrides={**cnn, "attention": "none"}),
        _entry("CNN + SAO", "jax", "attention_cnn", 2, 5, baseline="CNN",
               overrides={**cnn, "attention": "siamese"}),
        _entry("timm resnet26t", "torch", "resnet26t", 2, 5, compile=False),
        _entry("timm botnet26t", "torch", "botnet26t_256", 2, 5, img_size=True, compile=False,
               baseline="timm resnet26t"),
    )
    config.torch_compile = False  # eager on the CPU (torch.compile needs minutes there)
    config.torch_threads = 1  # more OpenMP threads than free cores spin-wait on a busy host
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for networks; expected 'tiny'")
  return config
