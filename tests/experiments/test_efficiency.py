import json

import jax
import pytest

from configs.efficiency import kao_table1, sao_table2
from experiments import efficiency


@pytest.mark.parametrize("op", sorted(efficiency.OPERATORS))
def test_measure_counts_the_papers_madd(op):
  x = jax.random.normal(jax.random.key(0), (2, 6, 6, 1, 8))
  r = efficiency.measure(op, x, repeats=1)
  n, c = 36, 8
  expected = {"attn": 2 * n * n * c, "attn_pool": 2 * n * 9 * c, "attn_mean": 2 * n * c * c,
              "sao": 3 * n * c, "kao_kv": 2 * n * 12 * c, "kao_qkv": 2 * 12 * 12 * c}[op]
  assert r["madd"] == expected
  assert r["time_s"] > 0 and r["total_bytes"] >= r["temp_bytes"] >= 0


@pytest.mark.parametrize("module", [sao_table2, kao_table1])
def test_tiny_tables_write_results(module, monkeypatch, tmp_path):
  config = module.get_config("tiny")
  monkeypatch.setattr(efficiency, "_CONFIG", type("Flag", (), {"value": config})())
  monkeypatch.setattr(efficiency, "__file__", str(tmp_path / "efficiency.py"))
  efficiency.main([])
  rows = json.loads((tmp_path / "results" / f"{config.table}.json").read_text())["rows"]
  assert len(rows) == len(config.sizes) * len(config.operators)
  assert (tmp_path / "results" / f"{config.table}.png").stat().st_size > 0
  assert "speed-up" in (tmp_path / "results" / f"{config.table}.md").read_text()
