"""Every classification config: the `:tiny` preset of each row trains two steps; the full
configs carry the papers' recipes; presets are checked. Every training config: its family's
schema (configs/schema.py), no config built from another."""

import importlib
import pathlib
import re

import ml_collections
import pytest
from flax import nnx

from attention_lab import models
from attention_lab.train.trainer import Trainer
from configs import schema
from configs.aa import mnasnet_imagenet, resnet_imagenet, wrn_cifar100
from configs.kanet import imagenet as kanet_imagenet
from configs.sanet import imagenet as sanet_imagenet

CONFIG_DIR = pathlib.Path(__file__).parents[2] / "configs"
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
  row (tracing se_/aa_resnet101/152 is slow; their 34/50-layer nets are traced
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


def _training_configs():
  """(file, preset) of every training config file under configs/ (one with get_config and a
  task) at each size preset it accepts and each paper row it lists at `:cpu`."""
  for path in sorted(CONFIG_DIR.rglob("*.py")):
    module_name = ".".join(path.relative_to(CONFIG_DIR.parent).with_suffix("").parts)
    module = importlib.import_module(module_name)
    if not hasattr(module, "get_config") or "task" not in module.get_config():
      continue
    for preset in (None, "cpu", "tiny", *(f"{row},cpu" for row in getattr(module, "ROWS", ()))):
      try:
        yield module_name, preset, module.get_config(preset)
      except ValueError:
        assert preset in ("cpu", "tiny"), (module_name, preset)  # sizes it does not offer


def _leaves(config, prefix=""):
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      yield from _leaves(value, f"{prefix}{key}.")
    else:
      yield f"{prefix}{key}", type(value)


def test_every_config_has_exactly_its_familys_schema_fields():
  """Every training config holds every field of its family's schema with the schema's type,
  and no field outside it except its model's own arguments (a misspelt field fails)."""
  checked = set()
  for name, preset, config in _training_configs():
    expected = dict(_leaves(getattr(schema, config.task)()))
    found = dict(_leaves(config))
    missing = sorted(set(expected) - set(found))
    unknown = sorted(k for k in set(found) - set(expected) if not k.startswith("model."))
    retyped = sorted(k for k in set(expected) & set(found)
                     if expected[k] is not found[k] and not k.startswith("model."))
    assert not (missing or unknown or retyped), (name, preset, missing, unknown, retyped)
    checked.add(config.task)
  assert checked == set(schema.FAMILIES)


def test_no_config_starts_from_another_experiments_config():
  """Config files start from configs/schema.py (or a shared paper recipe), never from
  another config file's get_config()."""
  for path in CONFIG_DIR.rglob("*.py"):
    calls = re.findall(r"(\w+)\.get_config\(", path.read_text())
    assert not calls, (path, calls)
