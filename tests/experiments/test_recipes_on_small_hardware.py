"""The paper-recipes table: its cells, markdown and plot from saved rows (no compile)."""

import re

import pytest

from experiments import recipes_on_small_hardware as recipes


def test_cells_markdown_and_plot(tmp_path):
  table = {"sanet": {"h100": {"k": 1, "gib": 34.4, "ms": 363.0},
                     "rtx_4090": {"k": 4, "gib": 12.5, "ms": 990.0},
                     "v5e:2x4": {"k": None, "gib": 40.0, "ms": 1.0},
                     "v5e:4x4": {"error": "bn_group_size = 80: must divide"}}}
  text = recipes.markdown(table)
  row = next(line for line in text.splitlines() if line.startswith("| sanet |"))
  assert "k=1: 34.4 GiB, 363 ms" in row and "k=4: 12.5 GiB, 990 ms" in row
  assert "no k fits (40.0 GiB at k=1)" in row and "error: bn_group_size" in row
  assert text.count("not measured") == (len(recipes.ROWS) - 1) * len(recipes.TARGETS)
  recipes.plot(table, tmp_path / "plot.png")
  assert (tmp_path / "plot.png").stat().st_size > 1000


def test_groups_spanning_chips_and_too_small_batches_are_compiled_as_they_can_run(monkeypatch):
  """aot compiles the paper's groups on more chips than the paper's GPUs as groups of one
  chip's share, and refuses a batch the chips do not divide: the cell is then compiled on as
  many chips as divide the batch; the cell says which."""
  calls = []

  def aot(config, target, *overrides):
    calls.append(overrides)
    return {"fits": True, "microbatches": 1, "total_bytes": 3 * 2**30, "step_time_s": 0.05,
            "global_batch": 640, "chips": 16, "bn_group_size": 40,
            "paper_bn_group_size": 80}, ""

  monkeypatch.setattr(recipes, "_aot", aot)
  c = recipes.cell("configs/sanet/imagenet.py", "v5e:4x4")
  assert calls == [()]  # aot adapts the groups itself: no second compile
  assert (c["bn_group_size"], c["paper_bn_group_size"], c["k"]) == (40, 80, 1)
  assert {"40", "80"} <= set(re.findall(r"\d+", recipes.text(c)))  # it says so
  few = ("error: batch_size = 8: must be divisible by the number of devices in the mesh (16) "
         "(--debug shows the traceback)")
  figures = {"fits": True, "microbatches": 1, "total_bytes": 2**30, "step_time_s": 0.03}
  calls.clear()

  def aot_on_fewer_chips(config, target, *overrides):
    calls.append(overrides)
    return (None, few) if not overrides else ({**figures, "global_batch": 8, "chips": 8}, "")

  monkeypatch.setattr(recipes, "_aot", aot_on_fewer_chips)
  c = recipes.cell("configs/kanet/voc_deeplab.py", "v5e:4x4")
  assert calls == [(), ("--config.mesh.num_devices=8",)]
  assert c == pytest.approx({"k": 1, "gib": 1.0, "ms": 30.0, "batch": 8, "chips": 8,
                             "chips_used": 8, "chips_in_slice": 16})
  assert {"8", "16"} <= set(re.findall(r"\d+", recipes.text(c)))
  monkeypatch.setattr(recipes, "_aot", lambda *a: (None, "error: --topology = 'x': unknown "
                                                   "(--debug shows the traceback)"))
  assert recipes.cell("c", "x") == {"error": "--topology = 'x': unknown"}
