"""SAO Table 7, Flywing (3D → 2D surface projection): U-Net / U-Net+Attn / U-Net+SAO.

  python -m attention_lab.main --config=configs/sanet/care_flywing.py \
      --workdir=workdirs/care_flywing_sao \
      --config.dataset.manual_dir=/data/Projection_Flywing \
      [--config.model.attention=none|softmax|siamese]   # the three Table 7 columns

Paper (Table 7): PSNR 21.958 / 22.361 / 22.329, SSIM 0.5592 / 0.5903 / 0.5916,
NRMSE 0.0798 / 0.0763 / 0.0767 for U-Net / U-Net+Attn / U-Net+SAO.

Data (Table 10): CARE's Projection_Flywing: 16,891 training patches
50×64×64 → 64×64, 26 test stacks 50×520×692 (test_data/<condition> against
GT; choose the condition with --config.dataset.eval_split=test_<folder>).

Model: `unet_projection` (models/unet.py): the SAO appendix's "decoder-encoder
architecture that reduces 3D images into 2D tensors and a 2D U-Net"; where the
paper is silent we follow CARE's projection network (csbdeep
ProjectionCARE: 4 levels of 3×3×3 convs with 8 maps and 1×2×2 pooling, a
softmax over Z that weights the input stack), then the 2D U-Net of depth 3
with attention after the bottom and decoder blocks (Q, K, V projected, 4
heads). Training (appendix): Adam 4e-4 (constant), batch 16, 100 epochs
(105,600 steps), L1 loss.

Evaluation: the CARE protocol as in configs/sanet/care_planaria.py (inputs
normalised by their 1 / 99.8 percentiles; target by 0.1 / 99.9; min-MSE affine
prediction; PSNR / SSIM with data_range 1, 7×7 window; NRMSE = RMSE), each
stack predicted in 50×128×128 tiles (all of Z) with 32 pixels of overlap in Y
and X. The "input" row is the maximum-intensity projection of the stack.
Hardware: one GPU (16 GB suffices: the attention runs on 64×64 2D maps).

Presets: `:cpu` trains on SYNTHETIC stacks (`synthetic_volumes/projection`:
a blob-and-ridge texture on a seeded curved surface, with Poisson-Gaussian
noise; not Flywing); `:tiny`: a few steps for tests.
"""

import ml_collections

from configs.sanet import care


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  config = care.recipe(preset, dataset="care/flywing", epochs=100)
  config.model.name = "unet_projection"
  config.model.proj_depth = 4
  config.model.proj_features = 8
  config.eval.tile_size = (50, 128, 128)
  config.eval.tile_overlap = (0, 32, 32)
  if preset in ("cpu", "tiny"):
    config.dataset.name = "synthetic_volumes/projection"
    config.dataset.patch_size = (24, 32, 32)
    config.eval.tile_size = (20, 48, 48)
    config.eval.tile_overlap = (0, 16, 16)
    config.eval.crop_size = (48, 48)
    if preset == "tiny":
      config.dataset.patch_size = (24, 16, 16)
      config.model.proj_depth = 2
  else:
    config.dataset.patch_size = (50, 64, 64)
  return config
