"""SAO Table 7, Tribolium (3D denoising): U-Net / U-Net+Attn / U-Net+SAO.

  python -m attention_lab.main --config=configs/sanet/care_tribolium.py \
      --workdir=workdirs/care_tribolium_sao \
      --config.dataset.manual_dir=/data/Denoising_Tribolium \
      [--config.model.attention=none|softmax|siamese]   # the three Table 7 columns

Paper (Table 7): PSNR 32.433 / 32.571 / 32.549, SSIM 0.9171 / 0.9201 / 0.9196,
NRMSE 0.0241 / 0.0236 / 0.0239 for U-Net / U-Net+Attn / U-Net+SAO.

Data (Table 10): CARE's Denoising_Tribolium: 14,725 training patches
16×64×64×1, 6 test stacks 50×800×800 (test_data/condition_1 against GT; the
paper does not name the condition). Model, training (Adam 4e-4, batch 16,
200 epochs = 184,000 steps, L1) and the CARE evaluation protocol exactly as
configs/sanet/care_planaria.py, whose docstring gives the details.
Hardware: one ≥ 24 GB GPU or a TPU slice.

Presets: `:cpu` / `:tiny` as care_planaria (SYNTHETIC volumes, not Tribolium).
"""

import ml_collections

from configs.sanet import care


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  return care.recipe(preset, dataset="care/tribolium", epochs=200)
