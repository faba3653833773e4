"""DeepLabV2 on PASCAL VOC 2012 with the KAO Table 5 output layers (KAO paper Sec. 4.5, Table 5).

  python -m attention_lab.main --config=configs/kanet/voc_deeplab.py --workdir=workdirs/voc_aspp \\
      --config.dataset.manual_dir=/data/voc --config.init_from=/data/resnet101-63fe2227.pth
  # the other rows: --config.model.head=attention | kronecker_kv | kronecker_qkv

Rows (VOC 2012 val, pixel accuracy / mIoU): DeepLabV2 (ASPP) 0.944 / 75.1;
+Attn 0.947 / 76.3; +KAO_KV 0.946 / 75.9; +KAO_QKV 0.946 / 75.8. The attention
operator replaces ASPP as the output layer (models/segmentation.py, `head`).

Recipe (KAO appendix, "Experimental setup" of the segmentation experiments,
which follows DeepLabV2, Chen et al. 2018): random 321 crop, batch 8, random
scaling (0.5-1.5, the DeepLab code's range, with mean padding) and flip, SGD
momentum 0.9, lr 2.5e-4, poly 0.9, 25,000 iterations, weight decay 5e-4,
single-scale test on val at full resolution (padded to 513), no CRF;
ResNet-101 at output stride 8 (stages 3/4 dilated 2/4), ASPP-L rates
6/12/18/24, train_aug (10,582 images, VOC + SBD,
data/builders/voc_segmentation.py). Where the KAO paper is silent we take
DeepLabV2's choices: the classifier (everything outside the backbone) at ×10
the learning rate, weight decay on kernels only. The one deliberate
difference: KAO (as DeepLabV2) starts from a ResNet-101 pretrained on ImageNet
and then MS-COCO, MSRA's original Caffe ResNet (the stride on each stage's
first 1×1 conv, which our v1.5 blocks cannot hold), and no MS-COCO-pretrained
ResNet-101 in the v1.5 layout is published; we start from torchvision's
ImageNet ResNet-101 `resnet101-63fe2227.pth` (IMAGENET1K_V1; `init_from`, read
without torch, built with torch's padding automatically:
`model.padding="auto"`) or one of our ImageNet checkpoints, so expect a point
or two below the paper. BatchNorm is trained (statistics over the
global batch). Hardware: one 16 GB GPU or a TPU v3-8 for ~10 h.

Presets: `:cpu` — the same head and recipe on digit scenes (configs/segmentation/
default.py's CPU sizes, a few minutes); `:tiny` — a few steps for tests.
"""

import ml_collections

from configs import presets, schema


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = schema.segmentation()
  d = config.dataset
  d.name, d.manual_dir = "voc_segmentation", ""
  d.train_split, d.eval_split = "train_aug", "val"
  d.resize = 0
  d.crop_size, d.eval_size = 321, 513
  d.scale_min, d.scale_max, d.flip = 0.5, 1.5, True

  config.model.update(
      name="deeplab_v2", head="aspp", depth=101, width=1.0, output_stride=8,
      rates=(6, 12, 18, 24), heads=4, attention_features=512,
      classifier_kernel=1,  # the attention replaces ASPP as the output layer: 1×1 classifier
      stem="standard", multi_grid=(1,),
      padding="auto",  # "torch" when init_from is a torch .pth, else "same"
      dtype="float32")
  config.init_from = ""  # --config.init_from=<resnet101-63fe2227.pth> (see above)

  config.eval.scales, config.eval.flip = (1.0,), False  # KAO: single scale, no CRF
  config.batch_size = 8  # KAO appendix (DeepLabV2 itself: 10)
  config.num_train_steps = 25_000  # KAO appendix (DeepLabV2 itself: 20k)
  config.optimizer.update(
      name="sgd", learning_rate=2.5e-4, momentum=0.9, nesterov=False, weight_decay=5e-4,
      decay_params="kernels", head_lr_multiplier=10.0, schedule="poly", power=0.9)
  config.log_every_steps = 100
  config.eval_every_steps = config.checkpoint_every_steps = 2000

  if preset == "cpu":
    presets.digit_scenes(config)
  elif preset == "tiny":
    presets.digit_scenes_tiny(config)
  elif preset:
    raise ValueError(f"unknown preset {preset!r} for configs/kanet/voc_deeplab.py; "
                     "expected 'cpu' or 'tiny'")
  return config
