"""Draws what each attention layer of a trained classifier attends to, from the weights the
layers record themselves (`attention_lab.layers.recording`).

  python -m experiments.attention_maps [--config=configs/default.py] [--workdir=workdirs/default]
      [--num_images=3] [--max_layers=3] [--out_dir=experiments/results] [--name=...]

Loads the workdir's latest checkpoint, runs the evaluation-mode model once on the first test
images with recording on and writes attention_maps_<name>_<layer>.png per attention layer:
rows = image × query position (marked ×), columns = heads, the weights over the image
(out_i = Σ_j A_ij v_j: softmax rows, the 1/N and SAO coefficients c_ij = a_i + b_j of SAO
Eq. 5-6, the KAO weights that reach each position through the summaries of KAO Eq. 1-3);
Hamburger: the codes of the three bases with the most code mass per image.
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
from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.layers.hamburger import Hamburger
from experiments import measure

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", "configs/default.py",
                          "Experiment config.")
_WORKDIR = cli.define_once(flags.DEFINE_string, "workdir", "workdirs/default",
                           "Workdir with the checkpoint.")
_NUM_IMAGES = flags.DEFINE_integer("num_images", 3, "Test images to draw.")
_MAX_LAYERS = flags.DEFINE_integer("max_layers", 3, "Attention layers to draw (first ones).")
_OUT_DIR = flags.DEFINE_string("out_dir", "", "Where the PNGs go (default experiments/results).")
_NAME = flags.DEFINE_string("name", "", "Figure name (default: from the config's model).")


def grid_weights(layer, weights):
  """(A (B, H, Nq, Nk), query grid, key grid) of a layer's recorded 2D weights; KAO's
  weights over the X+Y summaries become the weight reaching each position (KAO Eq. 1)."""
  weights = jnp.asarray(weights)
  b, heads = weights.shape[:2]
  if isinstance(layer, GlobalAttention) and layer.operator.startswith("kronecker") \
      and weights.ndim == 5:
    query_grid = key_grid = weights.shape[2:4]
    x, y = query_grid
    weights = weights[..., :x, None] / y + weights[..., None, x:] / x
  elif weights.ndim == 6:
    query_grid, key_grid = weights.shape[2:4], weights.shape[4:6]
  else:
    raise ValueError(f"maps are drawn for 2D grids only, got weights of shape {weights.shape}")
  return (weights.reshape(b, heads, math.prod(query_grid), math.prod(key_grid)),
          tuple(query_grid), tuple(key_grid))


def _figure_rows(layer, weights):
  """[(image index, query, colormap, [(title, map over the image)])], one per figure row;
  query: (x, y, its mark as fractions of the image) or None."""
  if isinstance(layer, Hamburger):
    codes = np.asarray(weights[:, 0])  # group 0: (B, H, W, R)
    strength = codes.mean(axis=(1, 2))
    return [(i, None, "viridis", [(f"basis {r}: mean {strength[i, r]:.2g}", codes[i, ..., r])
                                  for r in np.argsort(-strength[i])[:3]])
            for i in range(len(codes))]
  a, (gx, gy), key_grid = grid_weights(layer, weights)
  a = np.asarray(a)
  # Coefficients (Attn1/N, SAO, refined SA) can be negative: a signed colormap.
  signed = getattr(layer, "operator", None) in ("mean", "siamese") or \
      getattr(layer, "variant", "sa") != "sa"
  return [(i, (qx, qy, ((qy + 0.5) / gy, (qx + 0.5) / gx)), "coolwarm" if signed else "inferno",
           [(f"head {h}: max {m.max():.2g}", m)
            for h, m in enumerate(a[i, :, qx * gy + qy].reshape(-1, *key_grid))])
          for i in range(len(a)) for qx, qy in ((gx // 2, gy // 2), (gx // 4, gy // 4))]


def draw_layer(path, title, images, layer, weights):
  rows = _figure_rows(layer, weights)
  columns = len(rows[0][3]) + 1
  fig, axes = plt.subplots(len(rows), columns, squeeze=False,
                           figsize=(1.8 * columns, 1.8 * len(rows)))
  h, w = images.shape[1:3]
  extent = (-0.5, w - 0.5, h - 0.5, -0.5)
  for ax_row, (i, query, cmap, maps) in zip(axes, rows):
    image = np.asarray(images[i], np.float32)
    image = image[..., 0] if image.shape[-1] == 1 else image[..., :3]
    image = (image - image.min()) / max(image.max() - image.min(), 1e-6)
    ax_row[0].imshow(image, cmap="gray", extent=extent)
    ax_row[0].set_title(f"image {i}" + (f", query {query[0]},{query[1]}" if query else ""),
                        fontsize=7)
    mark = (query[2][0] * w - 0.5, query[2][1] * h - 0.5) if query else None
    if mark:
      ax_row[0].plot(*mark, "rx", markersize=8, mew=2)
    signed = cmap == "coolwarm"
    for ax, (name, m) in zip(ax_row[1:], maps):
      lim = max(np.abs(m).max(), 1e-12)
      ax.imshow(image, cmap="gray", extent=extent)
      ax.imshow(m, cmap=cmap, vmin=-lim if signed else (0 if cmap == "inferno" else None),
                vmax=lim if signed else None, alpha=0.65, extent=extent)
      if mark:
        ax.plot(*mark, "cx", markersize=6, mew=1.5)
      ax.set_title(name, fontsize=7)
    for ax in ax_row:
      ax.set_xticks([])
      ax.set_yticks([])
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def draw_model(model, images, out_dir, name: str, max_layers: int = 3) -> list:
  """Draws the first `max_layers` recording layers of `model` on `images`; returns the paths."""
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  _, recorded = recording.attention_weights(model, images)
  layers = dict(recording.recording_layers(model))
  paths = []
  for layer_path, values in list(recorded.items())[:max_layers]:
    layer = layers[layer_path]
    what = getattr(layer, "operator", None) or getattr(layer, "variant", None) or \
        getattr(layer, "ham", None) or ""
    slug = re.sub(r"[^\w]+", "_", layer_path).strip("_")
    path = out_dir / f"attention_maps_{name}_{slug}.png"
    draw_layer(path, f"{name} {layer_path}: {type(layer).__name__} {what}".strip(), images, layer,
               values[recording.WEIGHTS][0])
    paths.append(path)
  return paths


def main(argv):
  del argv
  config = _CONFIG.value
  task, state, _ = predict.restore(config, _WORKDIR.value)  # measure.run: errors as one line
  batch = next(iter(pipeline.eval_batches(config, local_batch_size=max(_NUM_IMAGES.value, 1))))
  images = jnp.asarray(batch["image"][:_NUM_IMAGES.value])
  attention = config.model.get("attention", "")
  name = _NAME.value or (f"{config.model.name}_{attention}" if attention else config.model.name)
  paths = draw_model(task.model(state), images, _OUT_DIR.value or measure.RESULTS, name,
                     _MAX_LAYERS.value)
  if not paths:
    cli.fail(f"model {config.model.name} has no attention layer to draw")
  print("\n".join(map(str, paths)))


if __name__ == "__main__":
  measure.run(main)
