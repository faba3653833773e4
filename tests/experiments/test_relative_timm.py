"""The relative-attention benchmark's pieces: the HLO kernel counts, the optional timm loader."""

from experiments import relative_timm


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
