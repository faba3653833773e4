"""Every classification config: the `:tiny` preset of each row trains two steps; the full
configs carry the papers' recipes; presets are checked."""

import pytest
from flax import nnx

from attention_lab import models
from attention_lab.train.trainer import Trainer
from configs.aa import mnasnet_imagenet, resnet_imagenet, wrn_cifar100
from configs.kanet import imagenet as kanet_imagenet
from configs.sanet import imagenet as sanet_imagenet

CONFIGS = {"sanet": sanet_imagenet, "kanet": kanet_imagenet, "aa_wrn": wrn_cifar100,
           "aa_resnet": resnet_imagenet, "aa_mnasnet": mnasnet_imagenet}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tiny_preset_trains_two_steps(tmp_path, name):
  config = CONFIGS[name].get_config("tiny")
  assert config.num_train_steps == 2
  config.dataset.data_dir = str(tmp_path / "tfds")
  summary = Trainer(config, str(tmp_path / "workdir")).run()
  assert 0.0 <= summary["eval_top1"] <= 1.0


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_row_builds_at_cpu_size(name):
  """Each row's `:ROW,cpu` network exists and accepts the preset's model fields (shapes only;
  the default row's forward pass runs in the `:tiny` training test). The SE and AA ResNet
  rows are built at their `:tiny` depth (one block per stage): they change the blocks, not
  how many there are, and each depth's block counts are built at full depth by its plain
  row (tracing se_/aa_resnet101/152 costs 5-10 s each; their 34/50-layer nets are traced
  at full depth in tests/models/test_resnet.py)."""
  module = CONFIGS[name]
  for row in module.ROWS:
    config = module.get_config(f"{row},cpu")
    assert config.model.name == row and config.dataset.name == "digits"
    overrides = {k: v for k, v in config.model.items() if k not in ("name", "dtype")}
    if module is resnet_imagenet and row.startswith(("se_", "aa_")):
      overrides["depth"] = module.get_config(f"{row},tiny").model.depth
    model = nnx.eval_shape(lambda: models.create(row, num_classes=10, rngs=nnx.Rngs(0),
                                                 **overrides))
    assert isinstance(model, nnx.Module), row


@pytest.mark.parametrize("name", ["sanet", "kanet"])
def test_full_config_is_the_paper_recipe(name):
  config = CONFIGS[name].get_config()
  assert config.optimizer.decay_epochs == (80, 105, 120) and config.num_epochs == 150
  # SANet's appendix: batch 640; KAO's: 512 on 8 TITAN Xp.
  assert config.model.dropout == pytest.approx(0.2)
  assert config.batch_size == {"sanet": 640, "kanet": 512}[name]
  assert config.dataset.name == "imagenet2012"


def test_aa_wrn_recipe():
  config = wrn_cifar100.get_config()
  assert config.optimizer.schedule == "cosine" and config.optimizer.warmup_epochs == 25
  assert config.batch_size == 256 and config.optimizer.weight_decay == 5e-4
  baseline = wrn_cifar100.get_config("se_wide_resnet28_10")
  assert baseline.batch_size == 1024 and baseline.optimizer.weight_decay == 2e-4
  assert baseline.optimizer.learning_rate == pytest.approx(0.8)


def test_aa_resnet_recipe():
  config = resnet_imagenet.get_config()
  assert config.model.name == "aa_resnet50" and config.dataset.crop == "inception"
  assert config.optimizer.decay_epochs == (30, 60, 80, 90) and config.num_epochs == 100
  assert config.optimizer.warmup_epochs == 5.0 and config.optimizer.weight_decay == 1e-4
  assert config.optimizer.learning_rate == pytest.approx(0.128 * config.batch_size / 256)
  assert (config.model.kappa, config.model.upsilon) == (0.2, 0.1)
  r34 = resnet_imagenet.get_config("aa_resnet34")
  assert (r34.model.kappa, r34.model.upsilon) == (0.25, 0.25)
  assert "kappa" not in resnet_imagenet.get_config("resnet101").model


def test_aa_mnasnet_recipe():
  """AA A.1: augmented MnasNets start at half the learning rate and end at the same one."""
  base, aa = mnasnet_imagenet.get_config("mnasnet_a1"), mnasnet_imagenet.get_config()
  assert base.optimizer.name == aa.optimizer.name == "rmsprop"
  assert aa.optimizer.learning_rate == pytest.approx(base.optimizer.learning_rate / 2)
  decays = (base.num_epochs - base.optimizer.warmup_epochs) / base.optimizer.decay_every_epochs
  final = lambda c: c.optimizer.learning_rate * c.optimizer.decay_factor ** decays
  assert final(aa) == pytest.approx(final(base))


@pytest.mark.parametrize("preset", ["gpu", "cpu,tiny", "sanet,attnnet"])
def test_unknown_preset(preset):
  with pytest.raises(ValueError, match="preset"):
    sanet_imagenet.get_config(preset)
