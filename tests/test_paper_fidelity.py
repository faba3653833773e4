"""The papers' recipes as a run derives them (schedules, step counts, crop alignment, the
networks the configs build) and their ablation knobs and table conventions, against the
papers' numbers."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags
from flax import nnx
from ml_collections import config_flags

from attention_lab.layers import augmented_conv
from attention_lab.train import state as state_lib
from attention_lab.train import tasks
from configs.hamburger import voc_hamnet
from configs.kanet import imagenet as kanet_imagenet
from configs.kanet import voc_deeplab
from configs.sanet import imagenet as sanet_imagenet
from experiments import aa_table9_counts, model_stats


def _task(config):
  """The task a run of `config` builds (schedule, step counts), on one device, no data."""
  config.mesh.num_devices = 1
  mesh = state_lib.make_mesh(config, jax.devices()[:1])
  return tasks.create(config, tasks.Environment(mesh, "", config.batch_size))


def test_kanet_imagenet_trains_on_the_kao_schedule():
  """KAO appendix: batch 512 on 8 TITAN Xp, lr 0.1 ×0.1 at epochs 80/105/120 of 150, on
  ILSVRC-2012's 1,281,167 training images. The steps come from the batch that KANet sets
  over SANet's recipe (640), so they are checked as the run computes them."""
  config = kanet_imagenet.get_config()
  assert config.bn_group_size * 8 == config.batch_size == 512  # BatchNorm per GPU
  task = _task(config)
  epoch = 1_281_167 // 512
  assert (task.steps_per_epoch, task.total_steps) == (epoch, 150 * epoch)
  for e, lr in ((0, 0.1), (80, 0.01), (105, 1e-3), (120, 1e-4)):
    assert float(task.schedule(e * epoch)) == pytest.approx(lr, rel=1e-6)
    if e:
      assert float(task.schedule(e * epoch - 1)) == pytest.approx(lr * 10, rel=1e-6)
  network = task.model(jax.eval_shape(task.init_state))  # the network the run trains
  kernels = model_stats.count_params(network)[1]
  assert kernels == pytest.approx(3.44e6, rel=0.01)  # KAO Table 2, KANet_KV (in millions)
  for size in ("cpu", "tiny"):  # the small presets keep SANet's sizes
    small = kanet_imagenet.get_config(size)
    assert small.batch_size == sanet_imagenet.get_config(size).batch_size < 512


def test_voc_deeplab_recipe_is_kao_section_5():
  """KAO Sec. 4.5 (DeepLabV2's recipe): batch 8 on train_aug (10,582 images), 25k
  iterations, poly 0.9 from 2.5e-4, single-scale test on whole images. DeepLab's crops
  are 8k+1 so that at output stride 8 the feature grid's corners are the image's."""
  config = voc_deeplab.get_config()
  config.model.depth = 14  # a small backbone (the schedule does not depend on it) builds fast
  task = _task(config)
  assert (task.steps_per_epoch, task.total_steps) == (10_582 // 8, 25_000)
  for step in (0, 12_500, 25_000):
    assert float(task.schedule(step)) == pytest.approx(
        2.5e-4 * (1 - step / 25_000) ** 0.9, rel=1e-5, abs=1e-12)
  stride = config.model.output_stride
  assert config.dataset.crop_size % stride == config.dataset.eval_size % stride == 1
  assert config.dataset.eval_size >= 500  # VOC 2012's largest side: never downscaled
  assert task.eval_scales == (1.0,) and not task.eval_flip  # what its evaluation runs


def test_coordconv_concatenates_x_y_r():
  coords = np.asarray(augmented_conv.coordinate_channels(2, 3, 5, jnp.float32))
  assert coords.shape == (2, 3, 5, 3)
  # Naive reference: row i of H, column j of W, linear in [-1, 1]; r the distance to the centre.
  for i in range(3):
    for j in range(5):
      y, x = -1 + 2 * i / 2, -1 + 2 * j / 4
      np.testing.assert_allclose(coords[1, i, j], [y, x, math.hypot(x, y)], atol=1e-6)
  layer = augmented_conv.AugmentedConv(8, 16, kappa=0.5, upsilon=0.5, heads=2,
                                       positional="coordconv", rngs=nnx.Rngs(0))
  assert layer.qkv.in_features == 8 + 3
  out = layer(jnp.ones((1, 4, 6, 8)))
  assert out.shape == (1, 4, 6, 16)


def _parse(argv):
  """The config the command line gives, parsed by config_flags as attention_lab.main does."""
  argv = ["prog", *argv]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, sys_argv=argv)
  values(argv)
  return values.config


def _model_options(config):
  """The model's constructor options of a config (padding "auto" is the task's to resolve:
  "same" without torch weights)."""
  options = config.model.to_dict()
  options.pop("name")
  options["padding"] = "same"
  return options


def test_ham_knobs_are_reachable_by_overrides():
  config = _parse(["--config=configs/hamburger/voc_hamnet.py:tiny", "--config.model.ham=cd",
                   "--config.model.ham_options.dim=256", "--config.model.rank=8",
                   "--config.model.ham_options.temperature=0.1"])
  assert config.model.ham_options.dim == 256 and config.model.ham_options.temperature == 0.1
  model = model_stats.build_abstract("hamnet", 5, **_model_options(config))
  width = config.model.width
  assert model.hamburger.lower.out_features == int(256 * width)  # d, scaled like C
  assert model.hamburger.lower.in_features == int(512 * width)  # C unchanged
  assert model.hamburger.temperature == 0.1 and model.hamburger.rank == 8
  default = model_stats.build_abstract("hamnet", 5,
                                       **_model_options(voc_hamnet.get_config("tiny")))
  lower = default.hamburger.lower  # the paper's d = C at any width
  assert lower.out_features == lower.in_features == int(512 * width)


def test_ham_default_dim_keeps_the_published_head():
  tiny = _model_options(voc_hamnet.get_config("tiny"))
  without_dim = dict(tiny, ham_options={k: v for k, v in tiny["ham_options"].items()
                                        if k != "dim"})
  counts = [model_stats.count_params(model_stats.build_abstract("hamnet", 5, **m))
            for m in (tiny, without_dim)]
  assert counts[0] == counts[1]


def test_kanet_no_kao_is_kanet_with_base_modules():
  # KAO Sec. 4.4: KANet_KV with every AttnSkipModule replaced by a BaseModule; the six
  # BaseSkipModules stay, each c² below MobileNetV2's inverted residual.
  _, ours = model_stats.count_params(model_stats.build_abstract("kanet_no_kao"))
  _, mobilenet = model_stats.count_params(model_stats.build_abstract("mobilenet_v2"))
  assert mobilenet - ours == 16 ** 2 + 24 ** 2 + 24 ** 2 + 32 ** 2 + 32 ** 2 + 96 ** 2
  assert round(ours / 1e6, 2) == 3.46 and round(mobilenet / 1e6, 2) == 3.47  # KAO Table 4


def test_aa_table9_parameter_column_is_the_two_1x1_convs_with_160_keys():
  paper = (43e3, 90e3, 190e3)
  for (_, _, channels, _, side), expected in zip(aa_table9_counts.STAGES, paper):
    dk, dv = aa_table9_counts.depths(channels, 20)
    assert dk == 160
    terms = aa_table9_counts.param_terms(channels, dk, dv, side)
    count = terms["qkv kernel"] + terms["output kernel"]
    assert abs(count - expected) / expected < 0.016
    # Without the 20-per-head minimum (how the memory table built its layer) it is far off.
    dk0, dv0 = aa_table9_counts.depths(channels, 0)
    small = aa_table9_counts.param_terms(channels, dk0, dv0, side)
    assert (small["qkv kernel"] + small["output kernel"]) / expected < 0.75


def test_aa_table9_terms_match_the_traced_layer():
  params, branch_madd, _ = aa_table9_counts.measured(16, 8, 4, 2)
  dk, dv = aa_table9_counts.depths(16, 2)
  terms = aa_table9_counts.param_terms(16, dk, dv, 4)
  assert params == terms["qkv kernel"] + terms["output kernel"] + terms["relative tables"]
  assert branch_madd == sum(aa_table9_counts.madd_terms(16, dk, dv, 4, 8).values())


def test_plots_write_pngs(tmp_path):
  from experiments import plots  # pylint: disable=g-import-not-at-top
  path = plots.grouped_bars(tmp_path / "a.png", "t", ["x", "y"],
                            [("v", {"paper": [1.0, None], "ours": [2.0, 3.0]})])
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  path = plots.delta_bars(tmp_path / "b.png", "t", ["x", "y"], [("Δ", [1.0, None])])
  assert path.stat().st_size > 1000


@pytest.mark.parametrize("temperature", [1.0, 0.01])
def test_ham_table9_solver_stats_follow_the_temperature(temperature):
  from experiments import ham_table9  # pylint: disable=g-import-not-at-top
  x = ham_table9.tokens(jax.random.key(0), n=64, dim=32, clusters=8)
  stats = ham_table9.solver_stats(x, temperature, seeds=1)
  assert 0 <= stats["code_entropy"] <= math.log(ham_table9.RANK) + 1e-5
  if temperature == 1.0:  # cosines in [-1, 1] over T = 1: nearly uniform codes
    assert stats["code_entropy"] > 0.95 * math.log(ham_table9.RANK)
  else:
    assert stats["code_entropy"] < 0.8 * math.log(ham_table9.RANK)
