"""Draws what each global-context operator of a trained classifier attends to.

  python -m experiments.attention_maps [--config=configs/default.py] [--workdir=workdirs/default]
      [--num_images=3] [--out_dir=experiments/results] [--name=...]

Loads the workdir's latest checkpoint (train first with `python -m
attention_lab.main --config=... --workdir=...`), runs the evaluation-mode
model on the first `num_images` test images while recording the input of
every attention layer, and recomputes from that input and the layer's
parameters the weights each query position gives to every position:

- softmax, Attn+Pool, relative (GlobalAttention, AugmentedConv): the row of
  the attention matrix softmax(s·q_i·k_j (+ relative logits)) — on the pooled
  2×2 grid for Attn+Pool;
- Attn1/N ("mean") and SAO ("siamese"): the coefficients c_ij by which v_j
  enters out_i (1/N-scaled, or batch-normalised as in SANet/KANet); for SAO
  c_ij = a_i + b_j with the per-position scores b_j = wᵀk_j, so every query
  sees the same map up to a constant (SAO Eq. 5-6);
- KAO_KV / KAO_QKV: the softmax weights of the row and column summaries (KAO
  Eq. 1-3), drawn as the weight that reaches position (x', y') through them,
  w_row[x']/W + w_col[y']/H (summed over the query's row and column summaries
  for KAO_QKV);
- Hamburger: the codes (B, N, R) of the decomposition, drawn for the three
  bases with the largest total code mass in each image.

In every non-Hamburger case the drawn weights A satisfy out_i = Σ_j A_ij v_j
exactly (tests/experiments/test_attention_maps.py checks it against the
layers). Figures: one PNG per attention layer (at most `max_layers`), rows =
image × query position (marked ×), columns = heads, the map laid over the
image; written to `out_dir` as attention_maps_<name>_<layer>.png.
"""

import contextlib
import math
import pathlib
import re

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from absl import app, flags
from flax import nnx
from ml_collections import config_flags

from attention_lab import ops
from attention_lab.data import pipeline
from attention_lab.layers.augmented_conv import AugmentedConv
from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.layers.hamburger import Hamburger

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/default", "Workdir with the checkpoint.")
_NUM_IMAGES = flags.DEFINE_integer("num_images", 3, "Test images to draw.")
_MAX_LAYERS = flags.DEFINE_integer("max_layers", 3, "Attention layers to draw (first ones).")
_OUT_DIR = flags.DEFINE_string("out_dir", "", "Where the PNGs go (default experiments/results).")
_NAME = flags.DEFINE_string("name", "", "Figure name (default: from the config's model).")

RESULTS = pathlib.Path(__file__).parent / "results"
LAYERS = (GlobalAttention, AugmentedConv, Hamburger)


# ----------------------------------------------------------------------------------------------
# Capturing the inputs of the attention layers.


def attention_layers(model) -> list:
  """[(path string, layer)] of every GlobalAttention / AugmentedConv / Hamburger in the model."""
  return [("/".join(map(str, path)) or "model", m) for path, m in nnx.iter_modules(model)
          if isinstance(m, LAYERS)]


@contextlib.contextmanager
def _recording(layers, store):
  """Patches the layer classes' __call__ so the listed instances record their input."""
  wanted = {id(m) for m in layers}
  originals = {cls: cls.__call__ for cls in {type(m) for m in layers}}

  def wrap(original):
    def call(self, x, *args, **kwargs):
      if id(self) in wanted:
        store[id(self)] = x
      return original(self, x, *args, **kwargs)
    return call

  try:
    for cls, original in originals.items():
      cls.__call__ = wrap(original)
    yield store
  finally:
    for cls, original in originals.items():
      cls.__call__ = original


def layer_inputs(model, images) -> dict:
  """{id(layer): its input} for one eager forward pass of `model` on `images`."""
  layers = [m for _, m in attention_layers(model)]
  with _recording(layers, {}) as store:
    model(images)
  return store


# ----------------------------------------------------------------------------------------------
# Weights from a layer's parameters and input.


def _flat(t):
  return t.reshape(t.shape[0], -1, *t.shape[-2:])


def _summary_to_grid(weights, x, y):
  """(..., X+Y) summary weights → (..., X, Y) weight reaching each position (KAO Eq. 1)."""
  rows, cols = weights[..., :x], weights[..., x:]
  return rows[..., :, None] / y + cols[..., None, :] / x


def global_attention_weights(layer: GlobalAttention, x):
  """(A (B, H, Nq, Nk), v (B, Nk, H, Dv), query grid, key grid) with out = A·v per head,
  before the output projection. Evaluation mode (running coefficient statistics)."""
  if layer.dtype is not None:
    x = x.astype(layer.dtype)
  heads = layer._heads  # pylint: disable=protected-access
  q = heads(layer.query(x) if layer.query else x).astype(jnp.float32)
  k = heads(layer.key(x) if layer.key else x).astype(jnp.float32)
  v = heads(layer.value(x)).astype(jnp.float32)
  grid, op = tuple(x.shape[1:-1]), layer.operator
  norm = layer.coefficients == "batch_norm"
  if norm:
    gain = layer.coef_scale[...] * jax.lax.rsqrt(layer.coef_var[...] + layer.bn_epsilon)
  scale = gain[None, :, None, None] if norm else q.shape[-1] ** -0.5
  logits = lambda qq, kk: jnp.einsum("bqhd,bkhd->bhqk", qq, kk)
  if op in ("softmax", "relative"):
    e = logits(_flat(q), _flat(k))
    if op == "relative":
      lh, lw = ops.relative_logits_2d(q, layer.rel_h[...], layer.rel_w[...])
      e = e + (lh[..., :, None] + lw[..., None, :]).reshape(e.shape)
    return jax.nn.softmax(scale * e, axis=-1), _flat(v), grid, grid
  if op == "softmax_pool":
    k_pool, v_pool = ops.pool_keys_values(k, v)
    key_grid = tuple(-(-s // 2) for s in grid)
    return jax.nn.softmax(scale * logits(_flat(q), k_pool), axis=-1), v_pool, grid, key_grid
  if op in ("mean", "siamese"):
    qf, kf = _flat(q), _flat(k)
    n = kf.shape[1]
    if op == "mean":
      e = logits(qf, kf)
    else:
      w = layer.w[...].astype(jnp.float32)
      a, b = jnp.einsum("bnhd,hd->bhn", qf, w), jnp.einsum("bnhd,hd->bhn", kf, w)
      e = a[..., :, None] + (b[..., None, :] if layer.global_term else 0.0 * b[..., None, :])
    if norm:
      shift = layer.coef_bias[...] - gain * layer.coef_mean[...]
      c = gain[None, :, None, None] * e + shift[None, :, None, None]
    else:
      c = (q.shape[-1] ** -0.5 if op == "mean" else 1.0) * e / n
    return c, _flat(v), grid, grid
  if op in ("kronecker_kv", "kronecker_qkv"):
    if len(grid) != 2:
      raise ValueError(f"maps are drawn for 2D grids only, got {grid}")
    gx, gy = grid
    summary = lambda t: jnp.concatenate([t.mean(axis=2), t.mean(axis=1)], axis=1)  # (B, X+Y, H, D)
    kbar = summary(k)
    if op == "kronecker_kv":
      weights = jax.nn.softmax(scale * logits(_flat(q), kbar), axis=-1)  # (B, H, N, X+Y)
    else:
      ws = jax.nn.softmax(scale * logits(summary(q), kbar), axis=-1)  # (B, H, X+Y, X+Y)
      # Query (x, y) gets o_rows[x] + o_cols[y] (KAO Eq. 3): add the two rows.
      weights = (ws[:, :, :gx, None, :] + ws[:, :, None, gx:, :]).reshape(
          ws.shape[0], ws.shape[1], gx * gy, -1)
    a = _summary_to_grid(weights, gx, gy).reshape(*weights.shape[:3], gx * gy)
    return a, _flat(v), grid, grid
  raise ValueError(f"no attention map for operator {op!r}")


def augmented_conv_weights(layer: AugmentedConv, x):
  """(A (B, H, Nq, Nk), v, grid, grid) of an AugmentedConv's attention branch (AA Eq. 1-4)."""
  b = x.shape[0]
  qkv = layer.qkv(layer.attention_input(x)).astype(jnp.float32)
  if layer.downsample:
    qkv = nnx.avg_pool(qkv, (3, 3), (2, 2), "SAME")
  gh, gw = qkv.shape[1:3]
  split = lambda t: t.reshape(b, gh, gw, layer.heads, t.shape[-1] // layer.heads)
  q, k, v = (split(t) for t in jnp.split(qkv, [layer.dk, 2 * layer.dk], axis=-1))
  e = jnp.einsum("bqhd,bkhd->bhqk", _flat(q), _flat(k))
  if layer.positional == "relative":
    lh, lw = ops.relative_logits_2d(q, layer.rel_h[...], layer.rel_w[...])
    e = e + (lh[..., :, None] + lw[..., None, :]).reshape(e.shape)
  return jax.nn.softmax(q.shape[-1] ** -0.5 * e, axis=-1), _flat(v), (gh, gw), (gh, gw)


def hamburger_codes(layer: Hamburger, x):
  """(codes (B, X, Y, R) of group 0, strength (B, R) = mean code per basis), evaluation mode."""
  b, h, w, _ = x.shape
  y = layer.lower(x.reshape(b * h * w, -1))
  if layer.ham == "nmf":
    y = jax.nn.relu(y)
  d, s = y.shape[-1], layer.groups
  tokens = jnp.swapaxes(y.reshape(b, h * w, s, d // s), 1, 2).reshape(b * s, h * w, d // s)
  # pylint: disable=protected-access
  _, codes = layer._decompose(tokens.astype(jnp.float32), layer._initial_bases(b, d // s),
                              layer.eval_steps)
  codes = codes.reshape(b, s, h, w, -1)[:, 0]
  return codes, jnp.mean(codes, axis=(1, 2))


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
  inputs = layer_inputs(model, images)
  paths = []
  for layer_path, layer in attention_layers(model)[:max_layers]:
    x = inputs.get(id(layer))
    if x is None:
      continue
    slug = re.sub(r"[^\w]+", "_", layer_path).strip("_")
    path = out_dir / f"attention_maps_{name}_{slug}.png"
    if isinstance(layer, Hamburger):
      codes, strength = hamburger_codes(layer, x)
      draw_codes(path, f"{name} {layer_path}: Hamburger ({layer.ham}) codes of the 3 strongest "
                 "bases", images, codes, strength)
    else:
      fn = augmented_conv_weights if isinstance(layer, AugmentedConv) else global_attention_weights
      weights, _, query_grid, key_grid = fn(layer, x)
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
  from attention_lab.train.trainer import Trainer  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  trainer = Trainer(config, _WORKDIR.value)
  if trainer.checkpoints.latest_step() is None:
    raise SystemExit(f"no checkpoint in {_WORKDIR.value}: train first with `python -m "
                     f"attention_lab.main --config=... --workdir={_WORKDIR.value}`")
  model = trainer.task.model(trainer.state)
  images = test_images(config, _NUM_IMAGES.value)
  paths = draw_model(model, images, _OUT_DIR.value or RESULTS,
                     _NAME.value or default_name(config), _MAX_LAYERS.value)
  if not paths:
    raise SystemExit(f"model {config.model.name} has no attention layer to draw")
  for p in paths:
    print(p)


if __name__ == "__main__":
  app.run(main)
