"""Models built from attention_lab.layers, created by name through a registry."""

from attention_lab.models.registry import create, names, register

__all__ = ["create", "names", "register"]

# Importing a model module registers its names.
from attention_lab.models import (  # noqa: E402,F401
    attention_cnn, mnasnet, mobilenet, resnet, retinanet, sagan, segmentation, unet, wide_resnet)
