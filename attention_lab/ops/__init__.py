"""Pure-JAX global-context operators (arrays in, arrays out; no Flax).

The names exported here are a contract: layers, models, experiments and tests
call them. See each function's docstring for the paper, equation, shapes and
complexity.
"""

from attention_lab.ops.attention import dot_product_attention, pool_keys_values
from attention_lab.ops.decomposition import (
    fixed_point_iterate,
    nmf,
    random_bases,
    soft_cd,
    soft_vq,
)
from attention_lab.ops.kronecker import (
    kronecker_attention_kv,
    kronecker_attention_qkv,
    kronecker_summary,
)
from attention_lab.ops.relative import rel_to_abs, relative_attention_2d, relative_logits_2d
from attention_lab.ops.siamese import siamese_attention

__all__ = [
    "dot_product_attention",
    "fixed_point_iterate",
    "kronecker_attention_kv",
    "kronecker_attention_qkv",
    "kronecker_summary",
    "nmf",
    "pool_keys_values",
    "random_bases",
    "rel_to_abs",
    "relative_attention_2d",
    "relative_logits_2d",
    "siamese_attention",
    "soft_cd",
    "soft_vq",
]
