"""The efficiency tables run end to end at tiny sizes and write their md / json (+ plots)."""

import json

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from attention_lab import ops
from attention_lab.layers import Hamburger
from configs.efficiency import (aa_table9, ham_table3, isa_tables, kao_table1,
                                performance_goals, sao_table2)
from experiments import bench_ops, efficiency, efficiency_modules, measure


@pytest.mark.parametrize("op", sorted(efficiency.OPERATORS))
def test_measure_counts_the_papers_madd(op):
  x = jax.random.normal(jax.random.key(0), (2, 6, 6, 1, 8))
  r = efficiency.measure(op, x, repeats=1)
  n, c = 36, 8
  expected = {"attn": 2 * n * n * c, "attn_pool": 2 * n * 9 * c, "attn_mean": 2 * n * c * c,
              "sao": 4 * n * c, "kao_kv": 2 * n * 12 * c, "kao_qkv": 2 * 12 * 12 * c}[op]
  assert r["madd"] == expected
  assert r["time_s"] > 0 and r["total_bytes"] >= r["temp_bytes"] >= 0


def _run(module, monkeypatch, tmp_path):
  config = module.get_config("tiny")
  config.out_dir = str(tmp_path)
  monkeypatch.setattr(efficiency, "_CONFIG", type("Flag", (), {"value": config})())
  efficiency.main([])
  data = json.loads((tmp_path / f"{config.table}.json").read_text())
  text = (tmp_path / f"{config.table}.md").read_text()
  assert data["machine"]["jax"] == jax.__version__
  return config, data, text


@pytest.mark.parametrize("module", [sao_table2, kao_table1])
def test_operator_tables(module, monkeypatch, tmp_path):
  config, data, text = _run(module, monkeypatch, tmp_path)
  assert len(data["rows"]) == len(config.sizes) * len(config.operators)
  assert all(r["time_s"] > 0 and r["pass_time_s"] > 0 for r in data["rows"])
  assert (tmp_path / f"{config.table}.png").stat().st_size > 0
  # The tiny budget puts regular attention over it at the largest sweep size: not run.
  assert any(p["over_budget"] and p["time_s"] is None for p in data["sweep"])
  assert "speed-up" in text and "paper" in text


def test_ham_table(monkeypatch, tmp_path):
  config, data, text = _run(ham_table3, monkeypatch, tmp_path)
  rows = {r["module"]: r for r in data["rows"]}
  assert set(rows) == set(config.modules)
  for r in rows.values():
    assert r["infer"]["time_s"] > 0 and r["train"]["time_s"] > 0
    assert r["train"]["total_bytes"] > r["infer"]["total_bytes"] > 0
  # SA's 4 C×C maps with biases; the Ham has 2 C×d convs (bias on the lower one) and a BN.
  c = config.channels
  assert rows["sa"]["params"] == 4 * (c * c + c)
  assert rows["ham_nmf"]["params"] == 2 * c * config.ham_dim + config.ham_dim + 2 * c
  assert "Ham (NMF)" in text


def test_isa_tables(monkeypatch, tmp_path):
  config, data, text = _run(isa_tables, monkeypatch, tmp_path)
  rows = {r["variant"]: r for r in data["rows"]}
  assert set(rows) == set(config.variants)
  for r in rows.values():
    assert r["forward"]["time_s"] > 0 and r["train"]["time_s"] > 0 and r["probes"]
  # The refined block never forms the N×N map: less training memory than SAGAN.
  assert rows["isagan"]["train"]["total_bytes"] < rows["sagan"]["train"]["total_bytes"]
  assert "largest batch" in text


def test_aa_table(monkeypatch, tmp_path):
  config, data, text = _run(aa_table9, monkeypatch, tmp_path)
  for r, stage in zip(data["rows"], config.stages):
    hw = stage["attention_side"] ** 2
    assert r["maps_bf16_bytes"] == config.heads * hw * hw * 2
    assert r["aa_train"]["temp_bytes"] > 0
  assert "training" in text and "inference" in text


def test_performance_goals(monkeypatch, tmp_path):
  config, data, text = _run(performance_goals, monkeypatch, tmp_path)
  assert data["table_ratios"]["rows"][0]["missing"]  # no SAO/KAO results in tmp_path
  assert set(data["hardware"]) == {"sao", "kao_qkv"}
  assert len(data["ham_floor"]["forms"]) == len(bench_ops.HAM_FORMS)
  assert all(f["max_abs_difference"] < 1e-4 for f in data["ham_floor"]["forms"].values())
  assert data["relative"]["chunked_grads_finite"]
  official = data["ham_official"]
  assert "skipped" in official or official["max_rel_difference"] < 1e-4
  assert "met" in text


def test_prototypes_match_the_library_ops():
  q, k, v = (jax.random.normal(jax.random.key(i), (2, 5, 7, 3, 4)) for i in range(3))
  flat = lambda t: t.reshape(2, 35, 3, 4)
  w = jax.random.normal(jax.random.key(5), (3, 4))
  assert jnp.allclose(bench_ops.siamese_attention_before(flat(q), flat(k), flat(v), w),
                      ops.siamese_attention(flat(q), flat(k), flat(v), w), atol=1e-5)
  assert jnp.allclose(bench_ops.kronecker_attention_qkv_lean(q, k, v),
                      ops.kronecker_attention_qkv(q, k, v), atol=1e-5)
  x = jax.random.uniform(jax.random.key(6), (2, 35, 6))
  bases = ops.random_bases(jax.random.key(7), 2, 6, 3, distribution="uniform")
  for solver in (bench_ops.nmf_transposed_copy, bench_ops.nmf_dr_in_place,
                 bench_ops.nmf_unblocked):
    for before, after in zip(solver(x, bases, steps=3), ops.nmf(x, bases, steps=3)):
      assert jnp.allclose(before, after, atol=1e-5)
  layer = Hamburger(6, dim=8, rank=3, eval_steps=3, rngs=nnx.Rngs(0))
  layer.eval()
  image = jax.random.normal(jax.random.key(8), (2, 5, 7, 6))
  assert jnp.allclose(bench_ops.hamburger_reconstructing(layer, image), layer(image), atol=1e-5)


def test_ham_flops_count_every_solver_step():
  config = ham_table3.get_config("tiny")
  counts = []
  for steps in (1, 2, 3):
    config.ham_steps = steps
    counts.append(efficiency_modules.ham_flops("ham_nmf", 8, 4, config, "infer"))
  assert counts[2] - counts[1] == pytest.approx(counts[1] - counts[0]) and counts[1] > counts[0]


def test_unrolled_loops_ignores_and_leaves_no_cached_trace():
  def f(x):
    return jax.lax.fori_loop(0, 5, lambda _, y: y @ y, x)

  x = jnp.ones((16, 16))
  matmul = 2 * 16**3
  looped = measure.compile_fn(f, x)[1]["xla_flops"]  # traced first: in the jit cache
  with efficiency_modules.unrolled_loops():
    unrolled = measure.compile_fn(f, x)[1]["xla_flops"]
  assert looped < 2 * matmul and unrolled == 5 * matmul
  assert measure.compile_fn(f, x)[1]["xla_flops"] == looped


def test_double_attention_counts():
  block = efficiency_modules.DoubleAttention(16, 8, 4, rngs=nnx.Rngs(0))
  x = jnp.ones((1, 5, 6, 16))
  assert block(x).shape == x.shape
  # φ, θ, ρ: 16→8, 16→4, 16→4; out 8→16; all with bias.
  assert efficiency.params_of(block) == (16 * 8 + 8) + 2 * (16 * 4 + 4) + (8 * 16 + 16)


def test_sao_table5_whole_networks(monkeypatch, tmp_path):
  from configs.efficiency import sao_table5  # pylint: disable=g-import-not-at-top
  config, data, text = _run(sao_table5, monkeypatch, tmp_path)
  rows = {r["label"]: r for r in data["rows"]}
  assert set(rows) == {"MobileNetV2", "SANet"}
  for r in rows.values():
    m = r["memory"]
    assert m["peak_bytes"] == m["temp_bytes"] + m["arg_bytes"] + m["out_bytes"] - m["alias_bytes"]
    assert r["time_s"] > 0 and m["alias_bytes"] > 0  # parameters and momentum are donated
  assert rows["MobileNetV2"]["memory_ratio"] == 1.0
  assert rows["SANet"]["paper_time_ratio"] == pytest.approx(14.9 / 14.4)
  assert "Performance goal" in text
