"""Parameters and MAdd at 513² of the segmentation paper models (KAO Table 5, Ham Tables 1-2, 4).

  python -m experiments.segmentation_models

Counts from `nnx.eval_shape` and the traced forward pass (experiments/model_stats.py:
all trainable parameters; MAdd = multiply-adds of every convolution and dot
product, batch 1, evaluation mode), nothing compiled. The Ham paper gives the
ablation model's parameters (Table 2: baseline 32.67M, Hamburger +0.50M);
the KAO paper gives none for Table 5. Writes
experiments/results/segmentation_models.{md,json}.
"""

import json
import pathlib

from absl import app

from attention_lab import cli
from attention_lab.models import segmentation  # noqa: F401  (registers the names)
from configs.hamburger import ade20k_hamnet
from experiments import model_stats, plots

SIZE = (513, 513, 3)
ROWS = [
    # label, name, classes, overrides, paper params
    ("DeepLabV2 ASPP (ResNet-101, OS 8) — KAO T5", "deeplab_v2", 21, dict(head="aspp"), None),
    ("DeepLabV2 + Attn — KAO T5", "deeplab_v2", 21, dict(head="attention"), None),
    ("DeepLabV2 + KAO_KV — KAO T5", "deeplab_v2", 21, dict(head="kronecker_kv"), None),
    ("DeepLabV2 + KAO_QKV — KAO T5", "deeplab_v2", 21, dict(head="kronecker_qkv"), None),
    ("HamNet (ResNet-101, OS 8, deep stem, VOC) — Ham T4", "hamnet", 21, {}, None),
    ("HamNet ADE20K (150 classes, ResNetV1c 32-32-64 stem, + FCN aux head)", "hamnet", 150,
     dict(aux_head=True, stem_widths=ade20k_hamnet.get_config().model.stem_widths), None),
    ("Ham ablation baseline (ResNet-50, OS 16, no Hamburger) — Ham T2", "hamnet", 21,
     dict(depth=50, output_stride=16, stem="standard", multi_grid=(1,),
          ham_options={"without": ("hamburger",)}), 32.67e6),
    ("Ham ablation basic (ResNet-50, OS 16, NMF) — Ham T2", "hamnet", 21,
     dict(depth=50, output_stride=16, stem="standard", multi_grid=(1,)), 32.67e6 + 0.50e6),
]


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]}; this command takes no arguments")
  lines = ["| model | params | paper params | MAdd at 513² |", "|---|---|---|---|"]
  records = []
  for label, name, classes, overrides, paper in ROWS:
    model = model_stats.build_abstract(name, classes, **overrides)
    params, _ = model_stats.count_params(model)
    madd = model_stats.forward_madd(model, SIZE)
    records.append(dict(model=label, params=params, paper_params=paper, madd=madd))
    paper_text = "—" if paper is None else f"{paper / 1e6:.2f}M"
    lines.append(f"| {label} | {params / 1e6:.2f}M ({params:,}) | {paper_text} | "
                 f"{madd / 1e9:.1f}G |")
    print(lines[-1], flush=True)
  out = pathlib.Path(__file__).parent / "results"
  header = ("# Segmentation models: parameters and MAdd at 513×513\n\n"
            "All trainable parameters (BN included); MAdd of convolutions and dot products "
            "at batch 1 from the traced forward pass (experiments/model_stats.py).\n\n")
  (out / "segmentation_models.md").write_text(header + "\n".join(lines) + "\n")
  (out / "segmentation_models.json").write_text(json.dumps(records, indent=1))
  plots.segmentation_models_plot()  # segmentation_models.png, linked from the markdown
  print((out / "segmentation_models.md").read_text())


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
