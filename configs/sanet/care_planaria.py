"""SAO Table 7, Planaria (3D denoising): U-Net / U-Net+Attn / U-Net+SAO.

  python -m attention_lab.main --config=configs/sanet/care_planaria.py \
      --workdir=workdirs/care_planaria_sao \
      --config.dataset.manual_dir=/data/Denoising_Planaria \
      [--config.model.attention=none|softmax|siamese]   # the three Table 7 columns

Paper (Table 7): PSNR 31.571 / 31.951 / 31.929, SSIM 0.7707 / 0.7919 / 0.7898,
NRMSE 0.0268 / 0.0257 / 0.0257 for U-Net / U-Net+Attn / U-Net+SAO.

Data (Table 10): CARE's Denoising_Planaria (manual download, see
attention_lab/data/builders/care.py): 17,005 training patches 16×64×64×1 from
train_data/data_label.npz (already percentile-normalised by CSBDeep), 20 test
stacks 95×1024×1024 from test_data/condition_1 (low-SNR) against test_data/GT.
The paper does not say which of condition_1..3 it tested on: choose with
--config.dataset.eval_split=test_condition_2 etc.

Model (SAO appendix): 3D U-Net of depth 3 (two encoder, bottom, two decoder
blocks; CARE widths 32-64-128, 3×3×3 convs, residual), attention after the
bottom and decoder blocks with Q, K, V projected, 4 heads; softmax attention is
query-chunked (256 queries at a time, rematerialised in the backward pass) so
the top decoder level's N = 16·64·64 = 65,536 tokens fit in training.
Training (appendix): Adam, learning rate 4e-4 (constant: the paper names no
schedule), batch 16, 200 epochs (200 passes over the 17,005 patches = 212,600
steps), L1 loss (CARE's "mae").

Evaluation, the CARE protocol (Weigert et al. 2018; evaluation/restoration.py):
each test stack is normalised by its 1st / 99.8th percentiles (CSBDeep's
PercentileNormalizer, as for prediction), predicted whole in 32×128×128 tiles
with 8×32×32 voxels of overlap; the ground truth is normalised by its 0.1 /
99.9 percentiles, the prediction affinely rescaled to minimal MSE
(`normalize_minmse`), then PSNR / SSIM (data_range 1, 7×7×7 window) and NRMSE
(= RMSE) per stack, averaged over the stacks. Hardware: one ≥ 24 GB GPU or a
TPU slice (U-Net+Attn's train step needs 18.9 GiB of XLA temporaries at
query chunks of 256, U-Net+SAO 2.5 GiB: experiments/results/restoration_memory.md).

Presets: `:cpu` trains the same 3D U-Net, narrow, on SYNTHETIC volumes
(`synthetic_volumes/denoising`, seeded Gaussian blobs with Poisson-Gaussian
noise; not Planaria) to check the whole pipeline in a minute or two;
`:tiny`: a few steps at tiny width (tests).
"""

import ml_collections

from configs.sanet import care


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  return care.recipe(preset, dataset="care/planaria", epochs=200)
