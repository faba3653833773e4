"""Ham paper Table 3: SA, the A² double-attention block, Ham (CD) and Ham (NMF) at 1×512×128×128.

  python -m experiments.efficiency --config=configs/efficiency/ham_table3.py

Reproduces: Hamburger paper Table 3 (d = 512, r = 64, K = 6): parameters,
MACs, memory and time for inference and for training (forward + backward).
The paper measured PyTorch on an NVIDIA TITAN Xp; counts (params, MACs) must
match, time and memory as ratios against SA. SA is
`layers.GlobalAttention(512, "softmax", project="qkv", out_features=512)`
(q, k, v and output maps 512×512: 1.05M parameters, 292G MACs), A² is
`experiments.efficiency_modules.DoubleAttention` with m = n = 512, Ham is
`layers.Hamburger(512, ham=..., dim=512, rank=64)` with K = 6 in training and
evaluation. Also sweeps the grid side 8..128 at 512 channels (inference; plot
experiments/results/ham_table3.png).
Hardware/runtime: about 5 minutes on a 2-core CPU (SA training at 128² is
~1.2 TFLOP per step). `:tiny` runs in seconds.
"""

import ml_collections

NOTES = """\
- Parameters: the paper's "M" are 2²⁰ units: SA 4·(512² + 512) = 1,050,624 = 1.00 Mi, Ham
  2·512² + 512 + 2·512 = 525,824 = 0.50 Mi (both exact); our A² (four 512×512 maps with
  biases) is 1.00 Mi against the paper's 1.01M (the reference A² block may carry a norm).
- MACs: SA (292.1G) and A² (25.8G) match. Ham: ours counts the lower bread (N·C·d = 4.29G),
  the solver's dot products with K = 6 loop steps and the final codes update (the official
  `compute_coef`; issue 11), and the upper bread as the layer computes it, on the low-rank
  factors: W_u(codes·basesᵀ) = codes·(basesᵀW_u), r·d·C + N·r·C = 0.55G. The paper convolves
  the (N, d) reconstruction instead: N·r·d + N·d·C = 4.83G, 4.28G more than ours. So CD 12.0G
  and NMF 12.7G against the paper's 16.2G / 17.6G. Both solvers take 2K + 1 products of
  N·d·r = 0.54G: NMF reuses x·bases of its first step for the initial codes softmax(x·bases)
  and draws the final codes from the last step's bases; CD and VQ never read their initial
  codes, so they are not computed (the reference computes them: +0.54G). With the paper's
  form (the layer before stop 8) CD and NMF were 16.8G (+3.7%) and 16.9G (−3.8%), the rest
  being torchprofile's counts of the solvers' elementwise updates.
- Training memory: with the one-step gradient (HamNet) the backward pass differentiates only
  the final codes update, the whole loop being frozen: 105 MB (CD) and 147 MB (NMF) of
  temporaries, against 219 / 185 MB when the last loop step was differentiated too.
- Memory: the paper's "MB" of GPU load are MiB: our SA inference total, 2,252 MB = 2,148 MiB,
  equals the paper's 2148 exactly. Our Ham and A² totals include the 32 MiB input and output
  and the parameters; the paper's load for those is ~100 MiB.
- Times are CPU (2 cores, float32) against a TITAN Xp; the ratios against SA are what compare:
  the MACs ratio is 23× (Ham) and 11× (A²); on this CPU SA's softmax over 16384² logits costs
  beyond its MACs, hence larger speed-ups than the paper's GPU figures.
"""


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "modules"
  config.table = "ham_table3"
  config.title = "Ham Table 3: context modules on a 1×512×128×128 feature map"
  config.batch = 1
  config.side = 128
  config.channels = 512
  config.modules = ("sa", "a2", "ham_cd", "ham_nmf")
  config.baseline = "sa"
  # "auto": SA also with the device's fused attention (cuDNN flash on a GPU, Pallas flash on a
  # TPU; none on a CPU) where its rules allow one 512-dim float32 head; or "none".
  config.fused_attention = "auto"
  config.a2_features = 512
  config.ham_dim = 512
  config.ham_rank = 64
  config.ham_steps = 6
  config.ham_loop_corrected_flops = True
  config.repeats = 5
  config.min_sample_s = 0.0
  config.out_dir = ""
  config.render_only = False  # True: re-render the md / png from the saved json, no measuring
  # Paper: {module: (params M, MACs G, train MB, infer MB, train ms, infer ms)}.
  config.paper = {
      "sa": (1.00, 292.0, 5253.0, 2148.0, 242.0, 82.2),
      "a2": (1.01, 25.7, 326.0, 165.0, 22.9, 8.0),
      "ham_cd": (0.50, 16.2, 162.0, 102.0, 20.0, 13.0),
      "ham_nmf": (0.50, 17.6, 202.0, 98.0, 15.6, 7.7),
  }
  config.sweep_sides = (8, 16, 32, 64, 128)
  config.sweep_repeats = 5
  config.memory_budget_gib = 8.0
  config.sweep_note = "Batch 1, 512 channels, inference (evaluation mode)."
  config.notes = NOTES
  if preset == "tiny":
    config.side = 8
    config.channels = 16
    config.a2_features = 16
    config.ham_dim = 16
    config.ham_rank = 4
    config.ham_steps = 2
    config.repeats = 1
    config.sweep_sides = (4,)
    config.ham_loop_corrected_flops = False
    config.sweep_repeats = 1
    config.memory_budget_gib = 1e-4
    config.sweep_note = "Tiny preset."
  return config
