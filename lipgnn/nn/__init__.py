"""Attention layers with LipschitzNorm and the normalisation maths (paper §5, eq. 17 and 19).

``LipGATConv`` / ``LipTransformerConv`` / ``LipGATv2Conv`` extend PyG's message-passing layers
(:func:`lipschitz_norm` applies them to a layer already built); ``FusedLipGATConv`` /
``FusedLipTransformerConv`` (:mod:`lipgnn.nn.fused`) are the same layers on a CSR fast path, imported
on first use (they compile CPU loops with numba).
"""

from typing import Any

from lipgnn.nn.l2_attention import DotProductMultiheadAttention, L2MultiheadAttention
from lipgnn.nn.lip_gat_conv import LipGATConv
from lipgnn.nn.lip_gatv2_conv import LipGATv2Conv
from lipgnn.nn.lip_transformer_conv import LipTransformerConv
from lipgnn.nn.lipschitz import (
    EPS,
    REFERENCE_GAT_FACTOR,
    VARIANTS,
    check_variant,
    eq19_denominator,
    gat_lipschitz_denominator,
    gatv2_lipschitz_denominator,
    neighbour_max,
    query_sq_norm_per_head,
    safe_norm,
    safe_sqrt,
    sq_norm,
    transformer_lipschitz_denominator,
)
from lipgnn.nn.wrap import lipschitz_norm

_FUSED = ("FusedLipGATConv", "FusedLipTransformerConv")


def __getattr__(name: str) -> Any:
    if name in _FUSED:
        from lipgnn.nn import fused

        return getattr(fused, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EPS",
    "DotProductMultiheadAttention",
    "L2MultiheadAttention",
    "REFERENCE_GAT_FACTOR",
    "VARIANTS",
    "FusedLipGATConv",
    "FusedLipTransformerConv",
    "LipGATConv",
    "LipGATv2Conv",
    "LipTransformerConv",
    "check_variant",
    "eq19_denominator",
    "gat_lipschitz_denominator",
    "gatv2_lipschitz_denominator",
    "lipschitz_norm",
    "neighbour_max",
    "query_sq_norm_per_head",
    "safe_norm",
    "safe_sqrt",
    "sq_norm",
    "transformer_lipschitz_denominator",
]
