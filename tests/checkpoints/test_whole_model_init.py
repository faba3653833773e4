"""init_scope="model": a fine-tune starts from a whole trained model of the same config (Ham
Table 4's trainval protocol, configs/hamburger/voc_hamnet.py:trainval), head included."""

import jax
import numpy as np
import pytest

from attention_lab.checkpoints import backbone_weights
from attention_lab.train import trainer as trainer_lib
from configs.hamburger import voc_hamnet


def _flat(state, part):
  """The floating-point variables (what init_from copies; not the rng keys) as numpy."""
  return {k: np.asarray(v) for k, v in backbone_weights.flatten(state[part]).items()
          if jax.numpy.issubdtype(v.dtype, jax.numpy.floating)}


def test_trainval_preset_fine_tunes_the_whole_model():
  config = voc_hamnet.get_config("trainval")
  assert config.init_scope == "model" and config.model.padding == "torch"


def test_model_scope_copies_head_and_backbone_and_backbone_scope_only_the_backbone(tmp_path):
  source_config = voc_hamnet.get_config("tiny")
  source = trainer_lib.Trainer(source_config, str(tmp_path / "source"))
  source.save(force=True)
  source.checkpoints.wait_until_finished()
  expected = {part: _flat(source.state, part) for part in ("params", "non_params")}
  assert any(k[0] != "backbone" for k in expected["params"])  # a head to copy
  for scope in ("model", "backbone"):
    config = voc_hamnet.get_config("tiny")
    config.seed = 1  # other initial values, so a copy is seen
    config.init_from, config.init_scope = str(tmp_path / "source"), scope
    state = trainer_lib.Trainer(config, str(tmp_path / scope)).state
    for part in ("params", "non_params"):
      got = _flat(state, part)
      assert got.keys() == expected[part].keys()
      for key, value in got.items():
        copied = scope == "model" or key[0] == "backbone"
        if copied:
          np.testing.assert_array_equal(value, expected[part][key], err_msg=str(key))
        elif key[-1] == "kernel":  # random at init: the fresh head's own
          assert not np.array_equal(value, expected[part][key]), key


def test_model_scope_needs_a_run_and_a_known_scope(tmp_path):
  torch_file = tmp_path / "resnet.pth"
  torch_file.write_bytes(b"not read")
  with pytest.raises(ValueError, match="is a torch file .* init_scope 'model' needs a workdir"):
    backbone_weights.read(str(torch_file), scope="model")
  with pytest.raises(ValueError, match=r"init_scope must be one of \('backbone', 'model'\)"):
    backbone_weights.read(str(torch_file), scope="head")
