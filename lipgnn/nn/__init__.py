"""Attention layers with LipschitzNorm and the normalisation maths (paper §5, eq. 17 and 19)."""

from lipgnn.nn.l2_attention import DotProductMultiheadAttention, L2MultiheadAttention
from lipgnn.nn.lip_gat_conv import LipGATConv
from lipgnn.nn.lip_transformer_conv import LipTransformerConv
from lipgnn.nn.lipschitz import (
    EPS,
    REFERENCE_GAT_FACTOR,
    VARIANTS,
    check_variant,
    gat_lipschitz_denominator,
    neighbour_max,
    safe_norm,
    safe_sqrt,
    sq_norm,
    transformer_lipschitz_denominator,
)

__all__ = [
    "EPS",
    "DotProductMultiheadAttention",
    "L2MultiheadAttention",
    "REFERENCE_GAT_FACTOR",
    "VARIANTS",
    "LipGATConv",
    "LipTransformerConv",
    "check_variant",
    "gat_lipschitz_denominator",
    "neighbour_max",
    "safe_norm",
    "safe_sqrt",
    "sq_norm",
    "transformer_lipschitz_denominator",
]
