"""The efficiency tables run end to end at tiny sizes and write their md / json (+ plots)."""

import json

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from attention_lab import ops
from configs.efficiency import (aa_table9, gan_largest_batch, ham_table3, isa_tables, kao_table1,
                                performance_goals, restoration_memory, sao_table2)
from experiments import efficiency, efficiency_modules, efficiency_operators, measure
from experiments import efficiency_fused as fused_lib

OPERATORS = efficiency_operators.OPERATORS


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_measure_counts_the_papers_madd(op):
  x = jax.ShapeDtypeStruct((2, 6, 6, 1, 8), jnp.float32)
  n, c = 36, 8
  expected = {"attn": 2 * n * n * c, "attn_pool": 2 * n * 9 * c, "attn_mean": 2 * n * c * c,
              "sao": 4 * n * c, "kao_kv": 2 * n * 12 * c, "kao_qkv": 2 * 12 * 12 * c}[op]
  assert measure.madd_of(OPERATORS[op], x) / 2 == expected
  acct = measure.compile_fn(OPERATORS[op], x)[1]
  assert acct["total_bytes"] >= acct["temp_bytes"] >= 0


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


def test_gan_largest_batch(monkeypatch, tmp_path):
  config, data, text = _run(gan_largest_batch, monkeypatch, tmp_path)
  assert data["rows"] == []
  (search,) = data["largest_batch"]
  rows = {r["variant"]: r for r in search["rows"]}
  assert set(rows) == {"sagan", "isagan"} and search["compiler"] == "XLA:CPU"
  for r in rows.values():  # doubling from `start` until one probe is over the budget
    assert [p["batch"] for p in r["probes"]] == [2**i for i in range(len(r["probes"]))]
    assert not r["probes"][-1]["fits"] and all(p["fits"] for p in r["probes"][:-1])
  assert rows["isagan"]["largest_batch"] >= rows["sagan"]["largest_batch"]
  assert "XLA:CPU (0.01 GiB)" in text


def test_gan_largest_batch_on_a_gpu_target_needs_the_cuda_plugin(monkeypatch, tmp_path):
  from attention_lab import devices  # pylint: disable=g-import-not-at-top
  if devices.cuda_plugin_installed():
    pytest.skip("the CUDA plugin is installed here")
  config = gan_largest_batch.get_config("tiny")
  config.largest_batch = ({"target": "gtx_1080_ti", "image_size": 32, "width": 4, "start": 1},)
  with pytest.raises(ValueError, match="CUDA plugin"):
    efficiency.table("gan").run(config)


def test_restoration_memory(monkeypatch, tmp_path):
  config, data, text = _run(restoration_memory, monkeypatch, tmp_path)
  rows = {r["label"]: r for r in data["rows"]}
  assert set(rows) == {"U-Net", "U-Net+Attn (query chunk 16)"}
  for r in rows.values():
    m = r["memory"]
    assert m["temp_bytes"] > 0 and m["alias_bytes"] > 0 and r["time_s"] is None
  assert rows["U-Net+Attn (query chunk 16)"]["memory_ratio"] > rows["U-Net"]["memory_ratio"] == 1
  assert "GiB" in text and "Performance goal" not in text


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
  assert all(r["library_over_pass"] > 0 for r in data["hardware"].values())
  floor = data["ham_floor"]
  assert floor["time_s"] > 0 and floor["ratio"] == pytest.approx(floor["time_s"] / floor["floor_s"])
  assert data["relative"]["chunked_grads_finite"]
  official = data["ham_official"]
  assert "skipped" in official or official["max_rel_difference"] < 1e-4
  assert "met" in text and "## Timing and calibration" in text


def test_a_goal_not_measured_is_shown_so_never_copied(monkeypatch, tmp_path):
  config = performance_goals.get_config("tiny")
  config.out_dir = str(tmp_path)
  (tmp_path / "performance_goals.json").write_text(json.dumps(
      {"hardware": {"sao": {"met": True}}, "relative": {"met": True}}))  # an earlier run's
  config.goals = ("ham_memory",)
  monkeypatch.setattr(efficiency, "_CONFIG", type("Flag", (), {"value": config})())
  efficiency.main([])
  data = json.loads((tmp_path / "performance_goals.json").read_text())
  assert data["hardware"] == data["relative"] == {"skipped": "not in config.goals of this run"}
  assert "met" in data["ham_memory"]
  text = (tmp_path / "performance_goals.md").read_text()
  assert "## hardware: not measured (not in config.goals of this run)" in text


def test_ham_flops_count_every_solver_step():
  config = ham_table3.get_config("tiny")
  counts = []
  for steps in (1, 2, 3):
    config.ham_steps = steps
    counts.append(efficiency_modules.ham_flops("ham_nmf", 8, 4, config, "infer"))
  assert counts[2] - counts[1] == pytest.approx(counts[1] - counts[0]) and counts[1] > counts[0]


def test_count_madd_multiplies_a_scan_body_by_its_length():
  def f(x):
    return jax.lax.scan(lambda y, _: (y @ y, None), x, length=5)[0]

  x = jax.ShapeDtypeStruct((16, 16), jnp.float32)
  assert measure.madd_of(f, x) == 5 * 16**3
  assert measure.madd_of(lambda x: jax.lax.conv(x, x, (1, 1), "VALID"),
                         jax.ShapeDtypeStruct((1, 2, 5, 5), jnp.float32)) == 2 * 25


def test_double_attention_counts():
  block = efficiency_modules.DoubleAttention(16, 8, 4, rngs=nnx.Rngs(0))
  x = jnp.ones((1, 5, 6, 16))
  assert block(x).shape == x.shape
  # φ, θ, ρ: 16→8, 16→4, 16→4; out 8→16; all with bias.
  assert measure.params_of(block) == (16 * 8 + 8) + 2 * (16 * 4 + 4) + (8 * 16 + 16)


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


# ----------------------------------------------------------------------------------------------
# The device's fused regular attention (experiments/efficiency_fused.py).

# The H100's published facts as XLA's GpuTargetConfigProto text, for a compile-only device.
_H100_TARGET = """
gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132
  fpus_per_core: 128 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: 3352320000000 l2_cache_size: 52428800
  clock_rate_ghz: 1.98 device_memory_size: 84942979072 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536
  registers_per_block_limit: 65536 runtime_version: "12.8.0"
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 patch: 0 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def _h100():
  """A compile-only H100 (jax's CUDA plugin with cuDNN, no GPU needed), or skip."""
  pytest.importorskip("jax_cuda12_plugin", reason="needs jax's CUDA plugin (jax[cuda12])")
  pytest.importorskip("jax_cuda12_plugin._versions", reason="jax's CUDA plugin has no cuDNN")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    topology = topologies.get_topology_desc(platform="cuda", target_config=_H100_TARGET,
                                            topology="1x1x1")
  except Exception as e:  # pylint: disable=broad-except
    pytest.skip(f"no compile-only CUDA device: {e}")
  return topology.devices[0]


@pytest.mark.parametrize("program", ["forward", "train"])
def test_cudnn_row_compiles_to_cudnn_flash_attention_for_an_h100(program):
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  device = _h100()
  mesh = jax.sharding.Mesh([device], ("data",))
  x = jax.ShapeDtypeStruct((2, 16, 16, 2, 64), jnp.bfloat16,
                           sharding=NamedSharding(mesh, PartitionSpec("data")))
  flat = x.shape[0], 256, 2, 64
  assert fused_lib.unsupported_reason("cudnn", *(jax.ShapeDtypeStruct(flat, x.dtype),) * 3,
                                      compute_capability=(9, 0)) is None
  fn = efficiency_operators._fused_operator("cudnn")  # pylint: disable=protected-access
  if program == "train":
    fn = jax.grad(lambda x: fn(x).astype(jnp.float32).sum())
  hlo = jax.jit(fn).lower(x).compile().as_text()
  assert "__cudnn$fmha" in hlo
  if program == "train":
    assert "Backward" in hlo


def test_fused_rules_name_the_reason():
  s = lambda shape, dtype=jnp.bfloat16: jax.ShapeDtypeStruct(shape, dtype)
  q = s((1, 196, 1, 64))
  assert fused_lib.unsupported_reason("cudnn", q, q, q) is None
  assert "float32" in fused_lib.unsupported_reason("cudnn", *(s((1, 196, 1, 64), jnp.float32),) * 3)
  big = s((1, 196, 1, 256))
  assert "head dim 256" in fused_lib.unsupported_reason("cudnn", big, big, big)
  assert fused_lib.unsupported_reason("cudnn", big, big, big, compute_capability=(9, 0)) is None
  assert "multiple of 8" in fused_lib.unsupported_reason("cudnn", *(s((1, 196, 1, 12)),) * 3)
  odd = s((1, 195, 1, 64))
  assert "even" in fused_lib.unsupported_reason("cudnn", odd, odd, odd, bias=odd, training=True)
  assert fused_lib.unsupported_reason("pallas", odd, odd, odd) is None  # padded and masked
  assert "≠" in fused_lib.unsupported_reason("pallas", q, q, s((1, 196, 1, 32)))
  assert "multiple of 128" in fused_lib.unsupported_reason("pallas", *(s((1, 9, 1, 192)),) * 3)
  assert fused_lib.kernel_for("cpu") is None
  assert fused_lib.kernel_for("gpu") == "cudnn" and fused_lib.kernel_for("tpu") == "pallas"


def _pallas_reference(q, k, v, *, scale=None, bias=None):
  from jax.experimental.pallas.ops.tpu import flash_attention as fa  # pylint: disable=g-import-not-at-top
  return fused_lib.pallas_attention(q, k, v, scale=scale, bias=bias, kernel=fa.mha_reference)


def test_pallas_padding_and_bias_match_regular_attention():
  # Lengths 37 / 29 are padded to 128 and masked with segment ids; the kernel's reference
  # (same arguments, any backend) stands in for the TPU kernel.
  keys = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(keys[0], (2, 37, 3, 8))
  k, v = (jax.random.normal(kk, (2, 29, 3, 8)) for kk in keys[1:3])
  bias = jax.random.normal(keys[3], (1, 3, 37, 29))
  expected = ops.dot_product_attention(q, k, v, scale=0.3, bias=bias)
  assert jnp.allclose(_pallas_reference(q, k, v, scale=0.3, bias=bias), expected, atol=1e-5)


def test_a_layer_attends_through_the_kernel_as_its_attention_fn(monkeypatch):
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  build = lambda **fused: layers.GlobalAttention(8, "softmax", num_heads=2, project="qkv",
                                                 out_features=8, rngs=nnx.Rngs(0), **fused)
  x = jax.random.normal(jax.random.key(1), (2, 5, 6, 8))
  calls = []

  def kernel(q, k, v, *, scale=None, bias=None):
    calls.append(q.shape)
    return _pallas_reference(q, k, v, scale=scale, bias=bias)

  monkeypatch.setitem(fused_lib.KERNEL_FUNCTIONS, "pallas", kernel)
  got = build(attention_fn=fused_lib.regular_attention("pallas"))(x)
  assert calls == [(2, 30, 2, 4)]
  assert jnp.allclose(got, build()(x), atol=1e-5)
  odd = jax.ShapeDtypeStruct((1, 9, 1, 192), jnp.float32)  # the kernel's rules exclude it
  with pytest.raises(NotImplementedError, match="multiple of 128"):
    fused_lib.regular_attention("pallas")(odd, odd, odd)


def test_operator_tables_have_no_fused_rows_on_a_cpu(monkeypatch, tmp_path):
  _, data, text = _run(kao_table1, monkeypatch, tmp_path)
  assert data["fused"] == [] and "none on this device" in text


def test_tables_add_a_fused_kernel_beside_xla(monkeypatch, tmp_path):
  # The Pallas kernel's reference stands in for the TPU kernel, so the rows run on a CPU.
  monkeypatch.setitem(fused_lib.KERNEL_FUNCTIONS, "pallas", _pallas_reference)
  config = kao_table1.get_config("tiny")
  config.fused_attention = "pallas"
  config.sweep_sides = ()
  result = efficiency_operators.run(config)
  assert [f["side"] for f in result["fused"]] == [side for side, _ in config.sizes]
  for f in result["fused"]:
    assert f["reason"] is None and f["time_s"] > 0 and f["fastest"] in ("attn", "fused")
    assert f["speedup_vs_fastest_regular"]["attn"] == pytest.approx(
        min(f["xla_attn_time_s"], f["time_s"]) / f["xla_attn_time_s"])
  text = "\n".join(efficiency_operators.fused_lines(result, config.operators))
  assert "Attn (Pallas flash)" in text and "not run" not in text
  config = ham_table3.get_config("tiny")
  config.fused_attention = "pallas"
  config.sweep_sides = ()
  rows = {r["module"]: r for r in efficiency_modules.run(config)["rows"]}
  assert rows["sa_fused"]["infer"]["time_s"] > 0
  assert rows["sa_fused"]["train"]["total_bytes"] > 0
  assert rows["sa_fused"]["madd"] == rows["sa"]["madd"]  # the regular SA's count
  config.fused_attention = "cudnn"  # float32: excluded by cuDNN's rules, with the reason
  assert "float32" in efficiency_modules._fused_module(config)[1]


def test_relative_attention_with_a_bias_matches_the_library_op():
  from experiments import efficiency_aa  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(jax.random.key(2), 5)
  q, k = (jax.random.normal(kk, (1, 3, 4, 2, 8)) for kk in keys[:2])
  v = jax.random.normal(keys[2], (1, 3, 4, 2, 8))
  rel_h = jax.random.normal(keys[3], (5, 8))
  rel_w = jax.random.normal(keys[4], (7, 8))
  got = efficiency_aa.relative_attention_with_bias(_pallas_reference, q, k, v, rel_h, rel_w)
  expected = ops.relative_attention_2d(q, k, v, rel_h, rel_w).reshape(1, 12, 2, 8)
  assert jnp.allclose(got, expected, atol=1e-4)


def test_regenerating_a_table_keeps_its_notes(tmp_path):
  (tmp_path / "t.md").write_text(f"# old table\n\n{measure.NOTES}\n\n## Notes\n\nwhy\n")
  text = measure.write(tmp_path, "t", {"rows": []}, "# new table\n")
  assert text == f"# new table\n\n{measure.NOTES}\n\n## Notes\n\nwhy\n"
  assert (tmp_path / "t.md").read_text() == text
  assert json.loads((tmp_path / "t.json").read_text()) == {"rows": [], "commit": measure.commit()}


def test_a_bad_config_value_is_one_line_and_exit_status_2(monkeypatch, capsys):
  config = kao_table1.get_config("tiny")
  config.kind = "nope"
  monkeypatch.setattr(efficiency, "_CONFIG", type("Flag", (), {"value": config})())
  monkeypatch.setattr("sys.argv", ["efficiency"])
  with pytest.raises(SystemExit) as exit_:
    measure.run(efficiency.main)
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.startswith("error: config.kind = 'nope': must be one of") and err.count("\n") == 1


def test_a_bfloat16_table_has_its_own_files_and_command():
  config = sao_table2.get_config("tiny")
  assert measure.output_stem(config) == "sao_table2"
  config.dtype = "bfloat16"
  assert measure.output_stem(config) == "sao_table2_bfloat16"
  assert measure.command_of(config).endswith("sao_table2.py --config.dtype=bfloat16")


def test_layers_train_through_cudnn_flash_attention_for_an_h100():
  # The path of Ham Table 3's SA and SAO Table 5's AttnNet with the fused kernel on a GPU.
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  mesh = jax.sharding.Mesh([_h100()], ("data",))
  layer = nnx.eval_shape(lambda: layers.GlobalAttention(
      64, "softmax", num_heads=2, project="qkv", out_features=64, dtype=jnp.bfloat16,
      attention_fn=fused_lib.regular_attention("cudnn"), rngs=nnx.Rngs(0)))
  step, params, rest = measure.training_fn(layer)
  placed = lambda tree, spec=PartitionSpec(): jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, spec)), tree)
  x = placed(jax.ShapeDtypeStruct((2, 8, 8, 64), jnp.float32), PartitionSpec("data"))
  hlo = jax.jit(step).lower(placed(params), placed(rest), x, x).compile().as_text()
  assert "__cudnn$fmha" in hlo and "Backward" in hlo
