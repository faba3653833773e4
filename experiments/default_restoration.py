"""The default restoration experiment once per attention: PSNR / SSIM gain, wall time and
each run's input | prediction | target picture (default_restoration_<attention>.png).

  python -m experiments.default_restoration [--vary=model.attention=none] [--set=...]
"""

from experiments import sweep

GOAL_DB, GOAL_S = 5.0, 600
TABLE = sweep.Table(
    "default_restoration", "Default restoration experiment (scikit-image photos, "
    "Poisson-Gaussian noise) per attention", "configs/restoration/default.py",
    {"model.attention": ("none", "softmax", "siamese")},
    columns=(("input PSNR", "eval_input_psnr", "{:.2f}"), ("output PSNR", "eval_psnr", "{:.2f}"),
             ("gain (dB)", "eval_psnr_gain", "{:+.2f}"),
             ("input SSIM", "eval_input_ssim", "{:.4f}"), ("output SSIM", "eval_ssim", "{:.4f}"),
             ("output NRMSE", "eval_nrmse", "{:.4f}")),
    about="Command: `python -m experiments.default_restoration`. U-Net (none) / U-Net+Attn "
          "(softmax) / U-Net+SAO (siamese); metrics are means over the 3 held-out photos "
          "(camera, coins, chelsea), predicted whole in 64×64 tiles, 'plain' protocol "
          f"(data_range 1). Goal: gain ≥ {GOAL_DB:g} dB in ≤ {GOAL_S} s on a 2-core CPU.",
    goal=lambda r: r["final"]["eval_psnr_gain"] >= GOAL_DB and r["wall_s"] <= GOAL_S,
    picture="*.png")

if __name__ == "__main__":
  sweep.main_for(TABLE)
