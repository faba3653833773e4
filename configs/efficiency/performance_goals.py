"""Issue 5's performance goals, reported as met / not met with numbers (benchmarks, not tests).

  python -m experiments.efficiency --config=configs/efficiency/sao_table2.py
  python -m experiments.efficiency --config=configs/efficiency/kao_table1.py
  python -m experiments.efficiency --config=configs/efficiency/performance_goals.py

Goal 1 reads experiments/results/{sao_table2,kao_table1}.json (run those
first); goals 2-5 measure here (experiments/bench_ops.py): SAO at 56²×256 and
KAO_QKV at 8×56²×8 against one elementwise pass; Ham NMF inference at
1×512×128×128 against XLA FLOPs / large-matmul FLOP/s; Ham training memory
against K; query-chunked relative attention at 112² (batch 1, 8 heads × 32)
within 4 GiB of temporaries. Writes experiments/results/performance_goals.md.
Hardware/runtime: about 3 minutes on a 2-core CPU (the chunked relative
attention step at 112² is run once). `:tiny` runs in seconds.
"""

import ml_collections

NOTES = """\
- **SAO (goal 2).** `ops.siamese_attention` contracts `"bqhd,hd->bqh"` with the head axis as a
  dot batch dimension; XLA:CPU then transposes the whole (B, N, H, D) input before the GEMV
  (one `transpose` + one `copy` in the HLO, an extra read + write of the input), and v̄ and
  Σ_j s_j v_j are two more passes. Recommended (prototype `bench_ops.siamese_attention_2d_gemm`,
  same values): scores as one plain 2D GEMM `q.reshape(B·N, H·D) @ W_bd` with the (H·D, H)
  block-diagonal matrix of w, and v̄ with Σ_j s_j v_j from ONE GEMM `[1/N, s_k/N]ᵀ @
  v.reshape(B, N, H·Dv)` keeping the H diagonal blocks. Passes: read q (= k here), read v,
  write out — XLA bytes accessed fall to ~1.5× one pass (table above).
- **KAO_QKV (goal 2).** At 8×56²×8 the input is 1.6 MB, cache-resident; the op is bound by
  the number of XLA:CPU kernels (12 fusions, 3 transposes, 5 copies in the library HLO), not by
  bytes. The lean prototype (`bench_ops.kronecker_attention_qkv_lean`: means on the merged
  (B, X, Y, H·D) view, the 112-token attention on (B·H, T, D) arrays, one broadcast add)
  drops the transposes and copies and cuts temporaries, but the two mean reductions alone take
  ~3 passes' time on XLA:CPU (a reduction over a non-minor axis is not vectorised well), so
  ≤ 3× one pass needs a single fused kernel (both means in one read, the tiny attention, the
  outer-sum write): a Pallas kernel on GPU, or a custom call on CPU. Not reachable by
  restructuring jnp code alone on this backend.
- **Ham NMF (goal 3).** Two causes. (a) In `ops.nmf` the bases update `swapaxes(x) @ codes`
  makes XLA:CPU transpose the whole (B, N, D) input inside the while body, every step (HLO:
  `f32[1,512,16384] transpose` + `copy` in the loop): hoist xᵀ out of the loop as a loop
  operand (prototype `bench_ops.nmf_hoisted`, same values and one-step gradients). (b) The two
  1×1 convolutions (N·C·d each) are the largest single GEMMs; apply the upper bread to the
  low-rank factors, W_u·(codes·basesᵀ) = codes·(basesᵀ·W_u), and fold the eval-mode batch norm
  into it (prototype `bench_ops.hamburger_restructured`, same values): 4.83G → 0.56G
  multiply-adds for reconstruction + upper conv at 128² (in training the same identity holds,
  batch norm then normalises codes·(basesᵀW_u)). What remains is the solver's skinny GEMMs
  (r = 64) and its elementwise updates on (N, r) arrays, which run well below a square GEMM's
  FLOP/s on this CPU (pieces table); the floor as defined (large-matmul FLOP/s) is not
  reachable for r = 64 on XLA:CPU.
"""


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "goals"
  config.table = "performance_goals"
  config.title = "Issue 5 performance goals"
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  config.repeats = 9
  config.min_sample_s = 0.05
  config.ratio_tables = ("sao_table2", "kao_table1")
  config.sao_size = (1, 56, 256)  # (batch, side, channels)
  config.kao_size = (8, 56, 8)
  config.pass_ratio_goal = 3.0
  # Ham: the Table 3 size; the same fields as configs/efficiency/ham_table3.py.
  config.ham = ml_collections.ConfigDict(dict(
      side=128, channels=512, a2_features=512, ham_dim=512, ham_rank=64, ham_steps=6, batch=1,
      ham_loop_corrected_flops=True))
  config.matmul_size = 4096
  config.floor_ratio_goal = 1.5
  config.memory_steps = (1, 2, 3, 6, 12)
  config.memory_growth_tolerance = 0.01
  config.relative_side = 112
  config.relative_heads = 8
  config.relative_dim = 32
  config.relative_chunk = 448
  config.relative_budget_gib = 4.0
  config.relative_run = True
  config.notes = NOTES
  if preset == "tiny":
    config.repeats = 1
    config.min_sample_s = 0.0
    config.sao_size = (1, 6, 8)
    config.kao_size = (2, 6, 8)
    config.ham = ml_collections.ConfigDict(dict(
        side=6, channels=8, a2_features=8, ham_dim=8, ham_rank=2, ham_steps=2, batch=1,
        ham_loop_corrected_flops=True))
    config.matmul_size = 64
    config.memory_steps = (1, 2)
    config.relative_side = 6
    config.relative_heads = 2
    config.relative_dim = 4
    config.relative_chunk = 12
    config.relative_run = True
  return config
