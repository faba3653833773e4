"""The paper-recipes table: its cells, markdown and plot from saved rows (no compile)."""

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
