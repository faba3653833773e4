"""Detection task pieces without training: optax's focal loss and the smooth L1 from
optax's Huber loss against naive float64 formulas, the loss against a naive per-anchor
sum, and init_from a classification checkpoint's backbone."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attention_lab.ops import boxes as box_ops
from attention_lab.train import tasks
from attention_lab.train.tasks import base, detection
from attention_lab.train.state import make_mesh
from configs.detection import default
from tests.batches import first_batch_spec


@pytest.fixture(scope="module")
def task(tmp_path_factory, digit_scenes_dir):
  config = default.get_config("tiny")
  config.dataset.data_dir = digit_scenes_dir
  config.mesh.num_devices = 1
  env = tasks.Environment(make_mesh(config), str(tmp_path_factory.mktemp("w")), 2)
  return tasks.create(config, env)


def test_focal_loss_matches_naive_formula():
  rng = np.random.default_rng(2)
  logits = rng.normal(0, 3, (6, 5))
  targets = (rng.uniform(size=(6, 5)) < 0.3).astype(np.float64)
  got = optax.sigmoid_focal_loss(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                                 alpha=0.25, gamma=2.0)
  expected = np.zeros_like(logits)
  for i, j in itertools.product(range(6), range(5)):
    p = 1 / (1 + math.exp(-logits[i, j]))
    if targets[i, j]:
      expected[i, j] = -0.25 * (1 - p) ** 2 * math.log(p)
    else:
      expected[i, j] = -0.75 * p**2 * math.log(1 - p)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
  extreme = optax.sigmoid_focal_loss(jnp.asarray([100.0, -100.0]), jnp.asarray([0.0, 1.0]),
                                     alpha=0.25, gamma=2.0)
  np.testing.assert_allclose(extreme, [0.75 * 100, 0.25 * 100], rtol=1e-5)


def test_smooth_l1():
  x = np.linspace(-1, 1, 41)
  expected = np.where(np.abs(x) < 0.2, 0.5 * x * x / 0.2, np.abs(x) - 0.1)
  np.testing.assert_allclose(detection.smooth_l1(jnp.asarray(x), beta=0.2), expected, atol=1e-6)
  np.testing.assert_allclose(detection.smooth_l1(jnp.asarray(x), beta=0.0), np.abs(x), atol=1e-6)


def test_loss_is_the_naive_per_anchor_sum(task):
  anchors = task.anchor_boxes.astype(np.float64)
  n, k = len(anchors), task.num_classes
  rng = np.random.default_rng(0)
  gt = np.array([[[2, 3, 14, 11], [16, 15, 30, 29], [0, 0, 0, 0]],
                 [[5, 20, 25, 31], [0, 0, 0, 0], [0, 0, 0, 0]]], np.float32)
  mask = np.array([[True, True, False], [True, False, False]])
  labels = np.array([[4, 7, 0], [1, 0, 0]])
  logits = rng.normal(0, 2, (2, n, k)).astype(np.float32)
  deltas = rng.normal(0, 1, (2, n, 4)).astype(np.float32)
  batch = {"boxes": jnp.asarray(gt), "box_mask": jnp.asarray(mask),
           "labels": jnp.asarray(labels)}
  loss, values = task.loss_and_metrics(jnp.asarray(logits), jnp.asarray(deltas), batch)

  focal = box = positives = 0.0
  cfg = task.config.loss
  targets = [np.asarray(box_ops.encode(jnp.asarray(gt[b][:, None], jnp.float32),
                                       jnp.asarray(anchors[None], jnp.float32)))
             for b in range(2)]  # (boxes, anchors, 4) per image
  for b in range(2):
    boxes_b = gt[b][mask[b]].astype(np.float64)
    iou = np.array([[(max(0, min(a[2], g[2]) - max(a[0], g[0])) *
                      max(0, min(a[3], g[3]) - max(a[1], g[1]))) /
                     ((a[2] - a[0]) * (a[3] - a[1]) + (g[2] - g[0]) * (g[3] - g[1]) -
                      max(0, min(a[2], g[2]) - max(a[0], g[0])) *
                      max(0, min(a[3], g[3]) - max(a[1], g[1]))) for g in boxes_b]
                    for a in anchors])
    best_anchor = iou.max(0)
    for i in range(n):
      j = int(np.argmax(iou[i]))
      state = "pos" if iou[i, j] >= 0.5 else ("neg" if iou[i, j] < 0.4 else "ignore")
      hits = [m for m in range(len(boxes_b)) if iou[i, m] == best_anchor[m]]
      if hits:
        state, j = "pos", max(hits, key=lambda m: iou[i, m])
      if state == "ignore":
        continue
      for c in range(k):
        p = 1 / (1 + np.exp(-float(logits[b, i, c])))
        t = state == "pos" and c == labels[b][mask[b]][j]
        focal += -(0.25 * (1 - p) ** 2 * np.log(p) if t else 0.75 * p**2 * np.log(1 - p))
      if state == "pos":
        positives += 1
        d = np.abs(deltas[b, i] - targets[b][np.flatnonzero(mask[b])[j], i])
        beta = cfg.smooth_l1_beta
        box += np.sum(np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta))
  expected = (focal + cfg.box_weight * box) / positives
  assert positives >= 3
  np.testing.assert_allclose(float(loss), expected, rtol=2e-4)
  np.testing.assert_allclose(float(values.compute()["positives"]), positives / 2, rtol=1e-6)


def test_init_from_a_classification_checkpoint(task, tmp_path):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  state = jax.jit(task.init_state)()
  # A classifier state with the same backbone tree, other values, and a head.
  source = jax.tree.map(lambda x: x + 1 if jnp.issubdtype(x.dtype, jnp.floating) else x,
                        {"params": {"backbone": state["params"]["backbone"],
                                    "head": {"kernel": jnp.ones((3, 2))}},
                         "non_params": {"backbone": state["non_params"]["backbone"]}})
  with ocp.CheckpointManager(tmp_path / "checkpoints") as manager:
    manager.save(7, args=ocp.args.StandardSave(source))
  task.config.init_from = str(tmp_path)
  try:
    loaded = task.from_pretrained(state)
  finally:
    task.config.init_from = ""
  flat_new = jax.tree_util.tree_leaves_with_path(loaded["params"])
  flat_old = dict(jax.tree_util.tree_leaves_with_path(state["params"]))
  for path, leaf in flat_new:
    if "backbone" in jax.tree_util.keystr(path):
      np.testing.assert_allclose(leaf, flat_old[path] + 1)
    else:
      np.testing.assert_array_equal(leaf, flat_old[path])  # FPN and heads untouched


def test_batch_spec_without_data_is_the_first_batch(task):
  """`attention_lab.aot` compiles from batch_spec() where COCO is not prepared."""
  spec = first_batch_spec(task)  # read from the data
  assert task.batch_spec() == spec
