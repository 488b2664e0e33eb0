"""Lipschitz constants of attention layers: upper bounds (Kim et al. Theorem 3.2; LipschitzNorm's
Corollaries 1–2) and empirical lower bounds by maximising the Jacobian norm (Kim et al. §5.1)."""

from lipgnn.lipschitz.estimate import (
    LowerBound,
    inf_norm,
    jacobian_matrix,
    maximise_jacobian_norm,
    spectral_norm,
)
from lipgnn.nn.lipschitz_bounds import (
    graph_layer_bound,
    l2_mha_bound,
    lipschitznorm_attention_bound,
    normalise_p,
    phi_inverse,
)

__all__ = [
    "LowerBound",
    "graph_layer_bound",
    "inf_norm",
    "jacobian_matrix",
    "l2_mha_bound",
    "lipschitznorm_attention_bound",
    "maximise_jacobian_norm",
    "normalise_p",
    "phi_inverse",
    "spectral_norm",
]
