"""Weights a run starts from, on gs://: `init_from` as our orbax checkpoint (a workdir in a
bucket) and as a torch.save file (the torchvision ResNets, pytorch-fid's Inception weights:
`eval.inception_path`), read through the path layer."""

import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from etils import epath

from attention_lab import models
from attention_lab.checkpoints import backbone_weights, torch_reader
from attention_lab.train import state as state_lib
from attention_lab.train.tasks import base
from tests.checkpoints import test_torch_reader as torch_files


def test_init_from_a_workdir_in_a_bucket(gcs_in_process, tmp_path):
  bucket = gcs_in_process
  net = base.TrainableModel(lambda rngs: models.create(
      "resnet50", num_classes=10, depth=18, width=0.125, rngs=rngs), optax.sgd(0.1), 3)
  source = {"step": jnp.zeros((), jnp.int32), **net.init()}
  workdir = bucket.url("weights/classifier")
  with ocp.CheckpointManager(epath.Path(workdir) / "checkpoints") as manager:
    manager.save(5, args=ocp.args.StandardSave(state_lib.as_saved(source)))
  assert any(name.startswith("weights/classifier/checkpoints/5/") for name in bucket.names())
  read = backbone_weights.read(workdir)  # the workdir, its newest step, its item folder
  ours = backbone_weights.flatten({"params": source["params"], "non_params": source["non_params"]})
  backbone = [k for k in ours if k[1] == "backbone"]
  assert len(backbone) > 10
  for key in backbone:
    np.testing.assert_array_equal(read[key], ours[key])
  assert not backbone_weights.is_torch_checkpoint(workdir)


def test_a_torch_file_in_a_bucket(gcs_in_process, tmp_path):
  cases = torch_files._cases()  # pylint: disable=protected-access
  local = tmp_path / "weights.pth"
  torch_files.write_zip(local, torch_files._state(cases))  # pylint: disable=protected-access
  remote = epath.Path(gcs_in_process.url("weights/resnet.pth"))
  remote.write_bytes(local.read_bytes())
  torch_files._check(torch_reader.load_torch_state_dict(str(remote)), cases)  # pylint: disable=protected-access
  assert backbone_weights.is_torch_checkpoint(str(remote))
