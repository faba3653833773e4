"""Flax NNX layers: parameters, projections and norms around attention_lab.ops."""

from attention_lab.layers.augmented_conv import AugmentedConv
from attention_lab.layers.conv import ConvBN
from attention_lab.layers.excite import GatherExcite, SqueezeExcite
from attention_lab.layers.global_attention import GlobalAttention
from attention_lab.layers.hamburger import Hamburger
from attention_lab.layers.mobile import MobileBlock
from attention_lab.layers.non_local import NonLocal
from attention_lab.layers.self_attention import SelfAttention, SpectralNorm

__all__ = ["AugmentedConv", "ConvBN", "GatherExcite", "GlobalAttention", "Hamburger",
           "MobileBlock", "NonLocal", "SelfAttention", "SpectralNorm",
           "SqueezeExcite"]
