"""Reading foreign weights (torchvision ResNets, our own classification checkpoints) into
our modules; no torch needed."""
