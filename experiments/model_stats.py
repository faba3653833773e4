"""Parameters and MAdd of the paper models beside the papers' tables.

  python -m experiments.model_stats               # SAO T3/4/6/8, KAO T2-4, AA T1-4
  python -m experiments.model_stats segmentation  # KAO T5, Ham T1-2/4 at 513²

Parameters of `nnx.eval_shape` models (nothing allocated); MAdd: one per term of every
convolution and dot product of the traced forward pass at batch 1 (the papers' GFlops are
2 × MAdd). Writes experiments/results/{model_stats,segmentation_models}.{md,json,png}; why
rows differ from the papers: the notes of model_stats.md.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import cli, models
from attention_lab.models import segmentation  # noqa: F401  (registers the names)
from configs.hamburger import ade20k_hamnet
from experiments import measure, plots

KERNEL_NAMES = ("kernel", "w")
_IMAGENET = dict(input=(224, 224, 3), classes=1000)

# Per table: input, classes, rows (label, registry name, paper params, paper MAdd[, overrides]);
# None where the paper gives no number. The papers count kernels and the SAO w (SAO Table 8's
# SANet 3,449,408 exactly), or every trainable parameter where params="all".
TABLES = {
    "SAO Tables 3, 6, 8 (ImageNet, 224², 1000 classes)": dict(_IMAGENET, rows=[
        ("MobileNetV2", "mobilenet_v2", 3.47e6, 300e6),
        ("SANet", "sanet", 3_449_408, 288e6),
        ("SANet w/o SAO", "sanet_no_sao", None, None),
        ("SANet w/o global term", "sanet_no_global", 3.44e6, None),
        ("SANet, w fixed to ones", "sanet_ones_w", 3_448_448, None),
        ("MobileNetV2 + SAO", "mobilenet_v2_sao", 3.47e6, None),
        ("SENet", "senet", 3.44e6, 294e6),
        ("AttnNet", "attnnet", 3.44e6, 365e6),
        ("AttnNet + Pool", "attnnet_pool", 3.44e6, 300e6),
        ("AttnNet 1/N", "attnnet_mean", 3.44e6, 312e6)]),
    "KAO Tables 2-4 (ImageNet, 224², 1000 classes)": dict(_IMAGENET, rows=[
        ("KANet_KV", "kanet_kv", 3.44e6, 288e6),
        ("KANet_QKV", "kanet_qkv", 3.44e6, 281e6),
        ("MobileNetV2 + KAO", "mobilenet_v2_kao", 3.46e6, 298e6),
        ("KANet w/o KAO", "kanet_no_kao", 3.46e6, 298e6)]),
    "AA Table 1 (CIFAR-100, 32², 100 classes)": dict(input=(32, 32, 3), classes=100, rows=[
        ("Wide-ResNet-28-10", "wide_resnet28_10", 36.3e6, 10.4e9 / 2),
        ("GE-Wide-ResNet", "ge_wide_resnet28_10", 36.3e6, 10.4e9 / 2),
        ("SE-Wide-ResNet", "se_wide_resnet28_10", 36.5e6, 10.4e9 / 2),
        ("AA-Wide-ResNet", "aa_wide_resnet28_10", 36.2e6, 10.9e9 / 2)]),
    "AA Tables 2, 3, 6 (ImageNet, 224², 1000 classes)": dict(_IMAGENET, params="all", rows=[
        ("ResNet-34", "resnet34", 21.8e6, 7.4e9 / 2),
        ("SE-ResNet-34", "se_resnet34", 22.0e6, 7.4e9 / 2),
        ("AA-ResNet-34", "aa_resnet34", 20.7e6, 7.1e9 / 2),
        ("ResNet-50", "resnet50", 25.6e6, 8.2e9 / 2),
        ("SE-ResNet-50", "se_resnet50", 28.1e6, 8.2e9 / 2),
        ("AA-ResNet-50", "aa_resnet50", 25.8e6, 8.3e9 / 2),
        ("ResNet-101", "resnet101", 44.5e6, 15.6e9 / 2),
        ("SE-ResNet-101", "se_resnet101", 49.3e6, 15.6e9 / 2),
        ("AA-ResNet-101", "aa_resnet101", 45.4e6, 16.1e9 / 2),
        ("ResNet-152", "resnet152", 60.2e6, 23.0e9 / 2),
        ("SE-ResNet-152", "se_resnet152", 66.8e6, 23.1e9 / 2),
        ("AA-ResNet-152", "aa_resnet152", 61.6e6, 23.8e9 / 2),
        ("AA-ResNet-50, κ=υ=0.25 (Table 2 AA υ=0.25, Table 6)", "aa_resnet50", 24.3e6,
         7.9e9 / 2, dict(kappa=0.25, upsilon=0.25)),
        ("AA-ResNet-50, κ=υ=0.5", "aa_resnet50", 22.3e6, 7.3e9 / 2, dict(kappa=0.5, upsilon=0.5)),
        ("AA-ResNet-50, κ=υ=0.75", "aa_resnet50", 20.7e6, 6.8e9 / 2,
         dict(kappa=0.75, upsilon=0.75)),
        ("AA-ResNet-50, κ=υ=1.0", "aa_resnet50", 19.4e6, 6.3e9 / 2,
         dict(kappa=1.0, upsilon=1.0))]),
    "AA Table 4 (MnasNet-A1, ImageNet, 224², 1000 classes)": dict(_IMAGENET, params="all", rows=[
        ("MnasNet-0.75", "mnasnet_a1", 2.91e6, 0.45e9 / 2, dict(width=0.75)),
        ("AA-MnasNet-0.75", "aa_mnasnet_a1", 3.02e6, 0.51e9 / 2, dict(width=0.75)),
        ("MnasNet-1.0", "mnasnet_a1", 3.89e6, 0.63e9 / 2, dict(width=1.0)),
        ("AA-MnasNet-1.0", "aa_mnasnet_a1", 4.06e6, 0.70e9 / 2, dict(width=1.0)),
        ("MnasNet-1.25", "mnasnet_a1", 5.26e6, 1.01e9 / 2, dict(width=1.25)),
        ("AA-MnasNet-1.25", "aa_mnasnet_a1", 5.53e6, 1.11e9 / 2, dict(width=1.25)),
        ("MnasNet-1.4", "mnasnet_a1", 6.10e6, 1.17e9 / 2, dict(width=1.4)),
        ("AA-MnasNet-1.4", "aa_mnasnet_a1", 6.44e6, 1.29e9 / 2, dict(width=1.4))]),
}

# The segmentation models at 513² (label, name, classes, overrides, paper params): the Ham
# paper gives the ablation model's (Table 2: baseline 32.67M, Hamburger +0.50M), KAO none.
_ABLATION = dict(depth=50, output_stride=16, stem="standard", multi_grid=(1,))
SEGMENTATION = [
    ("DeepLabV2 ASPP (ResNet-101, OS 8) — KAO T5", "deeplab_v2", 21, dict(head="aspp"), None),
    ("DeepLabV2 + Attn — KAO T5", "deeplab_v2", 21, dict(head="attention"), None),
    ("DeepLabV2 + KAO_KV — KAO T5", "deeplab_v2", 21, dict(head="kronecker_kv"), None),
    ("DeepLabV2 + KAO_QKV — KAO T5", "deeplab_v2", 21, dict(head="kronecker_qkv"), None),
    ("HamNet (ResNet-101, OS 8, deep stem, VOC) — Ham T4", "hamnet", 21, {}, None),
    ("HamNet ADE20K (150 classes, ResNetV1c 32-32-64 stem, + FCN aux head)", "hamnet", 150,
     dict(aux_head=True, stem_widths=ade20k_hamnet.get_config().model.stem_widths), None),
    ("Ham ablation baseline (ResNet-50, OS 16, no Hamburger) — Ham T2", "hamnet", 21,
     dict(_ABLATION, ham_options={"without": ("hamburger",)}), 32.67e6),
    ("Ham ablation basic (ResNet-50, OS 16, NMF) — Ham T2", "hamnet", 21, _ABLATION,
     32.67e6 + 0.50e6),
]


def build_abstract(name, num_classes=1000, **overrides):
  return nnx.eval_shape(
      lambda: models.create(name, num_classes=num_classes, rngs=nnx.Rngs(0), **overrides))


def count_params(model) -> tuple[int, int]:
  """(all trainable parameters, kernels + SAO w only)."""
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  sizes = [(path[-1], math.prod(v.get_value().shape)) for path, v in flat]
  return sum(s for _, s in sizes), sum(s for n, s in sizes if n in KERNEL_NAMES)


def _eval_forward(model):
  """(pure forward(state, x) in evaluation mode, its state) of a copy: `model` keeps its mode."""
  return measure.inference_fn(nnx.merge(*nnx.split(model)))


def forward_madd(model, input_shape) -> int:
  """MAdd of one forward pass at batch 1, from the traced jaxpr alone (no compilation)."""
  forward, state = _eval_forward(model)
  x = jax.ShapeDtypeStruct((1, *input_shape), jnp.float32)
  return measure.madd_of(forward, state, x)


def classification() -> list[dict]:
  """A record per row of TABLES; beside the MAdd, XLA's flops/2 (norms, activations too)."""
  records = []
  for title, table in TABLES.items():
    x = jax.ShapeDtypeStruct((1, *table["input"]), jnp.float32)
    for label, name, paper_params, paper_madd, *overrides in table["rows"]:
      model = build_abstract(name, table["classes"], **(overrides[0] if overrides else {}))
      (total, kernels), (forward, state) = count_params(model), _eval_forward(model)
      records.append(dict(table=title, label=label, model=name, params_all=total,
                          params_paper_convention=kernels, paper_params=paper_params,
                          madd=measure.madd_of(forward, state, x),
                          xla_flops_half=measure.compile_fn(forward, state, x)[1]["xla_flops"] / 2,
                          paper_madd=paper_madd))
      print(records[-1], flush=True)
  return records


def _ours_params(record) -> int:
  """The parameter count by the record's paper's convention."""
  return record["params_all" if TABLES[record["table"]].get("params") == "all"
                else "params_paper_convention"]


def classification_md(records) -> str:
  delta = lambda ours, paper: "" if paper is None else f"{100 * (ours - paper) / paper:+.2f}%"
  ours = _ours_params
  millions = lambda key, spec=".1f": lambda r: measure.fmt(r[key] and r[key] / 1e6, spec, "m")
  columns = {"model": lambda r: r["label"], "registry name": lambda r: f"`{r['model']}`",
             "params (all)": lambda r: f"{r['params_all']:,}",
             "params (paper conv.)": lambda r: f"{r['params_paper_convention']:,}",
             "paper params": lambda r: measure.fmt(r["paper_params"], ",.0f"),
             "params Δ": lambda r: delta(ours(r), r["paper_params"]),
             "MAdd": millions("madd"), "XLA flops/2": millions("xla_flops_half"),
             "paper MAdd": millions("paper_madd", ".0f"),
             "MAdd Δ": lambda r: delta(r["madd"], r["paper_madd"])}
  lines = ["# Model parameters and MAdd beside the papers", "",
           "Params (paper convention) = conv/linear kernels + SAO w, no biases or batch norm; "
           "MAdd = multiply-adds of convolutions and dot products at batch 1 (XLA's own "
           "flops/2, which also counts norms and activations, beside it)."]
  for title in TABLES:
    lines += ["", f"## {title}", "",
              *measure.md_table(columns, [r for r in records if r["table"] == title])]
  return "\n".join(lines + ["", "Plot (ours − paper per row, %): "
                                "[model_stats.png](model_stats.png)", ""])


def segmentation_models() -> list[dict]:
  """A record per row of SEGMENTATION: all trainable parameters, MAdd at 513²."""
  records = []
  for label, name, classes, overrides, paper in SEGMENTATION:
    model = build_abstract(name, classes, **overrides)
    records.append(dict(model=label, params=count_params(model)[0], paper_params=paper,
                        madd=forward_madd(model, (513, 513, 3))))
    print(records[-1], flush=True)
  return records


def segmentation_md(records) -> str:
  return "\n".join([
      "# Segmentation models: parameters and MAdd at 513×513", "",
      "All trainable parameters (BN included); MAdd of convolutions and dot products at batch "
      "1 from the traced forward pass (experiments/model_stats.py).", "",
      *measure.md_table({
          "model": lambda r: r["model"],
          "params": lambda r: f"{r['params'] / 1e6:.2f}M ({r['params']:,})",
          "paper params": lambda r: measure.fmt(r["paper_params"] and r["paper_params"] / 1e6,
                                                ".2f", "M", "—"),
          "MAdd at 513²": lambda r: f"{r['madd'] / 1e9:.1f}G"}, records),
      "", "Plot (parameters and MAdd per model): [segmentation_models.png]"
      "(segmentation_models.png)", ""])


def classification_plot(records, path):
  """Ours − paper (%) of the parameters and MAdd, per row with a paper number."""
  rows = [r for r in records if r["paper_params"] is not None or r["paper_madd"] is not None]
  delta = lambda ours, paper: None if paper is None else 100 * (ours - paper) / paper
  return plots.delta_bars(
      path, "Model counts: ours − paper (dashed: ±3%; red: beyond)",
      [f"{r['label'].split(' (')[0]} [{r['table'].split(' (')[0]}]" for r in rows],
      [("parameters Δ (%)", [delta(_ours_params(r), r["paper_params"]) for r in rows]),
       ("MAdd Δ (%)", [delta(r["madd"], r["paper_madd"]) for r in rows])])


def segmentation_plot(records, path):
  """Parameters (ours beside the paper's) and MAdd per model."""
  return plots.grouped_bars(
      path, "Segmentation models at 513×513",
      [r["model"].split(" (")[0].split(" — ")[0] for r in records],
      [("parameters (M)", {"ours": [r["params"] / 1e6 for r in records],
                           "paper": [r["paper_params"] and r["paper_params"] / 1e6
                                     for r in records]}),
       ("MAdd (G)", {"ours": [r["madd"] / 1e9 for r in records]})], rotate=30)


# Per argument: (results stem, count, markdown, plot).
COMMANDS = {"classification": ("model_stats", classification, classification_md,
                                classification_plot),
            "segmentation": ("segmentation_models", segmentation_models, segmentation_md,
                             segmentation_plot)}


def main(argv):
  if len(argv) > 2 or argv[1:] and argv[1] not in COMMANDS:
    cli.fail(f"unexpected arguments {argv[1:]}; the one argument is optional: "
             f"{' or '.join(COMMANDS)} (default classification)")
  stem, count, markdown, plot = COMMANDS[argv[1] if len(argv) > 1 else "classification"]
  records = count()
  measure.write(measure.RESULTS, stem, {"rows": records}, markdown(records))
  plot(records, measure.RESULTS / f"{stem}.png")


if __name__ == "__main__":
  measure.run(main)
