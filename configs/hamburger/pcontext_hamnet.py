"""HamNet on PASCAL-Context, 59 classes (Hamburger paper Table 5: val mIoU 55.2).

  python -m attention_lab.data.prepare --config=configs/hamburger/pcontext_hamnet.py \\
      --config.dataset.manual_dir=/data/pcontext   # says what to download if files are missing
  python -m attention_lab.main --config=configs/hamburger/pcontext_hamnet.py \\
      --workdir=workdirs/pcontext_hamnet --config.dataset.manual_dir=/data/pcontext \\
      --config.init_from=/data/resnet101-2a57e44d.pth \\
      --config.eval.scales="(0.5,0.75,1.0,1.25,1.5,1.75)" --config.eval.flip=True

Data: VOC2010 images with the Detail-API 59-class label maps as mmseg's converter
writes them (data/builders/pascal_context.py): train 4,998, val 5,105;
background is not scored (255 = ignore), classes 0-58.

Recipe (the paper's App. E.3; Enjoy-Hamburger publishes code for VOC only and
mmseg has no HamNet PASCAL-Context config, so the model is configs/hamburger/
voc_hamnet.py's, with the same backbone weights): ResNet-101, output stride 8,
deep stem, multi-grid (1, 2, 4); 3×3 conv-BN-ReLU 2048→512, Hamburger (NMF,
d = 512, r = 64, K = 6 train / 7 eval, one-step gradient), 3×3 conv-BN-ReLU
512→256, dropout 0.1, 1×1 classifier; random scale 0.5-2.0, crop 513, flip;
batch 16; SGD momentum 0.9, lr 0.002, poly 0.9, weight decay 1e-4, 25k
iterations. Evaluation on val at full resolution (the images are at most
500×500, padded to 513); Table 5's 55.2 is multi-scale + flip (the command above,
the scales of Enjoy-Hamburger's test script). Hardware: 4 V100 or a TPU v3-8,
about half a day.

Presets: `:cpu` (digit scenes, the CPU sizes of configs/segmentation/default.py),
`:tiny` (tests).
"""

import ml_collections

from configs.hamburger import hamnet


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = hamnet.recipe()  # crop 513, batch 16, weight decay 1e-4: as on VOC
  config.dataset.name = "pascal_context"
  config.dataset.train_split, config.dataset.eval_split = "train", "val"
  config.num_train_steps = 25_000
  config.optimizer.learning_rate = 2e-3
  config.eval_every_steps = config.checkpoint_every_steps = 2500

  if preset:
    hamnet.cpu_or_tiny(config, preset, "configs/hamburger/pcontext_hamnet.py")
  return config
