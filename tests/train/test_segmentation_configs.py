"""Every segmentation paper config: its `:cpu` preset trains two steps; its recipe fields."""

import pytest

from attention_lab.train.trainer import Trainer
from configs.hamburger import ade20k_hamnet, pcontext_hamnet, voc_hamnet
from configs.kanet import voc_deeplab
from configs.segmentation import default, digits_backbone

CONFIGS = {"default": default, "voc_deeplab": voc_deeplab, "voc_hamnet": voc_hamnet,
           "ade20k_hamnet": ade20k_hamnet, "pcontext_hamnet": pcontext_hamnet}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cpu_preset_trains_two_steps(tmp_path, name):
  config = CONFIGS[name].get_config("cpu")
  if config.init_from:  # pretraining first (~40 s) is tested in test_segmentation.py
    assert config.init_from == "configs/segmentation/digits_backbone.py:cpu"
    config.init_from = ""
  trainer = Trainer(config, str(tmp_path / "workdir"))
  trainer.run(until_step=2)
  assert int(trainer.state["step"]) == 2


def test_paper_recipes():
  deeplab = voc_deeplab.get_config()
  assert deeplab.model.rates == (6, 12, 18, 24) and deeplab.optimizer.head_lr_multiplier == 10
  assert (deeplab.dataset.crop_size, deeplab.dataset.eval_size, deeplab.batch_size) == (321, 513,
                                                                                         8)
  assert deeplab.dataset.train_split == "train_aug" and deeplab.num_train_steps == 25_000
  assert deeplab.model.classifier_kernel == 1  # KAO Table 5: the attention is the output layer
  ham = voc_hamnet.get_config()
  assert (ham.model.stem, ham.model.multi_grid, ham.model.rank) == ("deep", (1, 2, 4), 64)
  assert ham.optimizer.learning_rate == 9e-3 and ham.optimizer.decay_params == "conv_kernels"
  assert (ham.model.align_channels, ham.model.dropout) == (256, 0.1)  # not the CPU default's
  assert "dropout" not in deeplab.model and "align_channels" not in deeplab.model
  # The digits backbone is the CPU experiment's "ImageNet"; paper configs name their own .pth.
  assert default.get_config().init_from == "configs/segmentation/digits_backbone.py"
  assert deeplab.init_from == ham.init_from == voc_hamnet.get_config("cpu").init_from == ""
  ablation = voc_hamnet.get_config("ablation")
  assert (ablation.model.depth, ablation.model.output_stride, ablation.batch_size) == (50, 16, 12)
  ade = ade20k_hamnet.get_config()
  assert ade.aux_loss_weight == 0.4 and ade.num_train_steps == 160_000
  with pytest.raises(ValueError, match="preset"):
    voc_hamnet.get_config("gpu")
  # Ham Table 4's test-server protocol: trainval fine-tune at a tenth of the rate, 20k steps.
  trainval = voc_hamnet.get_config("trainval")
  assert trainval.dataset.train_split == "train+val" and trainval.num_train_steps == 20_000
  assert trainval.optimizer.learning_rate == 9e-4 and trainval.eval.flip
  assert trainval.eval.scales == (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
  # Ham Table 5 (App. E.3): lr 0.002, weight decay 1e-4, batch 16, 25k, crop 513.
  context = pcontext_hamnet.get_config()
  assert (context.dataset.name, context.dataset.train_split, context.dataset.eval_split) == (
      "pascal_context", "train", "val")
  assert (context.optimizer.learning_rate, context.optimizer.weight_decay) == (2e-3, 1e-4)
  assert (context.batch_size, context.num_train_steps, context.dataset.crop_size) == (16, 25_000,
                                                                                      513)
  assert context.model.to_dict() == ham.model.to_dict()


@pytest.mark.parametrize("preset", [None, "tiny"])
def test_digits_backbone_is_the_default_segmenters_backbone(preset):
  """The pretrained weights load into the segmenter: same depth, width and stem."""
  backbone, segmenter = digits_backbone.get_config(preset).model, default.get_config(preset).model
  assert (backbone.depth, backbone.width, backbone.stem) == (
      segmenter.depth, segmenter.width, segmenter.stem)
