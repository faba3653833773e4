"""The issue-17 benchmark's pieces: the kept "before" operator and the HLO kernel counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab import ops
from experiments import relative_timm


@pytest.mark.parametrize("chunk", [None, 10])
def test_before_operator_matches_the_library(chunk):
  keys = jax.random.split(jax.random.key(0), 5)
  q, k, v = (jax.random.normal(kk, (1, 5, 4, 2, 3)) for kk in keys[:3])
  rh, rw = jax.random.normal(keys[3], (9, 3)), jax.random.normal(keys[4], (7, 3))
  np.testing.assert_allclose(
      relative_timm.relative_attention_2d_before(q, k, v, rh, rw, query_chunk_size=chunk),
      ops.relative_attention_2d(q, k, v, rh, rw), rtol=1e-5, atol=1e-6)


def test_hlo_counts_entry_and_loop_bodies_only():
  text = "\n".join([
      "%fused_computation (p: f32[4,4]) -> f32[4,4] {",
      "  %t = f32[4,4]{1,0} transpose(%p), dimensions={1,0}", "}",
      "%body.1 (s: f32[4]) -> f32[4] {",
      "  %f = f32[4]{0} fusion(%s), kind=kLoop, calls=%fused_computation", "}",
      "ENTRY %main (x: f32[4,4]) -> f32[4,4] {",
      "  %a = f32[4,4]{1,0} fusion(%x), kind=kLoop, calls=%fused_computation",
      "  %b = f32[2]{0} dot(%x, %x)", "}"])
  assert relative_timm.hlo_counts(text, row_logits=16) == {"kernels": 3, "logits_passes": 1}


def test_bench_loads_without_torch_or_reports_none():
  cls = relative_timm.load_bottleneck_attn()
  assert cls is None or cls.__name__ == "BottleneckAttn"
