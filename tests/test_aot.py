"""`python -m attention_lab.aot` on the tiny config for a 2x2 v5e slice (needs libtpu:
`pip install -e '.[tpu]'`; skipped without it)."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="libtpu is not installed (pip install -e '.[tpu]')")


def _aot(tmp_path, out, *args):
  return subprocess.run(
      [sys.executable, "-m", "attention_lab.aot", "--config=configs/default.py:tiny",
       "--topology=v5e:2x2", f"--json={out}", f"--config.dataset.data_dir={tmp_path / 'tfds'}",
       *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_tiny_config_on_v5e_2x2_and_a_batch_that_does_not_fit(tmp_path):
  out = tmp_path / "fits.json"
  result = _aot(tmp_path, out)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "4 × TPU v5 lite, global batch 16 (4 per device), 4,898 parameters" in result.stdout
  r = json.loads(out.read_text())
  assert r["fits"] and r["compiled"] and r["flops"] > 0 and r["step_time_s"] > 0
  assert r["argument_bytes"] >= 4 * 32 * 32 * 4 + 4898 * 4  # images and parameters

  out = tmp_path / "too_big.json"
  # 2^20 digits of 32x32 at width 8: about 90 GB of temporaries per chip.
  result = _aot(tmp_path, out, "--config.batch_size=1048576")
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
  assert "does not fit in 16 GiB of TPU v5 lite HBM on v5e:2x2" in result.stderr
  assert "4 × TPU v5 lite, global batch 1048576 (262144 per device)" in result.stdout
  r = json.loads(out.read_text())
  assert r["topology"] == "v5e:2x2" and r["chips"] == 4 and r["global_batch"] == 2**20
  assert r["hbm_bytes"] == 16 * 2**30 and not r["fits"]
  assert r["argument_bytes"] >= 2**18 * 32 * 32 * 4  # this chip's images, float32
  assert r["output_bytes"] > 0 and r["temp_bytes"] > r["hbm_bytes"] and not r["compiled"]
  total = r["argument_bytes"] + r["output_bytes"] + r["temp_bytes"] - r["alias_bytes"]
  assert r["total_bytes"] == total > r["hbm_bytes"]
