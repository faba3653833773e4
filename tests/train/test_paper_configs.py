import pytest

from attention_lab.train.trainer import Trainer
from configs.aa import wrn_cifar100
from configs.kanet import imagenet as kanet_imagenet
from configs.sanet import imagenet as sanet_imagenet

CONFIGS = {"sanet": sanet_imagenet, "kanet": kanet_imagenet, "aa_wrn": wrn_cifar100}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cpu_preset_trains_two_steps(tmp_path, name):
  config = CONFIGS[name].get_config("cpu")
  config.dataset.data_dir = str(tmp_path / "tfds")
  config.num_train_steps = 2
  summary = Trainer(config, str(tmp_path / "workdir")).run()
  assert 0.0 <= summary["eval_top1"] <= 1.0


@pytest.mark.parametrize("name", ["sanet", "kanet"])
def test_full_config_is_the_paper_recipe(name):
  config = CONFIGS[name].get_config()
  assert config.optimizer.decay_epochs == (80, 105, 120) and config.num_epochs == 150
  assert config.model.dropout == pytest.approx(0.2) and config.batch_size == 640
  assert config.dataset.name == "imagenet2012"


def test_aa_wrn_recipe():
  config = wrn_cifar100.get_config()
  assert config.optimizer.schedule == "cosine" and config.optimizer.warmup_epochs == 25
  assert config.batch_size == 256 and config.optimizer.weight_decay == 5e-4


def test_unknown_preset():
  with pytest.raises(ValueError, match="preset"):
    sanet_imagenet.get_config("gpu")
