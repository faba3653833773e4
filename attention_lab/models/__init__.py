"""Models built from attention_lab.layers, created by name through a registry."""

from attention_lab.models.registry import create, names, register

__all__ = ["create", "names", "register"]
