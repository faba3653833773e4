import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attention_lab.train import optim
from configs import schema


def _cfg(**kw):
  return schema.optimizer(**kw)


def test_step_decay_of_the_sanet_recipe():
  s = optim.make_schedule(_cfg(schedule="step", decay_epochs=(80, 105, 120), decay_factor=0.1),
                          steps_per_epoch=10, total_steps=1500)
  np.testing.assert_allclose([s(0), s(799), s(800), s(1049), s(1050), s(1200)],
                             [0.1, 0.1, 0.01, 0.01, 1e-3, 1e-4], rtol=1e-6)


def test_warmup_then_step_decay_of_the_aa_resnets():
  s = optim.make_schedule(_cfg(schedule="step", decay_epochs=(30, 60, 80, 90), decay_factor=0.1,
                               warmup_epochs=5), steps_per_epoch=10, total_steps=1000)
  np.testing.assert_allclose([s(0), s(25), s(50), s(299), s(300), s(900)],
                             [0.0, 0.05, 0.1, 0.1, 0.01, 1e-5], rtol=1e-5, atol=1e-9)


def test_warmup_cosine_exponential_poly():
  cos = optim.make_schedule(_cfg(schedule="cosine", warmup_epochs=1), steps_per_epoch=10,
                            total_steps=110)
  np.testing.assert_allclose([cos(5), cos(10), cos(60), cos(110)], [0.05, 0.1, 0.05, 0.0],
                             atol=1e-6)
  exp = optim.make_schedule(_cfg(schedule="exponential", decay_every_epochs=2.4,
                                 decay_factor=0.97), steps_per_epoch=10, total_steps=100)
  np.testing.assert_allclose([exp(23), exp(24), exp(48)], [0.1, 0.097, 0.1 * 0.97**2], rtol=1e-6)
  poly = optim.make_schedule(_cfg(schedule="poly", power=0.9), steps_per_epoch=10,
                             total_steps=100)
  np.testing.assert_allclose([poly(0), poly(50), poly(100)], [0.1, 0.1 * 0.5**0.9, 0.0],
                             rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", optim.OPTIMIZERS)
def test_optimizers_decay_kernels_only(name):
  cfg = _cfg(schedule="constant", weight_decay=0.5, grad_clip_norm=1.0)
  cfg.name = name
  tx = optim.make_optimizer(cfg, optax.constant_schedule(0.0 if name != "adamw" else 0.1))
  params = {"kernel": np.ones((2, 2), np.float32), "bias": np.ones((2,), np.float32)}
  zeros = {k: np.zeros_like(v) for k, v in params.items()}
  updates, _ = tx.update(zeros, tx.init(params), params)
  assert np.all(np.asarray(updates["bias"]) == 0)
  if name == "adamw":
    assert np.all(np.asarray(updates["kernel"]) < 0)


def test_unknown_names():
  with pytest.raises(ValueError, match="optimizer.name"):
    optim.make_optimizer(_cfg(name="lamb", schedule="constant"), optax.constant_schedule(0.1))


def test_conv_only_weight_decay_and_head_learning_rate_multiplier():
  params = {"backbone": {"conv": np.ones((3, 3, 2, 2), np.float32),
                         "bias": np.ones((2,), np.float32)},
            "classifier": {"kernel": np.ones((1, 1, 2, 3), np.float32),
                           "dense": np.ones((2, 3), np.float32)}}
  zeros = {k: {n: np.zeros_like(v) for n, v in d.items()} for k, d in params.items()}
  tx = optim.make_optimizer(_cfg(momentum=0.0, weight_decay=0.5, decay_params="conv_kernels",
                                 head_lr_multiplier=10.0), optax.constant_schedule(0.1))
  updates, _ = tx.update(zeros, tx.init(params), params)
  # Zero gradients: the update is −lr·(lr multiplier)·wd·w on conv kernels, 0 elsewhere.
  np.testing.assert_allclose(updates["backbone"]["conv"], -0.05)
  np.testing.assert_allclose(updates["backbone"]["bias"], 0.0)
  np.testing.assert_allclose(updates["classifier"]["kernel"], -0.5)
  np.testing.assert_allclose(updates["classifier"]["dense"], 0.0)
  grads = {k: {n: np.ones_like(v) for n, v in d.items()} for k, d in params.items()}
  tx = optim.make_optimizer(_cfg(momentum=0.0, head_lr_multiplier=10.0),
                            optax.constant_schedule(0.1))
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["backbone"]["bias"], -0.1)
  np.testing.assert_allclose(updates["classifier"]["dense"], -1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="decay_params"):
    optim.make_optimizer(_cfg(decay_params="all"), optax.constant_schedule(0.1))


def _moments(state, name):
  """The leaves of every `name` field (mu, trace, nu) in an optimizer state."""
  return [leaf for _, value in optax.tree_utils.tree_get_all_with_path(state, name)
          for leaf in jax.tree.leaves(value)]


@pytest.mark.parametrize("name", optim.OPTIMIZERS)
@pytest.mark.parametrize("mu_dtype", ["", "float32", "bfloat16"])
def test_first_moment_dtype(name, mu_dtype):
  cfg = _cfg(name=name, schedule="constant", mu_dtype=mu_dtype)
  tx = optim.make_optimizer(cfg, optax.constant_schedule(0.1))
  params = {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros((2,))}
  state = tx.init(params)
  first = _moments(state, "mu" if name.startswith("adam") else "trace")
  assert len(first) == 2
  expected = jnp.bfloat16 if mu_dtype == "bfloat16" else jnp.float32
  assert all(leaf.dtype == expected for leaf in first)
  assert all(leaf.dtype == jnp.float32 for leaf in _moments(state, "nu"))  # Adam's second
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), params)
  updates, state = tx.update(grads, state, params)
  new = optax.apply_updates(params, updates)
  assert all(p.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(p)))
             for p in jax.tree.leaves(new))
  first = _moments(state, "mu" if name.startswith("adam") else "trace")
  assert all(leaf.dtype == expected and bool(jnp.all(leaf != 0)) for leaf in first)


def test_rmsprop_is_optax_rmsprop():
  """The chain built for the momentum dtype has optax.rmsprop's state and updates."""
  schedule = optax.exponential_decay(0.1, 2, 0.5)
  tx = optim.make_optimizer(_cfg(name="rmsprop", schedule="constant"), schedule)
  reference = optax.rmsprop(schedule, decay=0.9, eps=1e-3, momentum=0.9)
  params = {"kernel": jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)}
  state, ref_state = tx.init(params), reference.init(params)
  assert jax.tree.structure(state) == jax.tree.structure(optax.chain(reference).init(params))
  for step in range(3):
    grads = jax.tree.map(lambda p: jnp.sin(p * (step + 1)), params)
    updates, state = tx.update(grads, state, params)
    ref_updates, ref_state = reference.update(grads, ref_state, params)
    np.testing.assert_array_equal(updates["kernel"], ref_updates["kernel"])


def test_bad_mu_dtype():
  with pytest.raises(ValueError, match="optimizer.mu_dtype"):
    optim.make_optimizer(_cfg(schedule="constant", mu_dtype="float16"),
                         optax.constant_schedule(0.1))
