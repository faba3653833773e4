"""HamNet on ADE20K (the mmsegmentation HamNet recipe; Ham paper Sec. 3.2 reports VOC and Context).

  python -m attention_lab.main --config=configs/hamburger/ade20k_hamnet.py \\
      --workdir=workdirs/ade_hamnet --config.dataset.manual_dir=/data/ade \\
      --config.init_from=/data/resnet101_v1c-e67eebb6.pth

Data: ADEChallengeData2016 (data/builders/ade20k_challenge.py; 20,210 train,
2,000 validation; label 0 ignored, 150 classes). Recipe (mmseg's 160k ADE20K
schedule with an FCN auxiliary head): HamNet as configs/hamburger/voc_hamnet.py
(ResNet-101, OS 8, deep stem, multi-grid, NMF d = 512, r = 64, K = 6 / 7), an
FCN auxiliary head on stage 3 with loss weight 0.4; scale 0.5-2.0, crop 512,
flip; batch 16; SGD momentum 0.9, lr 0.01, poly 0.9, 160k iterations, weight
decay 5e-4. Evaluation: full resolution (images larger than 1024 resized to
fit), sliding 512 windows at stride 341. Expected: val mIoU ≈ 45 single-scale
(mmseg's HamNet R-101 reports about 45-46). Hardware: 8 GPUs or a TPU v3-8 for
~1.5 days.

Backbone weights (`init_from`, read without torch): mmseg's ResNet-101
configs (r101-d8, which Enjoy-Hamburger's mmseg HamNet uses) start from
`open-mmlab://resnet101_v1c`, mmcv's ImageNet ResNetV1c
`resnet101_v1c-e67eebb6.pth` from mmcv's model zoo (open-mmlab.json), whose
deep stem is 3×3/2 to 32, 3×3 to 32, 3×3 to 64: `stem_widths=(32, 32, 64)`,
the default here (the VOC config's (64, 64, 128) is the Encoding stem). A
whole mmseg model checkpoint also loads (its `backbone.` weights). Torch-trained
weights are built with torch's padding automatically (`model.padding="auto"`).

Presets: `:cpu` (digit scenes with the auxiliary head), `:tiny` (tests).
"""

import ml_collections

from configs.hamburger import hamnet


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = hamnet.recipe()  # batch 16, scale 0.5-2.0, flip: as on VOC
  d = config.dataset
  d.name = "ade20k_challenge"
  d.train_split, d.eval_split = "train", "validation"
  d.crop_size, d.eval_size = 512, 1024
  config.eval.window, config.eval.stride = 512, 341
  config.model.stem_widths = (32, 32, 64)  # mmseg ResNetV1c
  config.init_from = ""  # --config.init_from=<resnet101_v1c-e67eebb6.pth> (see above)
  config.aux_loss_weight = 0.4
  config.num_train_steps = 160_000
  o = config.optimizer
  o.learning_rate, o.weight_decay, o.decay_params = 0.01, 5e-4, "kernels"
  config.eval_every_steps = config.checkpoint_every_steps = 16_000

  if preset:
    hamnet.cpu_or_tiny(config, preset, "configs/hamburger/ade20k_hamnet.py")
  return config
