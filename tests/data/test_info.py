"""DataInfo: the one table of facts of every dataset a config can name, checked against the
TFDS builders of the embedded datasets, read without TensorFlow, and the one line for a
name it lacks."""

import pathlib

import ml_collections
import numpy as np
import pytest

from attention_lab import cli
from attention_lab.data import availability, info, prepare, sources
from tests import no_tensorflow

REPO = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.mark.parametrize("name", ["digits", "digit_scenes", "restoration_photos",
                                  "synthetic_volumes/denoising", "synthetic_volumes/projection"])
def test_embedded_facts_are_the_builders(data_dir, name):
  prepare.prepare(prepare.dataset_config(name, data_dir))
  builder = availability.find_prepared(name, data_dir)
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


def test_digit_scenes_classes_agree_with_their_masks(data_dir):
  """10 object classes (detection) and 11 mask values (background + digits) in one entry."""
  facts = info.lookup("digit_scenes", "segmentation")
  assert facts.num_classes == 10 and len(facts.mask_classes) == 11
  assert facts.mask_classes[0] == "background" and info.lookup("digit_scenes", "detection")
  prepare.prepare(prepare.dataset_config("digit_scenes", data_dir))
  records = sources.Records(availability.find_prepared("digit_scenes", data_dir).data_dir, "test")
  values = set()
  for i in range(0, len(records), 25):
    values |= set(np.unique(records[i][facts.label_key]).tolist())
  assert values <= set(range(len(facts.mask_classes))) and max(values) == 10


def test_every_dataset_has_a_source_and_a_family():
  for name, facts in info.FACTS.items():
    assert availability.source(name).how in ("embedded", "download", "manual"), name
    assert facts.tasks and set(facts.tasks) <= set(info.FAMILIES), name
    assert facts.stats is None or len(facts.stats[0]) == facts.channels, name
  assert info.names("detection") == ["coco/2017", "digit_scenes"]


@pytest.mark.parametrize("name, task", [("no_such_dataset", None), ("cifar100", "gan"),
                                        ("digits", "segmentation")])
def test_an_unknown_dataset_is_one_line(name, task):
  config = ml_collections.ConfigDict({"task": task or "", "dataset": {"name": name}})
  with pytest.raises(cli.ConfigError) as raised:
    availability.require_prepared(config)
  reader = f" for the {task} task" if task else ""
  assert str(raised.value) == (f"dataset.name = {name!r}: must be one of "
                               f"{info.names(task)}{reader}")
  with pytest.raises(ValueError, match=f"^dataset.name = {name!r}: must be one of"):
    info.data_info(config)
