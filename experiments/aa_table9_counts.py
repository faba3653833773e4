"""AA Table 9's parameters and FLOPS per attention layer of AA-ResNet-50, by the paper's convention.

  python -m experiments.aa_table9_counts

The parameters are the attention branch's two 1×1 convolutions with dk = max(κ·Fout, 20·Nh) =
160 keys; the nearest FLOPS are 2 × the MAdd of the q/k/v and output convs, relative logits and
weights·v on the attention grid. Each term is checked against `nnx` counts and the traced jaxpr
of our AugmentedConv. The conventions tried: the notes of experiments/results/aa_table9_counts.md.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import cli
from attention_lab.layers.augmented_conv import AugmentedConv
from configs.efficiency import aa_table9
from experiments import measure, plots

# The layers and the paper's columns are the memory table's: configs/efficiency/aa_table9.py.
_CONFIG = aa_table9.get_config()
HEADS, MIN_KEY_DIMS = _CONFIG.heads, _CONFIG.min_key_dims_per_head
# (stage, layers, Fin = Fout, input side, attention side): ResNet-50's bottleneck 3×3 convs.
STAGES = tuple((s["name"], s["layers"], s["channels"], s["side"], s["attention_side"])
               for s in _CONFIG.stages)
_number = lambda text: float(text[:-1]) * {"k": 1e3, "M": 1e6}[text[-1]]  # "43k", "22M"
PAPER_PARAMS = tuple(_number(params) for _, (_, params, _) in _CONFIG.paper)
PAPER_FLOPS = tuple(_number(flops) for _, (_, _, flops) in _CONFIG.paper)
PAPER_TOTALS = (1.3e6, 390e6)  # 13 layers: parameters, FLOPS
PARAM_TERMS = ("qkv kernel", "output kernel")
FLOPS_TERMS = ("qkv conv", "output conv", "relative logits", "weights·v")


def _layer(cin, side, min_key_dims, downsample=False):
  return nnx.eval_shape(lambda: AugmentedConv(
      cin, cin, 3, kappa=_CONFIG.kappa, upsilon=_CONFIG.upsilon, heads=HEADS,
      min_key_dims_per_head=min_key_dims, downsample=downsample, spatial_shape=(side, side),
      rngs=nnx.Rngs(0)))


def depths(channels: int, min_key_dims: int) -> tuple[int, int]:
  """(dk, dv) as AugmentedConv rounds them."""
  layer = _layer(channels, 8, min_key_dims)
  return layer.dk, layer.dv


def param_terms(cin: int, dk: int, dv: int, side: int) -> dict[str, int]:
  """The attention branch's parameters, by term (the paper's code has conv biases)."""
  return {"qkv kernel": cin * (2 * dk + dv), "qkv bias": 2 * dk + dv, "output kernel": dv * dv,
          "output bias": dv, "relative tables": 2 * (2 * side - 1) * (dk // HEADS)}


def madd_terms(cin: int, dk: int, dv: int, side: int, qkv_side: int) -> dict[str, int]:
  """Multiply-adds of the attention branch per image, by term."""
  n = side * side
  return {"qkv conv": qkv_side ** 2 * cin * (2 * dk + dv), "output conv": n * dv * dv,
          "q·k logits": n * n * dk, "relative logits": 2 * n * (2 * side - 1) * dk,
          "weights·v": n * n * dv}


def measured(cin: int, side: int, attention_side: int,
             min_key_dims: int) -> tuple[int, int, int]:
  """(attention-branch parameters, attention-branch MAdd, whole-layer MAdd) of our
  AugmentedConv, from nnx and the traced jaxpr."""
  layer = _layer(cin, side, min_key_dims, downsample=attention_side < side)
  graphdef, state = nnx.split(layer)
  x = jax.ShapeDtypeStruct((1, side, side, cin), jnp.float32)
  attend = lambda s, x: nnx.merge(graphdef, s)._attend(x)  # pylint: disable=protected-access
  return (measure.params_of(layer) - measure.params_of(layer.conv),
          measure.madd_of(attend, state, x),
          measure.madd_of(lambda s, x: nnx.merge(graphdef, s)(x), state, x))


def counts() -> dict:
  """Per stage: ours (dk = κ·Fout), the paper's conventions (dk = 160), the checks of the terms."""
  r = dict(stages=[s[0] for s in STAGES], paper_params=PAPER_PARAMS, paper_flops=PAPER_FLOPS,
           paper_totals=PAPER_TOTALS, ours_params=[], ours_flops=[], convention_params=[],
           convention_flops=[], convention_flops_with_qk=[], checks=[])
  for name, _, c, s, a in STAGES:
    for min_key in (0, MIN_KEY_DIMS):  # the last pass leaves dk, dv, params of dk = 160
      dk, dv = depths(c, min_key)
      branch_params, branch_madd, layer_madd = measured(c, s, a, min_key)
      params = param_terms(c, dk, dv, a)
      r["checks"].append(dict(
          stage=name, dk=dk, dv=dv, params_nnx=branch_params,
          params_formula=sum(params[t] for t in (*PARAM_TERMS, "relative tables")),
          madd_jaxpr=branch_madd, madd_formula=sum(madd_terms(c, dk, dv, a, s).values()),
          layer_madd=layer_madd))
    r["ours_params"].append(r["checks"][-2]["params_nnx"])
    r["ours_flops"].append(r["checks"][-2]["layer_madd"])
    r["convention_params"].append(sum(params[t] for t in PARAM_TERMS))
    grid = madd_terms(c, dk, dv, a, a)  # q/k/v on the attention grid
    r["convention_flops"].append(2 * sum(grid[t] for t in FLOPS_TERMS))
    r["convention_flops_with_qk"].append(2 * sum(grid.values()))
  return r


def markdown(r) -> str:
  """The tables of a `counts()` record."""
  scaled = lambda vs, unit, spec: " | ".join(
      f"{v / {'k': 1e3, 'M': 1e6}[unit]:{spec}}{unit}" for v in vs)
  worst = lambda vs, paper: f"{100 * max(abs(v - p) / p for v, p in zip(vs, paper)):.1f}%"
  ours = lambda key, unit, paper: f"{scaled(r[key], unit, '.1f')} | {worst(r[key], paper)}"
  total = lambda key: sum(n * v for (_, n, *_), v in zip(STAGES, r[key])) / 1e6
  small = "/".join(str(c["dk"]) for c in r["checks"][::2])
  params, flops = r["paper_params"], r["paper_flops"]
  lines = [
      "# AA Table 9: the parameters and FLOPS columns", "",
      "Command: `python -m experiments.aa_table9_counts` (arithmetic; nothing is timed). The "
      "memory column is reproduced in [aa_table9.md](aa_table9.md). Plot: "
      "[aa_table9_counts.png](aa_table9_counts.png).", "",
      "AA-ResNet-50's attention layers (κ = 2υ = 0.2, Nh = 8; Fin = Fout = 128 / 256 / 512; "
      "attention on 14² / 14² / 7², stage 2 after 3×3/2 pooling), with dk = κ·Fout rounded to "
      f"a multiple of Nh ({small}) and dk = max(κ·Fout, 20·Nh) = 160 (AA Sec. 4.1's minimum "
      "of 20 key dimensions per head, which models/resnet.py's AA-ResNets use).", "",
      f"| per layer | dk | {' | '.join(r['stages'])} | worst Δ | "
      f"{sum(s[1] for s in STAGES)} layers |", "|---|---|---|---|---|---|---|",
      f"| paper parameters | | {scaled(params, 'k', 'g')} | | "
      f"{r['paper_totals'][0] / 1e6:g}M |",
      "| ours without the 20-per-head minimum (branch: qkv + output kernels + relative tables) "
      f"| {small} | {ours('ours_params', 'k', params)} | |",
      f"| paper's convention: {' + '.join(PARAM_TERMS)} | 160 | "
      f"{ours('convention_params', 'k', params)} | {total('convention_params'):.2f}M |",
      f"| paper FLOPS | | {scaled(flops, 'M', 'g')} | | {r['paper_totals'][1] / 1e6:g}M |",
      f"| ours in aa_table9.md: MAdd of the whole AA layer, 3×3 convolution included | {small} "
      f"| {ours('ours_flops', 'M', flops)} | |",
      f"| nearest convention: 2 × ({' + '.join(FLOPS_TERMS)}), q/k/v on the attention grid | "
      f"160 | {ours('convention_flops', 'M', flops)} | {total('convention_flops'):.0f}M |",
      "| the same with the q·k logits (N²·dk) | 160 | "
      f"{ours('convention_flops_with_qk', 'M', flops)} | |",
      "", "## Checks of the arithmetic", "",
      "| stage | dk / dv | params: nnx count of our layer / qkv + output kernels + tables "
      "| attention-branch MAdd: traced jaxpr / sum of the terms |", "|---|---|---|---|"]
  lines += [f"| {c['stage']} | {c['dk']} / {c['dv']} | {c['params_nnx']:,} / "
            f"{c['params_formula']:,} | {c['madd_jaxpr']:,} / {c['madd_formula']:,} |"
            for c in r["checks"]]
  return "\n".join(lines) + "\n"


def plot(r, path):
  """Parameters and FLOPS per stage: the paper's, ours and the nearest convention."""
  k, m = (lambda key: [v / 1e3 for v in r[key]]), (lambda key: [v / 1e6 for v in r[key]])
  return plots.grouped_bars(path, "AA Table 9 per attention layer of AA-ResNet-50", r["stages"], [
      ("parameters (k)", {"paper": k("paper_params"), "ours (dk = κ·Fout)": k("ours_params"),
                          "convs, dk = 160": k("convention_params")}),
      ("FLOPS (M)", {"paper": m("paper_flops"), "ours (whole AA layer MAdd)": m("ours_flops"),
                     "nearest convention": m("convention_flops")})])


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; this command takes no arguments")
  record = counts()
  print(measure.write(measure.RESULTS, "aa_table9_counts", record, markdown(record)))
  plot(record, measure.RESULTS / "aa_table9_counts.png")


if __name__ == "__main__":
  measure.run(main)
