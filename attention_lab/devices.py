"""The one table of accelerator figures: peak dense FLOP/s per dtype, memory, bandwidth, L2.

Keyed by the `device_kind` JAX reports; `lookup` matches by substring (e.g. "NVIDIA
H100 80GB HBM3" → "H100"), the most specific name first. Figures are per JAX device
(v4: one TensorCore, half a chip), dense (no structured sparsity).

Sources: Google Cloud TPU documentation (cloud.google.com/tpu/docs/<chip>, "System
architecture"); NVIDIA data sheets (V100, A100, H100 SXM, H200 SXM, and for the papers'
GPUs TITAN Xp, GTX 1080 Ti, RTX 2080 Ti). A GPU's memory is the total CUDA reports (what
the GPU target configs in attention_lab/gpu_targets/ give XLA), not the marketing figure.
Memory bandwidth is the data sheet's HBM / GDDR figure (what a timed pass over more than the
L2 is compared with); a GPU's L2 size is its data sheet's, as in its target config (a
program whose data fits there runs L2-warm when called back to back). TPUs: no L2 entry.

Which peak a dtype means, as JAX runs it:
- bfloat16 / float16: the matrix units' 16-bit rate.
- float32 on a TPU: JAX's default precision multiplies float32 in one bf16 pass, so the
  bf16 peak. On an A100 / H100 / H200: XLA's default precision uses TF32 tensor cores for
  float32 dots and convolutions, so the TF32 peak. On a V100 (no TF32): the FP32 FMA peak.
- Pascal (TITAN Xp, GTX 1080 Ti) has no tensor cores and runs float16 at 1/64 rate: only
  float32. Turing GeForce (RTX 2080 Ti) multiplies float16 with float32 accumulation (as
  XLA does) at half its tensor cores' float16-accumulate rate.
- A dtype a device has no fast path for (bfloat16 on a V100 or older) has no peak: no MFU.
"""

import dataclasses
import importlib.util
import os

import numpy as np

GIB = 2**30
MIB = 2**20
GPU_TARGETS = os.path.join(os.path.dirname(__file__), "gpu_targets")


@dataclasses.dataclass(frozen=True)
class Device:
  name: str  # what `lookup` matches in a device_kind
  peak_flops: dict[str, float]  # dtype name → FLOP/s per device
  memory_bytes: int  # HBM per device
  memory_bandwidth: float  # bytes/s per device
  l2_bytes: int | None = None  # last-level cache per device (GPUs)

  def peak(self, dtype) -> float | None:
    """Peak FLOP/s at `dtype` (a numpy/jax dtype or its name); None where there is none."""
    return self.peak_flops.get(np.dtype(dtype).name)


def _tpu(name, bf16, memory_gib, bandwidth):
  return Device(name, {"bfloat16": bf16, "float32": bf16}, memory_gib * GIB, bandwidth)


# Longer names first where one contains another ("TPU v5 lite" before "TPU v5").
DEVICES = (
    _tpu("TPU v5 lite", 197e12, 16, 819e9),  # v5e
    _tpu("TPU v6 lite", 918e12, 32, 1640e9),  # v6e (Trillium)
    _tpu("TPU v5", 459e12, 95, 2765e9),  # v5p
    _tpu("TPU v4", 137.5e12, 16, 614e9),  # per TensorCore: 275 TFLOP/s, 32 GiB, 1,228 GB/s per chip
    # H200 SXM: H100 SXM's compute, 141 GB of HBM3e at 4.8 TB/s.
    Device("H200", {"float32": 494.7e12, "bfloat16": 989.4e12, "float16": 989.4e12},
           151_397_597_184, 4.8e12, 50 * MIB),
    # H100 PCIe 80 GB: TF32 378, BF16/FP16 756 TFLOP/s dense; 2.0 TB/s.
    Device("H100 PCIe", {"float32": 378e12, "bfloat16": 756e12, "float16": 756e12},
           80 * 10**9, 2.0e12, 50 * MIB),
    # H100 SXM5 80 GB: TF32 494.7, BF16/FP16 989.4 TFLOP/s dense; 3.35 TB/s.
    Device("H100", {"float32": 494.7e12, "bfloat16": 989.4e12, "float16": 989.4e12},
           84_942_979_072, 3.35e12, 50 * MIB),
    # A100 SXM4 80 GB: TF32 156, BF16/FP16 312 TFLOP/s dense; 2,039 GB/s (40 GB: 1,555 GB/s).
    Device("A100-SXM4-40GB", {"float32": 156e12, "bfloat16": 312e12, "float16": 312e12},
           40 * 10**9, 1.555e12, 40 * MIB),
    Device("A100", {"float32": 156e12, "bfloat16": 312e12, "float16": 312e12},
           85_100_068_864, 2.039e12, 40 * MIB),
    # V100 SXM2: FP32 15.7, FP16 tensor 125 TFLOP/s; no bf16 tensor cores; 900 GB/s.
    Device("V100-SXM2-16GB", {"float32": 15.7e12, "float16": 125e12}, 16_935_682_048, 900e9,
           6 * MIB),
    Device("V100", {"float32": 15.7e12, "float16": 125e12}, 32 * 10**9, 900e9, 6 * MIB),
    # RTX 2080 Ti (TU102): 68 SMs × 64 FP32 lanes × 2 × 1.545 GHz = 13.4 TFLOP/s; float16
    # tensor cores with float32 accumulation 53.8 TFLOP/s; 11 GB GDDR6, 616 GB/s.
    # RTX 4090 (AD102): 128 SMs × 128 × 2 × 2.52 GHz = 82.6 TFLOP/s float32 (TF32 tensor cores
    # the same), 165.2 BF16/FP16 with float32 accumulation, dense; 24 GB GDDR6X, 1008 GB/s.
    Device("RTX 4090", {"float32": 82.6e12, "bfloat16": 165.2e12, "float16": 165.2e12},
           25_386_352_640, 1008e9, 72 * MIB),
    Device("RTX 2080 Ti", {"float32": 13.45e12, "float16": 53.8e12}, 11_554_717_696, 616e9,
           11 * MIB // 2),
    # TITAN Xp (GP102): 30 SMs × 128 × 2 × 1.582 GHz = 12.1 TFLOP/s; 12 GB GDDR5X, 547.7 GB/s.
    Device("TITAN Xp", {"float32": 12.15e12}, 12_788_498_432, 547.6e9, 3 * MIB),
    # GTX 1080 Ti (GP102): 28 SMs × 128 × 2 × 1.582 GHz = 11.3 TFLOP/s; 11 GB GDDR5X, 484 GB/s.
    Device("GTX 1080 Ti", {"float32": 11.34e12}, 11_721_506_816, 484e9, 11 * MIB // 4),
)


def lookup(device_kind: str) -> Device | None:
  """The table's entry for a JAX `device_kind`; None for a CPU or an unknown device."""
  for device in DEVICES:
    if device.name.lower() in device_kind.lower():
      return device
  return None


def peak_flops(device_kind: str, dtype) -> float | None:
  """Peak FLOP/s of one device of `device_kind` at `dtype`; None where unknown (CPU)."""
  device = lookup(device_kind)
  return device.peak(dtype) if device else None


def gpu_names() -> list[str]:
  """GPUs XLA can compile for without one: the target configs in attention_lab/gpu_targets/
  (GpuTargetConfigProto text written from the published device facts)."""
  return sorted(f[:-len(".txtpb")] for f in os.listdir(GPU_TARGETS) if f.endswith(".txtpb"))


def gpu_target_config(name: str) -> str:
  """The GpuTargetConfigProto text of GPU `name` (one of gpu_names())."""
  with open(os.path.join(GPU_TARGETS, f"{name}.txtpb")) as f:
    return f.read()


def cuda_plugin_installed() -> bool:
  """Whether JAX's CUDA plugin (`jax_plugins.xla_cuda12`) can be imported; without any
  `jax_plugins` package `find_spec` raises instead of returning None."""
  try:
    return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
  except ModuleNotFoundError:
    return False


def gpu_devices(name: str, count: int = 1) -> list:
  """`count` compile-only devices of GPU `name` on one host, for `jax.jit(...).lower(...)
  .compile()` on a machine without the GPU (needs JAX's CUDA plugin)."""
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  if name not in gpu_names():
    raise ValueError(f"no GPU target config named {name!r}; expected one of "
                     f"{', '.join(gpu_names())}")
  if not cuda_plugin_installed():
    raise ValueError("compiling for a GPU needs JAX's CUDA plugin: pip install -e '.[gpu]'")
  return topologies.get_topology_desc(platform="cuda", target_config=gpu_target_config(name),
                                      topology=f"1x1x{count}").devices
