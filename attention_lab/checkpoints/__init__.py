"""Reading foreign weights without torch: PyTorch checkpoints (torch_reader), torchvision
and deep-stem ResNets mapped to ours (torch_resnet), backbone initialisation
(backbone_weights)."""

from attention_lab.checkpoints.torch_reader import UnsupportedCheckpointError
from attention_lab.checkpoints.torch_reader import load_torch_checkpoint
from attention_lab.checkpoints.torch_reader import load_torch_state_dict
