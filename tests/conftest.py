"""Test setup, before jax is imported: a simulated 8-device CPU mesh, and cheaper
XLA:CPU compilation — tests run tiny programs once, so compile time dominates.
LLVM at optimisation level 0 and the loop emitters instead of the fusion
emitters each cut about a third of the compile time of a tiny SANet train step.
Results may differ from a default-compiled run in the last bit (at level 0, 21 of
the segmenter's 214 initial arrays differ by one ulp in 3-5% of their entries), so
tests compare with references under tolerances, never with numbers from
experiments/results."""

import importlib.metadata
import importlib.util
import os

# The compile-time flags are XLA:CPU's of the jaxlib they were measured with; XLA aborts on a
# flag it does not know, so another jaxlib (a lent GPU's image) runs without them.
_CPU_COMPILE_FLAGS = (["--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"]
                      if importlib.metadata.version("jaxlib").startswith("0.10.") else [])
os.environ["XLA_FLAGS"] = " ".join([
    os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8",
    *_CPU_COMPILE_FLAGS]).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # TF 2.21 logs its oneDNN notice at any TF_CPP_MIN_LOG_LEVEL

# triton (torch's compiler; torchvision and timm import it) crashes the process when its LLVM
# loads after TensorFlow's (TF 2.21, triton 3.x: a segfault in `import triton`); loaded first,
# both work. The peer tests run in the same workers as the TensorFlow ones.
if importlib.util.find_spec("triton") is not None:
  import triton  # pylint: disable=g-import-not-at-top,unused-import
