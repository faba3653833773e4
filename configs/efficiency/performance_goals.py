"""The library's performance goals, reported as met / not met with numbers (benchmarks, not tests).

  python -m experiments.efficiency --config=configs/efficiency/sao_table2.py
  python -m experiments.efficiency --config=configs/efficiency/kao_table1.py
  python -m experiments.efficiency --config=configs/efficiency/performance_goals.py

The goals are listed in experiments/performance_goals.py. Goal 1 reads the SAO / KAO results
JSON (run those first); goal 6 needs the optional `torch`. `--config.goals="('hardware',)"`
measures those goals alone; the others read "not measured". What the numbers mean:
the notes of experiments/results/performance_goals.md. About 3 minutes on a 2-core CPU;
`:tiny` runs in seconds.
"""

import ml_collections


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.kind = "performance_goals"
  config.table = "performance_goals"
  config.title = "Performance goals"
  config.out_dir = ""
  config.render_only = False  # True: re-render the md from the saved json, no measuring
  config.goals = ("table_ratios", "hardware", "ham_floor", "ham_memory", "relative",
                  "ham_official", "op_memory")
  config.repeats = 9
  config.min_sample_s = 0.05
  config.ratio_tables = ("sao_table2", "kao_table1")
  config.sao_size = (1, 56, 256)  # (batch, side, channels)
  config.kao_size = (8, 56, 8)
  config.pass_ratio_goal = 3.0
  # Ham: the Table 3 size, in the field names of configs/efficiency/ham_table3.py.
  config.ham = ml_collections.ConfigDict(dict(
      side=128, channels=512, ham_dim=512, ham_rank=64, ham_steps=6))
  config.matmul_size = 4096
  config.floor_ratio_goal = 1.5
  config.official_speedup_goal = 2.0
  config.memory_steps = (1, 2, 3, 6, 12)
  config.memory_growth_tolerance = 0.01
  config.relative_side = 112
  config.relative_heads = 8
  config.relative_dim = 32
  config.relative_chunk = 448
  config.relative_budget_gib = 4.0
  config.relative_run = True
  # Goal 7: (batch, side, channels, operator) at SAO Table 2 / KAO Table 1 sizes.
  config.op_memory_sizes = tuple((1, n, c, "sao") for n, c in ((14, 64), (28, 128), (56, 256))) \
      + tuple((8, n, 8, "kao_qkv") for n in (14, 28, 56))
  config.op_memory_relative_sides = (16, 32, 48, 64)
  config.op_memory_chunk = 256
  config.op_memory_nmf_steps = (1, 2, 4, 8, 12)
  if preset == "tiny":
    config.calibration = "tiny"  # measure.calibration at tiny sizes
    config.repeats = 1
    config.min_sample_s = 0.0
    config.sao_size = (1, 6, 8)
    config.kao_size = (2, 6, 8)
    config.ham.update(side=6, channels=8, ham_dim=8, ham_rank=2, ham_steps=2)
    config.matmul_size = 64
    config.memory_steps = (1, 2)
    config.relative_side = 6
    config.relative_heads = 2
    config.relative_dim = 4
    config.relative_chunk = 12
    config.op_memory_sizes = ((1, 4, 8, "sao"), (2, 4, 8, "kao_qkv"))
    config.op_memory_relative_sides = (4, 8)
    config.op_memory_chunk = 8
    config.op_memory_nmf_steps = (1, 2)
  return config
