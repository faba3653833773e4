"""Issue 5's performance goals, reported as met / not met with numbers (benchmarks, not tests).

  python -m experiments.efficiency --config=configs/efficiency/sao_table2.py
  python -m experiments.efficiency --config=configs/efficiency/kao_table1.py
  python -m experiments.efficiency --config=configs/efficiency/performance_goals.py

Goal 1 reads experiments/results/{sao_table2,kao_table1}.json (run those
first); goals 2-5 measure here (experiments/bench_ops.py): SAO at 56²×256 and
KAO_QKV at 8×56²×8 against one elementwise pass; Ham NMF inference at
1×512×128×128 against XLA FLOPs / large-matmul FLOP/s; Ham training memory
against K; query-chunked relative attention at 112² (batch 1, 8 heads × 32)
within 4 GiB of temporaries; goal 6 (issue 11): the ham (NMF, 1×512×128×128,
R = 64, K = 6, inference with the reconstruction) ≥ 2× faster than the
official PyTorch NMF2D, both in the same interleaved rounds (needs the
optional `torch`; skipped without it). Writes experiments/results/performance_goals.md.
`--config.goals="('hardware','ham_floor')"` re-measures only those goals and
copies the others from the saved experiments/results/performance_goals.json.
Hardware/runtime: about 3 minutes on a 2-core CPU (the chunked relative
attention step at 112² is run once). `:tiny` runs in seconds.
"""

import ml_collections

NOTES = """\
Measured at stop 8 on a 2-core Intel Xeon with nothing else running (stops 6-7 measured on a
shared AMD EPYC; their absolute times are not comparable with these). Only ratios measured in
the same interleaved rounds are meaningful.
- **Goal 1.** SAO, KAO_KV and KAO_QKV meet the paper's speed-up at every size, Attn1/N at
  14² and 56². Attn1/N at 28²×128 is 6.24× against 6.38×: its MAdd ratio to Attn is
  157.35m / 25.69m = 6.12×, and here both run their GEMMs at about the same rate (~120
  GFLOP/s), so beating 6.38× would need Attn to run below its FLOP rate, as it did in the
  paper's profile. (Moving heads in front of the 1/N form's einsums took it from 5.4× to
  6.2× at this size.) Attn+Pool is the papers' baseline, not one of our operators. It pools
  to 4× fewer keys and misses the paper's ratio at 14², 28² and KAO 56², where per-call
  overhead and the pooling pass weigh more than the saved logits. Temporaries saved are at
  least the paper's everywhere. Total saved cannot reach the paper's because the input and
  the output cannot be saved (the 'bound' column).
- **SAO (goal 2): met, 1.8× one pass.** Restructured at stop 7: plain 2D GEMMs, scores
  against the block-diagonal (H·D, H) matrix of w, and v̄ with (1/N) Σ_j s_j v_j from one
  GEMM; XLA bytes accessed 19.3 → 9.7 MB (`bench_ops.siamese_attention_before` is the old
  form, 4.6× one pass in this run).
- **KAO_QKV (goal 2): not met, 7.1× one pass; the lean prototype reaches 4.9×.** The input
  is 1.6 MB and cache-resident, so the op is bound by the number of XLA:CPU kernels (26,
  roughly 15-20 µs each here), not by bytes. Pieces timed alone: the two summaries (2 reduce
  fusions) take 2.2 passes, the outer-sum write 0.8, and the softmax attention over the
  8×112 summary tokens 5.2 (9 fusions, 2 dots, 3 transposes, 5 copies for ~1M
  multiply-adds). Moving heads in front of the softmax einsums (as the 1/N form now does)
  cut that attention to 14 kernels and 4.6 passes, but the same change was 2.5× slower
  inside GlobalAttention at 64²×512, so the softmax form keeps heads in the middle. ≤ 3× needs one fused kernel: both means in
  one read, the 112-token attention, one write. That is Pallas on GPU or a custom call on
  CPU.
- **Ham NMF (goal 3): met at stop 10, 1.42× its own floor.** Nothing in the layer changed
  for that; the FLOP count did. Until stop 10, `efficiency_modules.unrolled_loops()` counted a
  program that had been jitted before from JAX's trace cache, i.e. its loops counted once:
  the library layer read 14.50 G instead of 25.68 G, a floor of 76 ms instead of 148 ms, and
  "2.60×" (stops 8-9). The same cache made goal 6's floor 2.91 G instead of 16.86 G. The
  context manager now clears the caches (tests/experiments/test_efficiency.py). Run of
  stop 10 (quiet 2-core AMD EPYC, goals 3 and 6 only): library 210 ms against a 148 ms
  floor; 1.19× faster than the official NMF2D (goal 6, ≥ 2×, not met).
  History, with the ratios of the under-counted floors: stop 8 measured the goal at 1.71×
  its own floor; 1.94× faster than stop 6 and 1.58× faster than stop 7 in the same
  run. Three restructurings, each timed before and after:
  (a) stop 7: no transposed copy of x in the solver loop (temporaries 113 → 76 MB);
  (b) stop 8: the bases numerator xᵀ·codes as (codesᵀx)ᵀ. The (R, D) product keeps x's
  minor axis as the output's, and XLA:CPU runs it at 0.5 of the square-matmul rate against
  0.38 for the (D, R) one. Solver 113 → 87 ms, same values. (A transposed x hoisted out
  of the loop measured 5.8 ms per product but made the solver slower overall.)
  (c) stop 8, layers/hamburger.py: the upper bread on the low-rank factors,
  W_u(codes·basesᵀ) = codes·(basesᵀW_u), and the breads as dots on (N, C) rows instead of
  1×1 convolutions (XLA:CPU: 48 vs 70 ms for the lower bread; bias and ReLU fuse into the
  GEMM only on 2D rows). 32.9 → 24.3 GFLOP. The goal's floor falls with the FLOPs, so the
  ratio moves less than the time: 2.45× → 1.71×. What is left above the floor is rate, not
  FLOPs (pieces table). The solver runs at 0.72 of the square matmul: its codesᵀx and
  codesᵀcodes products contract the 16384-long token axis, at 0.5 and 0.25 of the rate. The
  upper GEMM (K = r = 64) runs at 0.35 and the lower bread at 0.72. At 1.5× every piece
  would have to run within 10% of a 4096² GEMM's rate.
  Training (Ham Table 3, forward + backward) gains the most from (c): the backward of the
  N·d·C convolution and the (N, d) reconstruction are gone, 185 MB of one-step temporaries
  against 252 MB before.
- **Issue 11 (the solvers as the official code: K steps, then the final codes update; the
  one-step gradient as HamNet runs it, the whole loop frozen).** Goal 4 re-measured on the
  shared AMD EPYC (compile only): one-step temporaries 147.2 MB for every K = 1..12 (the
  backward pass is now that of the final codes update alone; 185 MB when the last loop step
  was differentiated); BPTT grows by ~39 MB per step (the blocked NMF pass keeps each block's
  residuals). NMF restructuring for goals 3 and 6: each step is one pass over x in blocks of
  2048 tokens (`ops.decomposition._nmf_step`), both of the step's products on a block while it
  is in cache: x is read K + 1 times instead of 2K + 2; the first pass also gives the initial
  codes, so the solver takes 2K + 1 products of N·d·r as before, with the final update. The
  forms before it (`bench_ops.nmf_unblocked` and the stop 6/7 forms, all with the final update)
  are timed beside it in goal 3.
"""


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "goals"
  config.table = "performance_goals"
  config.title = "Issue 5 performance goals"
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  # Goals to measure; the others are copied from the saved json (e.g. --config.goals=hardware).
  config.goals = ("table_ratios", "hardware", "ham_floor", "ham_memory", "relative",
                  "ham_official")
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
  config.official_speedup_goal = 2.0  # goal 6 (issue 11): against the official torch NMF2D
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
