"""Reading foreign weights (PyTorch checkpoints) without torch."""

from attention_lab.checkpoints.torch_reader import UnsupportedCheckpointError
from attention_lab.checkpoints.torch_reader import load_torch_checkpoint
from attention_lab.checkpoints.torch_reader import load_torch_state_dict
