"""Test setup, before jax is imported: a simulated 8-device CPU mesh, and XLA:CPU's
LLVM backend at optimisation level 0 — tests run tiny programs once, so compile
time dominates (it cuts a tiny MobileNetV2 train step from 15 s to 9 s) and the
numerics are unchanged (no fast-math at any level)."""

import os

os.environ["XLA_FLAGS"] = " ".join([
    os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8",
    "--xla_backend_optimization_level=0"]).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
