"""DeepLabV2 on PASCAL VOC 2012 with the KAO Table 5 output layers (KAO paper Sec. 4.5, Table 5).

  python -m attention_lab.main --config=configs/kanet/voc_deeplab.py --workdir=workdirs/voc_aspp \\
      --config.dataset.manual_dir=/data/voc --config.init_from=/data/resnet101-63fe2227.pth
  # the other rows: --config.model.head=attention | kronecker_kv | kronecker_qkv

Rows (VOC 2012 val, pixel accuracy / mIoU): DeepLabV2 (ASPP) 0.944 / 75.1;
+Attn 0.947 / 76.3; +KAO_KV 0.946 / 75.9; +KAO_QKV 0.946 / 75.8. The attention
operator replaces ASPP as the output layer (models/segmentation.py, `head`).

Recipe (DeepLabV2, Chen et al. 2018, VOC): ResNet-101 at output stride 8
(stages 3/4 dilated 2/4), ASPP-L rates 6/12/18/24; train_aug (10,582 images,
VOC + SBD, data/builders/voc_segmentation.py), random scale 0.5-1.5 (the
DeepLab code's range), mean padding, random 321 crop, flip; batch 10; SGD
momentum 0.9, lr 2.5e-4 with the classifier (everything outside the backbone)
×10, poly 0.9, 20k iterations, weight decay 5e-4; test on val at full
resolution (padded to 513). DeepLabV2 started from an MS-COCO-pretrained Caffe
ResNet-101; we start from torchvision's ImageNet ResNet-101
(`resnet101-63fe2227.pth`, IMAGENET1K_V1; `init_from`, read without torch, built
with torch's padding automatically: `model.padding="auto"`) or one of our
ImageNet checkpoints, so expect
a point or two below the paper. BatchNorm is trained (statistics over the
global batch). Hardware: one 16 GB GPU or a TPU v3-8 for ~10 h.

Presets: `:cpu` — the same head and recipe on digit scenes (configs/segmentation/
default.py's CPU sizes, a few minutes); `:tiny` — a few steps for tests.
"""

import ml_collections

from configs.segmentation import default


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  d = config.dataset
  d.name, d.manual_dir = "voc_segmentation", ""
  d.train_split, d.eval_split = "train_aug", "val"
  d.resize = 0
  d.crop_size, d.eval_size = 321, 513
  d.scale_min, d.scale_max, d.flip = 0.5, 1.5, True
  d.shuffle_buffer = 2048

  m = config.model
  m.name = "deeplab_v2"
  m.head = "aspp"
  m.depth, m.width, m.output_stride = 101, 1.0, 8
  m.rates = (6, 12, 18, 24)
  m.heads, m.attention_features = 4, 512
  m.classifier_kernel = 1  # the attention replaces ASPP as the output layer: 1×1 classifier
  m.stem, m.multi_grid = "standard", (1,)
  m.padding = "auto"  # "torch" when init_from is a torch .pth, else "same"
  for key in ("channels", "rank", "align_channels", "dropout"):
    del m[key]
  config.init_from = ""  # --config.init_from=<resnet101-63fe2227.pth> (see above)

  config.batch_size = 10
  config.num_train_steps = 20_000
  o = config.optimizer
  o.name, o.learning_rate, o.momentum = "sgd", 2.5e-4, 0.9
  o.weight_decay, o.decay_params, o.head_lr_multiplier = 5e-4, "kernels", 10.0
  o.schedule, o.power = "poly", 0.9
  config.log_every_steps = 100
  config.eval_every_steps = config.checkpoint_every_steps = 2000

  if preset == "cpu":
    default.digit_scenes(config)
  elif preset == "tiny":
    default.tiny(config)
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/kanet/voc_deeplab.py; "
                     "expected 'cpu' or 'tiny'")
  return config
