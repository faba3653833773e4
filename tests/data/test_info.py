"""DataInfo: the published facts of every dataset a config can name, checked against the
TFDS builders of the embedded datasets, and read without TensorFlow."""

import pathlib

import pytest

from attention_lab.data import info, pipeline
from tests import no_tensorflow

REPO = pathlib.Path(__file__).parents[2]


@pytest.mark.parametrize("name", ["digits", "digit_scenes", "restoration_photos",
                                  "synthetic_volumes/denoising", "synthetic_volumes/projection"])
def test_embedded_facts_are_the_builders(tmp_path, name):
  builder = pipeline.get_builder(name, str(tmp_path))
  facts = info.FACTS[name]
  assert facts.splits == {k: v.num_examples for k, v in builder.info.splits.items()}
  features = builder.info.features
  if "label" in features:
    assert facts.num_classes == features["label"].num_classes
  if "objects" in features:
    assert facts.num_classes == features["objects"]["label"].num_classes
  if "input" in features:
    assert (facts.input_rank, facts.target_rank, facts.channels) == (
        len(features["input"].shape) - 1, len(features["target"].shape) - 1,
        features["input"].shape[-1])
  else:
    assert facts.channels == features["image"].shape[-1]


def test_split_sizes_and_errors():
  imagenet = info.FACTS["imagenet2012"]
  assert imagenet.num_examples("train") == 1_281_167
  assert info.FACTS["voc_segmentation"].num_examples("train+val") == 1_464 + 1_449
  with pytest.raises(ValueError, match=r"dataset.train_split = 'val': imagenet2012 has"):
    imagenet.num_examples("val")
  with pytest.raises(ValueError, match="depends on its files; set num_train_steps"):
    info.FACTS["care/planaria"].num_examples("test_condition_1", "dataset.eval_split")


def test_a_task_exists_without_tensorflow():
  """The ImageNet SANet task (data not prepared) built where TensorFlow is missing."""
  code = ("import sys; from attention_lab.train import state, tasks; "
          "from configs.sanet import imagenet; c = imagenet.get_config(); "
          "task = tasks.create(c, tasks.Environment(state.make_mesh(c), '', c.batch_size)); "
          "assert task.num_classes == 1000 and task.total_steps > 0; "
          "assert not [m for m in sys.modules if m.startswith('tensorflow')]")
  result = no_tensorflow.run(["-c", code], cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
