"""HamNet on PASCAL VOC 2012 (Hamburger paper: Table 4's HamNet, Tables 1, 2, 8, 9, Figs. 3-4).

  python -m attention_lab.main --config=configs/hamburger/voc_hamnet.py --workdir=workdirs/hamnet \\
      --config.dataset.manual_dir=/data/voc --config.init_from=/data/resnet101-2a57e44d.pth

Backbone weights (`init_from`, read without torch): the authors' ImageNet
ResNet-101 with the deep stem, `resnet101-2a57e44d.pth` (`resnet50-ebb6acbb.pth`
for `:ablation`): PyTorch-Encoding's deep-base ResNets, which Enjoy-Hamburger's
seg/HamNet/network.py loads (as EMANet did), downloaded from the links in that
repository's seg/README.md ("Pretrained Backbone"). Their stem is 3×3/2 to 64,
3×3 to 64, 3×3 to 128 (`stem="deep"`, `stem_widths=(64, 64, 128)`, the
default here). A torchvision ResNet-101 works too, with
`--config.model.stem=standard`. Torch-trained weights are built with torch's
padding automatically (`model.padding="auto"`; models/resnet.py says why).

Full recipe (App. E.3 and the official Enjoy-Hamburger seg/HamNet code):
ResNet-101, output stride 8, deep stem, multi-grid (1, 2, 4); 3×3 conv-BN-ReLU
2048→512, Hamburger (NMF, d = 512, r = 64, K = 6 train / 7 eval, one-step
gradient, random initialisation), 3×3 conv-BN-ReLU 512→256, dropout 0.1, 1×1
classifier; train_aug, scale 0.5-2.0, crop 513, flip; batch 16; SGD momentum
0.9, lr 9e-3, poly 0.9, 60k iterations, weight decay 1e-4 on conv weights
only. Expected: VOC val mIoU ≈ 80-81 single-scale (the paper's 85.9 is VOC
test after trainval fine-tuning, multi-scale + flip: `--config.eval.scales=
"(0.5,0.75,1.0,1.25,1.5,1.75)" --config.eval.flip=True`). Hardware: 4 V100 or
a TPU v3-8 for ~1 day.

Ablation settings (`:ablation`, App. E.1; Tables 1, 2, 8, 9, Figs. 3-4 report
best(mean) of 5 runs on VOC val): ResNet-50 at output stride 16, batch 12,
30k iterations, lr 9e-3. Rows by override:
- Table 1 (one-step vs BPTT): --config.model.ham=vq|cd|nmf
  --config.model.ham_options.gradient=one_step|bptt
  (VQ 77.7 vs 76.6, CD 78.1 vs 75.0, NMF 78.3 vs 77.4);
- Table 8 (dictionary init): --config.model.ham_options.init=fixed|random|online
  (NMF 77.4 / 78.3 / 77.8); the learned row (76.8) learns the initial bases through the
  solver's iterations, so it trains with BPTT (the one-step gradient never reaches them):
  --config.model.ham_options.init=learned --config.model.ham_options.gradient=bptt;
- Fig. 3 (latent dimension d and rank r; C stays 512): --config.model.ham_options.dim=D
  --config.model.rank=R (the paper's choice d = 8r: 512 / 64);
- Table 9 (CD temperature T = 1 / 0.1 / 0.01: 77.1 / 78.2 / 78.1): --config.model.ham=cd
  --config.model.ham_options.temperature=T (default 0.01, the reference's INV_T = 100;
  VQ and CD only, NMF's codes start at T = 1);
- Fig. 4 (K): --config.model.ham_options.train_steps=K --config.model.ham_options.eval_steps=K;
- Table 2 (components; basic 78.3, -ham 75.8, -upper bread 77.0, -lower
  bread 77.3, only ham 77.0, baseline (no Hamburger) 75.9):
  --config.model.ham_options.without="('ham',)" | "('upper',)" | "('lower',)" |
  "('upper','lower')"; baseline: --config.model.ham_options.without="('hamburger',)".

VOC test-server protocol (`:trainval`, Table 4's 85.9; App. E.3 and
Enjoy-Hamburger's seg/HamNet/run.py `voc_test`): after the 60k-iteration
train_aug run above, fine-tune on VOC2012 trainval (`train+val`, 2,913 images)
with the learning rate down to a tenth (9e-4), 20k iterations (the reference's
TEST_ITER_MAX), a fresh optimizer and poly schedule, the rest unchanged,
starting from the train_aug run's weights:

  python -m attention_lab.main --config=configs/hamburger/voc_hamnet.py:trainval \\
      --workdir=workdirs/hamnet_trainval --config.dataset.manual_dir=/data/voc \\
      --config.init_from=workdirs/hamnet

`init_from` names the train_aug run's workdir, and the preset's
`init_scope="model"` copies the whole model from it, head included, as the
reference does (checkpoints/backbone_weights.py). The preset builds the model
with torch padding (`model.padding="torch"`), as the train_aug run was built
from the torch .pth above. Predictions are multi-scale (0.5-1.75) + flip, the
scales of the reference's msflip_test.sh. val is training data here, so its
mIoU only checks the run. The server's files (VOC2012 test, in the manual_dir
when the dataset is prepared; data/builders/voc_segmentation.py):

  python -m attention_lab.predict --config=configs/hamburger/voc_hamnet.py:trainval \
      --workdir=workdirs/hamnet_trainval --config.dataset.manual_dir=/data/voc \
      --split=test --out=voc_test

Presets: `:ablation` (above), `:trainval` (above), `:cpu` (digit scenes, the CPU
sizes of configs/segmentation/default.py), `:tiny` (tests).
"""

import ml_collections

from configs.hamburger import hamnet


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = hamnet.recipe()
  d = config.dataset
  d.name, d.manual_dir = "voc_segmentation", ""
  d.train_split, d.eval_split = "train_aug", "val"
  config.num_train_steps = 60_000
  config.eval_every_steps = config.checkpoint_every_steps = 5000

  if preset == "ablation":
    m = config.model
    m.depth, m.output_stride, m.multi_grid = 50, 16, (1,)
    config.batch_size, config.num_train_steps = 12, 30_000
  elif preset == "trainval":
    d.train_split = "train+val"  # VOC2012 trainval: TFDS reads the two splits as one
    config.num_train_steps = 20_000
    config.optimizer.learning_rate = 9e-4
    config.eval.scales, config.eval.flip = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75), True
    config.init_scope = "model"  # --config.init_from=<the train_aug run's workdir>
    config.model.padding = "torch"  # that run's: its init_from is a torch .pth
  elif preset:
    hamnet.cpu_or_tiny(config, preset, "configs/hamburger/voc_hamnet.py",
                       others=("ablation", "trainval"))
  return config
