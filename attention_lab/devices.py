"""The one table of accelerator figures: peak dense FLOP/s per dtype, memory and bandwidth.

Keyed by the `device_kind` JAX reports; `lookup` matches by substring (e.g. "NVIDIA
H100 80GB HBM3" → "H100"), the most specific name first. Figures are per JAX device
(v4: one TensorCore, half a chip), dense (no structured sparsity).

Sources: Google Cloud TPU documentation (cloud.google.com/tpu/docs/<chip>, "System
architecture"); NVIDIA data sheets (V100, A100, H100 SXM, H200 SXM).

Which peak a dtype means, as JAX runs it:
- bfloat16 / float16: the matrix units' 16-bit rate.
- float32 on a TPU: JAX's default precision multiplies float32 in one bf16 pass, so the
  bf16 peak. On an A100 / H100 / H200: XLA's default precision uses TF32 tensor cores for
  float32 dots and convolutions, so the TF32 peak. On a V100 (no TF32): the FP32 FMA peak.
- A dtype a device has no fast path for (bfloat16 on a V100) has no peak: no MFU.
"""

import dataclasses

import numpy as np

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Device:
  name: str  # what `lookup` matches in a device_kind
  peak_flops: dict[str, float]  # dtype name → FLOP/s per device
  memory_bytes: int  # HBM per device
  memory_bandwidth: float  # bytes/s per device

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
           141 * 10**9, 4.8e12),
    # H100 PCIe 80 GB: TF32 378, BF16/FP16 756 TFLOP/s dense; 2.0 TB/s.
    Device("H100 PCIe", {"float32": 378e12, "bfloat16": 756e12, "float16": 756e12},
           80 * 10**9, 2.0e12),
    # H100 SXM5 80 GB: TF32 494.7, BF16/FP16 989.4 TFLOP/s dense; 3.35 TB/s.
    Device("H100", {"float32": 494.7e12, "bfloat16": 989.4e12, "float16": 989.4e12},
           80 * 10**9, 3.35e12),
    # A100 SXM4 80 GB: TF32 156, BF16/FP16 312 TFLOP/s dense; 2,039 GB/s (40 GB: 1,555 GB/s).
    Device("A100-SXM4-40GB", {"float32": 156e12, "bfloat16": 312e12, "float16": 312e12},
           40 * 10**9, 1.555e12),
    Device("A100", {"float32": 156e12, "bfloat16": 312e12, "float16": 312e12},
           80 * 10**9, 2.039e12),
    # V100 SXM2: FP32 15.7, FP16 tensor 125 TFLOP/s; no bf16 tensor cores; 900 GB/s.
    Device("V100", {"float32": 15.7e12, "float16": 125e12}, 32 * 10**9, 900e9),
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
