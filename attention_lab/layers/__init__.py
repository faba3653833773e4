"""Flax NNX layers: parameters, projections and norms around attention_lab.ops."""

from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.layers.hamburger import Hamburger

__all__ = ["GlobalAttention", "Hamburger"]
