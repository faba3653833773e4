"""The papers' efficiency tables, measured from config files, beside the papers' numbers.

  python -m experiments.efficiency --config=configs/efficiency/<table>.py[:tiny]

`config.kind` picks the table's module (`KINDS`); each has `run(config) -> result`,
`markdown(config, result, machine_line) -> str` and `plot(config, result, path,
machine_line)`, which draws the table's plot and returns the markdown line that links it (or
None). The conventions are experiments/measure.py's: MAdd counts every dot product and
convolution (the papers' profilers'), memory is XLA's memory_analysis, time the device's
(`measure.time_side_by_side`: CUPTI or a profiler trace on an accelerator, wall time on the
CPU). A table that times programs ends with its timing method and the calibration rows
(`measure.calibration`). On a GPU / TPU regular attention also runs through the device's
fused kernel (experiments/efficiency_fused.py). Writes
experiments/results/<table>[_<dtype>].{md,json,png}; `render_only` re-renders the saved json.
"""

import json

from ml_collections import config_flags

from experiments import (efficiency_aa, efficiency_gan, efficiency_modules, efficiency_nets,
                         efficiency_operators, measure, networks, performance_goals)

KINDS = {"operators": efficiency_operators, "modules": efficiency_modules, "gan": efficiency_gan,
         "aa": efficiency_aa, "nets": efficiency_nets, "performance_goals": performance_goals,
         "networks": networks}
_CONFIG = None  # the --config flag, defined when run (tests import this module beside others)


def table(kind: str):
  """The module of a table kind."""
  if kind not in KINDS:
    raise ValueError(f"config.kind = {kind!r}: must be one of {'|'.join(KINDS)}")
  return KINDS[kind]


def times_programs(config) -> bool:
  """Whether a table times anything (AA Table 9 and the memory-only tables do not)."""
  return (config.kind != "aa" and config.get("time_batch", 1) != 0
          and config.get("timed", True))


def main(argv):
  del argv
  config = _CONFIG.value
  out_dir, stem = measure.out_dir_of(config), measure.output_stem(config)
  module = table(config.kind)
  if config.get("render_only", False):
    result = json.loads((out_dir / f"{stem}.json").read_text())
  else:
    result = {**module.run(config), "machine": measure.machine()}
    if times_programs(config):
      result["calibration"] = measure.calibration(config.get("calibration", ""))
  result["config"] = config.to_dict()
  machine = measure.machine_line(result["machine"])
  text = module.markdown(config, result, machine)
  text += "".join(line + "\n" for line in measure.timing_lines(result.get("calibration")))
  link = module.plot(config, result, out_dir / f"{stem}.png", machine)
  if link:
    text += "\n" + link + "\n"
  print(measure.write(out_dir, stem, result, text))


if __name__ == "__main__":
  _CONFIG = config_flags.DEFINE_config_file("config", None, "Efficiency table config.")
  measure.run(main)
