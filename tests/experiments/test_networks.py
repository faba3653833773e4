"""experiments.networks: whole networks' train steps beside PyTorch, at tiny sizes."""

import json

import pytest

from configs.efficiency import networks as networks_config
from experiments import networks


def _config(tmp_path, *entries, **fields):
  config = networks_config.get_config("tiny")
  config.out_dir = str(tmp_path)
  config.resnet50_pair = ("Plain", "timm resnet10t")
  small = {"width": 4, "in_channels": 3}
  config.entries = entries or (
      networks_config._entry("Plain", "jax", "attention_cnn", 2, 5, image_size=8,  # pylint: disable=protected-access
                             overrides={**small, "attention": "none"}),
      networks_config._entry("Siamese", "jax", "attention_cnn", 2, 5, image_size=8,  # pylint: disable=protected-access
                             baseline="Plain", overrides={**small, "attention": "siamese"}),
      networks_config._entry("timm resnet10t", "torch", "resnet10t", 2, 5, image_size=32,  # pylint: disable=protected-access
                             compile=False))
  config.update(fields)
  return config


def test_derived_columns_and_the_roofline():
  row = dict(batch=128, step_s=0.1, flops=2e14, xla_flops=1e14, xla_bytes=1.675e11)
  d = networks._derived(row, 989.4e12, 3.35e12)  # pylint: disable=protected-access
  assert d["images_per_s"] == pytest.approx(1280) and d["tflops"] == pytest.approx(2000)
  assert d["mfu"] == pytest.approx(2e15 / 989.4e12)
  # max(2e14 / 989.4e12 = 0.202 s, 1.675e11 / 3.35e12 = 0.05 s) / 0.1 s
  assert d["roofline_fraction"] == pytest.approx(2e14 / 989.4e12 / 0.1)
  assert networks._derived({**row, "xla_bytes": None}, None, None)["mfu"] is None  # pylint: disable=protected-access


def test_goals_compare_resnet50_and_the_overheads_with_timms(tmp_path):
  rows = [dict(label="Plain", framework="jax", images_per_s=100, step_s=1.0),
          dict(label="Siamese", framework="jax", images_per_s=80, step_s=1.25, baseline="Plain"),
          dict(label="timm resnet10t", framework="torch", images_per_s=125, step_s=0.8),
          dict(label="timm bot", framework="torch", images_per_s=100, step_s=1.2,
               baseline="timm resnet10t")]
  g = networks.goals(_config(tmp_path), rows)
  assert g["resnet50"]["ratio"] == pytest.approx(0.8) and not g["resnet50"]["met"]
  assert g["timm_overheads"] == {"timm bot": pytest.approx(1.5)}
  assert g["overheads"]["Siamese"]["overhead"] == pytest.approx(1.25)
  assert g["overheads"]["Siamese"]["met"] == {"timm bot": True}


def test_networks_beside_pytorch(tmp_path):
  if networks.torch_missing():
    pytest.skip(networks.torch_missing())
  config = _config(tmp_path)
  result = networks.run(config)
  rows = {r["label"]: r for r in result["rows"]}
  assert set(rows) == {"Plain", "Siamese", "timm resnet10t"} and not result["not_run"]
  for r in rows.values():
    assert r["images_per_s"] == pytest.approx(r["batch"] / r["step_s"]) and r["flops"] > 0
  assert rows["Plain"]["memory_bytes"] > 0 and rows["Plain"]["mode"] == "XLA (jit)"
  assert rows["timm resnet10t"]["mode"] == "eager (torch.compile not asked for)"
  assert "resnet50" in result["goals"] and "Siamese" in result["goals"]["overheads"]
  text = networks.markdown(config, result, "here")
  assert "| timm resnet10t | PyTorch: eager" in text and "PyTorch: not measured" not in text
  # Written after each entry, so a stopped run keeps its rows.
  saved = json.loads((tmp_path / "networks.json").read_text())
  assert saved["partial"] and len(saved["rows"]) == 3 and saved["commit"]


def test_without_torch_there_is_no_pytorch_row_and_the_table_says_so(tmp_path, monkeypatch):
  monkeypatch.setattr(networks, "torch_missing", lambda: "torch is not installed")
  config = _config(tmp_path)
  config.entries = config.entries[:1] + config.entries[2:]
  result = networks.run(config)
  assert [r["framework"] for r in result["rows"]] == ["jax"]
  text = networks.markdown(config, result, "here")
  assert "PyTorch: not measured (torch is not installed)" in text and "| PyTorch" not in text
  assert "ResNet-50 ≥ 1× PyTorch's images/s: not measured" in text


def test_the_budget_skips_entries_and_resume_keeps_the_measured_ones(tmp_path, monkeypatch):
  monkeypatch.setattr(networks, "torch_missing", lambda: "torch is not installed")
  config = _config(tmp_path, budget_s=1e-6)
  result = networks.run(config)
  assert not result["rows"] and result["incomplete"]
  assert all("over the budget" in n["reason"] for n in result["not_run"])
  config.budget_s = 0.0
  config.entries = config.entries[:1]
  first = networks.run(config)
  (tmp_path / "networks.json").write_text(json.dumps({**first, "commit": "abc"}))
  config.entries = _config(tmp_path).entries[:2]
  config.resume = True
  calls = []
  measured = dict(compile_s=1.0, step_s=1.0, flops=1.0, mode="XLA (jit)", xla_flops=None,
                  xla_bytes=None, memory_bytes=None, memory_source="XLA peak")
  monkeypatch.setattr(networks, "measure_jax",
                      lambda e, c: calls.append(e["label"]) or measured)
  again = networks.run(config)
  assert calls == ["Siamese"] and again["rows"][0]["kept_from"] == "abc"
  assert "| abc |" in networks.markdown(config, again, "here")
