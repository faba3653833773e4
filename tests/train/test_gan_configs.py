"""Every GAN config: the `:cpu` presets train two steps; the full configs are the papers'."""

import importlib

import jax
import numpy as np
import pytest
from flax import nnx

from attention_lab import models
from attention_lab.models.sagan import GanHamburger
from attention_lab.train.trainer import Trainer

CONFIGS = ("configs.gan.default", "configs.isa.cifar10", "configs.isa.celeba64",
           "configs.hamburger.imagenet128_hamgan")


@pytest.mark.parametrize("name", CONFIGS)
def test_cpu_preset_trains_two_steps(tmp_path, name):
  config = importlib.import_module(name).get_config("cpu")
  assert config.dataset.name == "digits"
  config.num_train_steps = 2
  config.eval_every_steps = 2
  config.eval.features = "none"  # the digits classifier is exercised in test_gan.py
  trainer = Trainer(config, str(tmp_path))
  summary = trainer.run()
  assert np.isfinite(summary["train_d_loss"]) and np.isfinite(summary["train_g_loss"])
  assert int(trainer.state["step"]) == 2
  assert list((tmp_path / "images").glob("samples_*.png"))


@pytest.mark.parametrize("name,attention,conditional,size", [
    ("configs.isa.cifar10", "sa", False, 64), ("configs.isa.celeba64", "sa", False, 64),
    ("configs.hamburger.imagenet128_hamgan", "hamburger", True, 128)])
def test_full_configs_follow_the_papers(name, attention, conditional, size):
  config = importlib.import_module(name).get_config()
  assert config.model.attention == attention and config.conditional == conditional
  assert config.dataset.image_size == size and config.eval.features == "inception"
  assert config.eval.num_samples == 50_000 and config.ema_decay == 0.0
  assert config.mode_seeking == 0.0  # MSGAN's term is the digits default's, not the papers'
  for opt, lr in ((config.g_optimizer, 1e-4), (config.d_optimizer, 4e-4)):
    assert (opt.name, opt.b1, opt.b2, opt.learning_rate) == ("adam", 0.0, 0.9, lr)


def test_hamgan_has_the_official_ham_sizes():
  """G: d = 256, r = 32; D: d = 128, r = 16; K = 6 (abstract models, nothing allocated)."""
  module = importlib.import_module("configs.hamburger.imagenet128_hamgan")
  config = module.get_config()
  assert module.get_config("strong").batch_size == 1024
  kw = dict(num_classes=1000, resolution=128, attention="hamburger", width=config.model.width)
  rngs = lambda: nnx.Rngs(jax.random.key(0, impl="unsafe_rbg"))
  g = nnx.eval_shape(lambda: models.create("sagan_generator", rngs=rngs(), **kw))
  d = nnx.eval_shape(lambda: models.create("sagan_discriminator", rngs=rngs(), **kw))
  for model, dim, rank in ((g, 256, 32), (d, 128, 16)):
    assert isinstance(model.context, GanHamburger)
    assert (model.context.dim, model.context.rank, model.context.steps) == (dim, rank, 6)


def test_unknown_preset():
  with pytest.raises(ValueError, match="preset"):
    importlib.import_module("configs.isa.cifar10").get_config("gpu")
