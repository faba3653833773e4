"""The GAN task: one step's pieces, EMA, exact resume, and the `:tiny` default end to end."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_lab.models import sagan
from attention_lab.train import tasks
from attention_lab.train.tasks import base
from attention_lab.train.tasks import gan
from attention_lab.train.state import make_mesh
from attention_lab.train.trainer import Trainer
from configs.gan import default
from tests.batches import first_batch_spec

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny(tmp_path, **overrides):
  config = default.get_config("tiny")
  config.eval.features = "none"
  config.mesh.num_devices = 2
  config.batch_size = 4
  for key, value in overrides.items():
    target = config
    *path, last = key.split(".")
    for name in path:
      target = target[name]
    target[last] = value
  return config


def leaves(tree):
  return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
                     else x) for x in jax.tree.leaves(tree)]


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
  """A tiny conditional GAN with G frozen (lr 0) and EMA 0.9 after step 3: the task, the initial
  state and the states after each of 6 steps, D's losses, a fixed real batch and the jitted
  step. D's output layer and class embedding start at zero, so its hinge loss starts at
  exactly 2 (a random tiny D may start with it at 0)."""
  tmp = tmp_path_factory.mktemp("gan")
  config = tiny(tmp, **{"g_optimizer.learning_rate": 0.0, "d_optimizer.learning_rate": 5e-3,
                        "ema_decay": 0.9, "ema_start_step": 3})
  task = tasks.create(config, tasks.Environment(make_mesh(config), str(tmp), 4))
  state = jax.jit(task.init_state)()

  def zero_head(path, x):
    top = getattr(path[0], "key", None)
    return jnp.zeros_like(x) if top in ("linear", "embed") and x.ndim == 2 else x

  state["discriminator"]["params"] = jax.tree_util.tree_map_with_path(
      zero_head, state["discriminator"]["params"])
  batch = task.env.global_batch(next(task.train_batches(0)))
  step = jax.jit(task.train_step)
  states, d_losses = [state], []
  for _ in range(6):
    state, values = step(state, batch)
    states.append(state)
    d_losses.append(float(values.compute()["d_loss"]))
  return task, states, d_losses, batch, step


def test_discriminator_loss_falls_on_a_fixed_generator(stepped):
  _, states, d_losses, _, _ = stepped
  for a, b in zip(leaves(states[0]["generator"]["params"]),
                  leaves(states[-1]["generator"]["params"])):
    np.testing.assert_array_equal(a, b)  # G frozen
  assert np.isfinite(d_losses).all()
  assert d_losses[0] == pytest.approx(2.0)
  assert np.mean(d_losses[-2:]) < 1.9, d_losses


def test_generator_gradient_is_nonzero(stepped):
  task, states, _, _, _ = stepped
  state = states[-1]  # D trained (its zeroed head has moved)
  z, y = task._latent(jax.random.key(3), 4)  # pylint: disable=protected-access

  def g_loss(params):
    gen = task.generator.model({**state["generator"], "params": params}, train=True)
    disc = task.discriminator.model(state["discriminator"], train=True)
    return -jnp.mean(disc(gen(z, y), y))

  grads = leaves(jax.jit(jax.grad(g_loss))(state["generator"]["params"]))
  assert all(np.isfinite(g).all() for g in grads)
  nonzero = sum(int(np.count_nonzero(g)) for g in grads) / sum(g.size for g in grads)
  assert nonzero > 0.5  # conditional BN rows of absent classes are the zeros


def _ema_off_g(state):
  """`state` with its EMA moved off G's weights: G is frozen in `stepped`, so an EMA equal to
  them would stay equal whatever the update."""
  ema, treedef = jax.tree.flatten(state["ema"])
  moved = [x + jax.random.normal(jax.random.key(i), x.shape, x.dtype) for i, x in enumerate(ema)]
  return {**state, "ema": jax.tree.unflatten(treedef, moved)}


def test_ema_copies_g_until_its_start_step_then_averages(stepped):
  """Up to `ema_start_step` (3) a step sets the EMA to G's weights; after it, to
  decay·ema + (1 − decay)·θ_G (decay 0.9) in float32, to within 2 eps of the two terms
  (exact arithmetic in float64; XLA may fuse either product into an FMA)."""
  _, states, _, batch, step = stepped
  copied, _ = step(_ema_off_g(states[2]), batch)  # step 3: the last copy
  for e, p in zip(leaves(copied["ema"]), leaves(copied["generator"]["params"])):
    np.testing.assert_array_equal(e, p)
  decay, eps = np.float32(0.9), np.finfo(np.float32).eps
  state = _ema_off_g(states[3])
  for _ in range(3):  # steps 4 (the first average), 5, 6
    before = leaves(state["ema"])
    state, _ = step(state, batch)
    for e0, e1, p in zip(before, leaves(state["ema"]), leaves(state["generator"]["params"])):
      kept = np.float64(decay) * e0
      added = np.float64(np.float32(1) - decay) * p
      assert e1.dtype == np.float32
      assert np.all(np.abs(e1 - (kept + added)) <= 2 * eps * (np.abs(kept) + np.abs(added)))
  assert np.array_equal(states[0]["step"], 0) and int(state["step"]) == 6


def test_resume_is_exact(tmp_path):
  """3 steps straight == 2 steps, a new Trainer restored from the workdir, 1 more step:
  G, D, both optimizer states, the EMA and the RNG all equal."""
  config = tiny(tmp_path, num_train_steps=3, eval_every_steps=100, ema_decay=0.5,
                ema_start_step=1, d_steps=2, checkpoint_every_steps=1)
  straight = Trainer(config, str(tmp_path / "a"))
  straight.run()
  first = Trainer(config, str(tmp_path / "b"))
  first.run(until_step=2)
  resumed = Trainer(config, str(tmp_path / "b"))
  assert int(resumed.state["step"]) == 2
  resumed.run()
  assert set(resumed.state) == {"step", "generator", "discriminator", "ema", "rng"}
  for key in ("generator", "discriminator", "ema"):
    for a, b in zip(leaves(resumed.state[key]), leaves(straight.state[key])):
      np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(jax.random.key_data(resumed.state["rng"]),
                                jax.random.key_data(straight.state["rng"]))


def test_bad_config_names_the_field(tmp_path):
  for overrides, match in (({"d_steps": 0}, "d_steps"), ({"ema_decay": 1.0}, "ema_decay"),
                           ({"eval.features": "clip"}, "eval.features"),
                           ({"dataset.name": "mnist"}, "dataset.name"),
                           ({"model.context_side": 32}, "context_side"),
                           ({"mode_seeking": -1.0}, "mode_seeking")):
    with pytest.raises(ValueError, match=match):
      config = tiny(tmp_path, **overrides)
      task = tasks.create(config, tasks.Environment(make_mesh(config), str(tmp_path), 4))
      jax.eval_shape(task.init_state)


def test_tiny_default_through_main(tmp_path):
  """`python -m attention_lab.main --config=configs/gan/default.py:tiny`: trains its tiny digits
  classifier, two GAN steps, scores (FID, IS, KID, conditional accuracy) and pictures."""
  workdir = tmp_path / "w"
  env = {**os.environ, "PYTHONPATH": REPO, "TFDS_DATA_DIR": str(tmp_path / "tfds")}
  out = subprocess.run(
      [sys.executable, "-m", "attention_lab.main", "--config=configs/gan/default.py:tiny",
       f"--workdir={workdir}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  final = out.stdout.strip().splitlines()[-1]
  for name in ("eval_fid", "eval_is", "eval_kid", "eval_conditional_accuracy", "train_d_loss",
               "eval_precision", "eval_recall", "eval_class_recall", "eval_class_diversity"):
    assert name in final, final
  history = json.loads((workdir / "fid_history.json").read_text())
  assert [h["step"] for h in history] == [2] and history[0]["eval_fid"] >= 0
  assert (workdir / "fid_history.png").exists()
  assert list((workdir / "images").glob("samples_*.png"))
  assert list((tmp_path / "tfds" / "gan_statistics").glob("digits_train_32px_64_digits-*.npz"))


@pytest.mark.parametrize("d_steps", [1, 2])
def test_batch_spec_without_data_is_the_first_batch(tmp_path, d_steps):
  """`attention_lab.aot` compiles from batch_spec() where ImageNet / CelebA are not prepared."""
  config = tiny(tmp_path, d_steps=d_steps)
  task = tasks.create(config, tasks.Environment(make_mesh(config), str(tmp_path), 4))
  assert task.batch_spec() == first_batch_spec(task)


def test_minibatch_stddev_matches_a_loop_and_keeps_groups_apart():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 3, 2, 5)).astype(np.float32)
  x[4:] *= 3  # the second half (a "fake" half) varies more
  out = np.asarray(sagan.minibatch_stddev(jnp.asarray(x), 4))
  np.testing.assert_array_equal(out[..., :5], x)
  for g in range(2):
    members = x[4 * g:4 * g + 4].astype(np.float64)
    expected = np.mean([np.sqrt(np.var(members[:, i, j, c]) + 1e-8)
                        for i in range(3) for j in range(2) for c in range(5)])
    np.testing.assert_allclose(out[4 * g:4 * g + 4, ..., 5], expected, rtol=1e-5)
  with pytest.raises(ValueError, match="multiple"):
    sagan.minibatch_stddev(jnp.zeros((6, 2, 2, 1)), 4)


def test_hierarchical_z_reaches_every_block():
  """With hierarchical z, block i's norms read z's chunk i + 1: once their maps are non-zero,
  changing only that chunk changes the image; the option needs the shared class embedding."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  g = sagan.SaganGenerator(num_classes=10, resolution=32, width=1, latent_dim=8,
                           class_embedding=4, hierarchical_z=True, attention="none",
                           rngs=nnx.Rngs(0))
  for block in g.blocks:
    for norm in (block.norm1, block.norm2):
      norm.gain.kernel[...] = jax.random.normal(jax.random.key(1), norm.gain.kernel.shape)
  g.eval()
  z, y = jax.random.normal(jax.random.key(2), (2, 8)), jnp.array([3, 3])
  base_image = g(z, y)
  for chunk in range(4):
    moved = z.at[:, 2 * chunk:2 * chunk + 2].add(1.0)
    assert float(jnp.abs(g(moved, y) - base_image).max()) > 1e-4, chunk
  with pytest.raises(ValueError, match="hierarchical_z"):
    sagan.SaganGenerator(num_classes=10, resolution=32, width=1, latent_dim=9,
                         class_embedding=4, hierarchical_z=True, rngs=nnx.Rngs(0))


def test_mode_seeking_loss_matches_a_loop():
  """MSGAN's term over the pairs (i, i + B/2), against a float64 loop; a collapsed pair (the
  same image for two z) costs 1/ε."""
  rng = np.random.default_rng(0)
  images, z = rng.normal(size=(6, 4, 4, 3)), rng.normal(size=(6, 5))
  expected = np.mean([1.0 / (np.mean(np.abs(images[i] - images[i + 3]))
                             / np.mean(np.abs(z[i] - z[i + 3])) + 1e-5) for i in range(3)])
  got = gan.mode_seeking_loss(jnp.asarray(images, jnp.float32), jnp.asarray(z, jnp.float32))
  np.testing.assert_allclose(float(got), expected, rtol=1e-5)
  same = jnp.concatenate([jnp.asarray(images[:3], jnp.float32)] * 2)
  np.testing.assert_allclose(float(gan.mode_seeking_loss(same, jnp.asarray(z, jnp.float32))),
                             1e5, rtol=1e-6)


def test_generator_runs_on_its_share_of_the_batch():
  """z and y drawn inside the step are split over the mesh like the real batch: per-device
  temporaries at a fixed per-device batch do not grow with the number of devices (they
  would if every device ran G on the whole batch)."""
  from attention_lab import aot  # pylint: disable=g-import-not-at-top

  def temporaries(n):
    config = tiny(None, **{"mesh.num_devices": n, "batch_size": 4 * n})
    _, _, (_, _, state, batch, step) = aot.prepare(config, jax.devices()[:n])
    return step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes

  assert temporaries(4) <= 1.1 * temporaries(1)
