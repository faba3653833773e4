"""Draws what each global-context operator of a trained classifier attends to.

  python -m experiments.attention_maps [--config=configs/default.py] [--workdir=workdirs/default]
      [--num_images=3] [--out_dir=experiments/results] [--name=...]

Loads the workdir's latest checkpoint (train first with `python -m
attention_lab.main --config=... --workdir=...`), runs the evaluation-mode
model once on the first `num_images` test images with every attention layer
recording its weights (`attention_lab.layers.recording`; they reproduce the
layer's output, tests/layers/test_attention_recording.py), and draws them:

- softmax, Attn+Pool, relative (GlobalAttention, AugmentedConv, NonLocal,
  SelfAttention): the row of the attention matrix of a query position — on
  the pooled key grid for Attn+Pool;
- Attn1/N ("mean") and SAO ("siamese"): the coefficients c_ij by which v_j
  enters out_i (1/N-scaled, or batch-normalised as in SANet/KANet); for SAO
  c_ij = a_i + b_j with the per-position scores b_j = wᵀk_j, so every query
  sees the same map up to a constant (SAO Eq. 5-6);
- KAO_KV / KAO_QKV: the query's softmax weights over the row and column
  summaries (KAO Eq. 1-3), drawn as the weight that reaches position (x', y')
  through them, w_row[x']/W + w_col[y']/H (so out_i = Σ_j A_ij v_j still holds);
- Hamburger: the codes (B, N, R) of the decomposition (group 0), drawn for
  the three bases with the largest total code mass in each image.

Figures: one PNG per attention layer (at most `max_layers`), rows = image ×
query position (marked ×), columns = heads, the map laid over the image;
written to `out_dir` as attention_maps_<name>_<layer>.png.
"""

import math
import pathlib
import re

import jax.numpy as jnp
import matplotlib
import numpy as np
from absl import flags
from ml_collections import config_flags

from attention_lab import cli, predict
from attention_lab.data import pipeline
from attention_lab.layers import recording
from attention_lab.layers.augmented_conv import AugmentedConv
from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.layers.hamburger import Hamburger
from attention_lab.layers.non_local import NonLocal
from experiments import measure

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", "configs/default.py", "Experiment config.")
_WORKDIR = cli.define_once(flags.DEFINE_string, "workdir", "workdirs/default", "Workdir with the checkpoint.")
_NUM_IMAGES = flags.DEFINE_integer("num_images", 3, "Test images to draw.")
_MAX_LAYERS = flags.DEFINE_integer("max_layers", 3, "Attention layers to draw (first ones).")
_OUT_DIR = flags.DEFINE_string("out_dir", "", "Where the PNGs go (default experiments/results).")
_NAME = flags.DEFINE_string("name", "", "Figure name (default: from the config's model).")

RESULTS = pathlib.Path(__file__).parent / "results"


def _is_kronecker(layer) -> bool:
  return isinstance(layer, GlobalAttention) and layer.operator.startswith("kronecker")


def grid_weights(layer, weights):
  """(A (B, H, Nq, Nk), query grid, key grid) of a layer's recorded 2D weights; KAO's
  weights over the X+Y summaries become the weight reaching each position (KAO Eq. 1)."""
  weights = jnp.asarray(weights)
  b, heads = weights.shape[:2]
  if _is_kronecker(layer) and weights.ndim == 5:
    query_grid = key_grid = weights.shape[2:4]
    x, y = query_grid
    rows, cols = weights[..., :x], weights[..., x:]
    weights = rows[..., :, None] / y + cols[..., None, :] / x
  elif weights.ndim == 6:
    query_grid, key_grid = weights.shape[2:4], weights.shape[4:6]
  else:
    raise ValueError(f"maps are drawn for 2D grids only, got weights of shape {weights.shape}")
  return (weights.reshape(b, heads, math.prod(query_grid), math.prod(key_grid)),
          tuple(query_grid), tuple(key_grid))


# ----------------------------------------------------------------------------------------------
# Drawing.


def _display(image):
  image = np.asarray(image, np.float32)
  image = image[..., 0] if image.shape[-1] == 1 else image[..., :3]
  lo, hi = image.min(), image.max()
  return (image - lo) / max(hi - lo, 1e-6)


def query_positions(grid) -> list:
  """Two query positions per image: the centre of the grid and a point a quarter in."""
  gx, gy = grid
  return [(gx // 2, gy // 2), (gx // 4, gy // 4)]


def draw_weights(path, title, images, weights, query_grid, key_grid, signed: bool):
  """weights (B, H, Nq, Nk) → a grid of heat maps over the images, one row per (image, query)."""
  weights = np.asarray(weights)
  b, heads = weights.shape[:2]
  queries = query_positions(query_grid)
  rows = b * len(queries)
  fig, axes = plt.subplots(rows, heads + 1, figsize=(1.8 * (heads + 1), 1.8 * rows),
                           squeeze=False)
  size = images.shape[1:3]
  extent = (-0.5, size[1] - 0.5, size[0] - 0.5, -0.5)
  for i in range(b):
    shown = _display(images[i])
    for j, (qx, qy) in enumerate(queries):
      r = i * len(queries) + j
      mark = ((qy + 0.5) * size[1] / query_grid[1] - 0.5, (qx + 0.5) * size[0] / query_grid[0] - 0.5)
      axes[r, 0].imshow(shown, cmap="gray", extent=extent)
      axes[r, 0].plot(*mark, "rx", markersize=8, mew=2)
      axes[r, 0].set_title(f"image {i}, query {qx},{qy}", fontsize=7)
      for h in range(heads):
        m = weights[i, h, qx * query_grid[1] + qy].reshape(key_grid)
        ax = axes[r, h + 1]
        ax.imshow(shown, cmap="gray", extent=extent)
        if signed:
          lim = max(np.abs(m).max(), 1e-12)
          im = ax.imshow(m, cmap="coolwarm", vmin=-lim, vmax=lim, alpha=0.65, extent=extent)
        else:
          im = ax.imshow(m, cmap="inferno", vmin=0, alpha=0.65, extent=extent)
        ax.plot(*mark, "cx", markersize=6, mew=1.5)
        ax.set_title(f"head {h}: max {m.max():.2g}", fontsize=7)
        del im
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def draw_codes(path, title, images, codes, strength, top: int = 3):
  codes, strength = np.asarray(codes), np.asarray(strength)
  b = codes.shape[0]
  fig, axes = plt.subplots(b, top + 1, figsize=(1.8 * (top + 1), 1.8 * b), squeeze=False)
  size = images.shape[1:3]
  extent = (-0.5, size[1] - 0.5, size[0] - 0.5, -0.5)
  for i in range(b):
    shown = _display(images[i])
    axes[i, 0].imshow(shown, cmap="gray", extent=extent)
    axes[i, 0].set_title(f"image {i}", fontsize=7)
    for t, basis in enumerate(np.argsort(-strength[i])[:top]):
      ax = axes[i, t + 1]
      ax.imshow(shown, cmap="gray", extent=extent)
      ax.imshow(codes[i, ..., basis], cmap="viridis", alpha=0.65, extent=extent)
      ax.set_title(f"basis {basis}: mean {strength[i, basis]:.2g}", fontsize=7)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def _describe(layer) -> tuple[str, bool]:
  """(what is drawn, signed colormap?)"""
  if isinstance(layer, AugmentedConv):
    return f"AugmentedConv ({layer.positional} positions): softmax attention row", False
  if isinstance(layer, NonLocal):
    return "non-local softmax row" + (" (pooled keys)" if layer.subsample else ""), False
  if not isinstance(layer, GlobalAttention):  # SelfAttention
    return ("SAGAN attention row", False) if layer.variant == "sa" else (
        "refined SA coefficients f·g/N", True)
  op = layer.operator
  if op in ("mean", "siamese"):
    what = ("Attn1/N coefficients c_ij" if op == "mean" else
            "SAO coefficients c_ij = a_i + b_j (per-position scores b_j = wᵀk_j)")
    return what + f" ({layer.coefficients})", True
  if op.startswith("kronecker"):
    return (f"{op}: summary weights reaching each position, w_row[x']/W + w_col[y']/H", False)
  return {"softmax": "softmax attention row", "softmax_pool": "Attn+Pool row (2×2-pooled keys)",
          "relative": "relative attention row (AA Eq. 3-4)"}[op], False


def draw_model(model, images, out_dir, name: str, max_layers: int = 3) -> list:
  """Draws the first `max_layers` attention layers of `model` on `images`; returns the paths."""
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  _, recorded = recording.attention_weights(model, images)
  layers = dict(recording.recording_layers(model))
  paths = []
  for layer_path, values in list(recorded.items())[:max_layers]:
    layer, weights = layers[layer_path], values[recording.WEIGHTS][0]
    slug = re.sub(r"[^\w]+", "_", layer_path).strip("_")
    path = out_dir / f"attention_maps_{name}_{slug}.png"
    if isinstance(layer, Hamburger):
      codes = weights[:, 0]  # group 0: (B, H, W, R)
      draw_codes(path, f"{name} {layer_path}: Hamburger ({layer.ham}) codes of the 3 strongest "
                 "bases", images, codes, jnp.mean(codes, axis=(1, 2)))
    else:
      weights, query_grid, key_grid = grid_weights(layer, weights)
      what, signed = _describe(layer)
      draw_weights(path, f"{name} {layer_path}: {what}", images, weights, query_grid, key_grid,
                   signed)
    paths.append(path)
  return paths


def default_name(config) -> str:
  model = config.model
  extra = model.get("attention", "")
  return f"{model.name}_{extra}" if extra else model.name


def test_images(config, num_images: int):
  batch = next(iter(pipeline.eval_batches(config, local_batch_size=max(num_images, 1))))
  return jnp.asarray(batch["image"][:num_images])


def main(argv):
  del argv
  config = _CONFIG.value
  try:
    task, state, _ = predict.restore(config, _WORKDIR.value)
  except cli.ConfigError as e:
    cli.fail(str(e))
  model = task.model(state)
  images = test_images(config, _NUM_IMAGES.value)
  paths = draw_model(model, images, _OUT_DIR.value or RESULTS,
                     _NAME.value or default_name(config), _MAX_LAYERS.value)
  if not paths:
    raise SystemExit(f"model {config.model.name} has no attention layer to draw")
  for p in paths:
    print(p)


if __name__ == "__main__":
  measure.run(main)
