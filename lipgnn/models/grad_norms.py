r"""Per-layer gradient norms of the attention parameters (the quantity of the paper's Fig. 2).

For attention layer :math:`l` with attention parameters :math:`\theta_l`,

.. math::
    g_l = \Big(\sum_{p \in \theta_l} \|\nabla_p \mathcal{L}\|_2^2\Big)^{1/2}

with :math:`\theta_l = \{a_{src}, a_{dst}[, a_{edge}]\}` for GAT (the vector :math:`a` of the score
:math:`e_{ij} = a^\top[Wx_i \| Wx_j]`, eq. (17)'s linear score) and
:math:`\theta_l = \{W_Q, b_Q, W_K, b_K\}` for GT (the queries and keys of eq. (7)/(19)).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def attention_parameters(layer: nn.Module) -> list[Tensor]:
    r"""The parameters that produce the attention scores of ``layer`` (GAT-like, GATv2-like (its vector
    :math:`\mathbf{a}`) or Transformer-like).

    Recognised by attribute name, so any layer keeping PyG's parameter names (e.g. a fused
    implementation with the same state dict) works.
    """
    if hasattr(layer, "att_src"):
        candidates = [layer.att_src, getattr(layer, "att_dst", None), getattr(layer, "att_edge", None)]
    elif isinstance(getattr(layer, "att", None), Tensor):  # GATv2: a^T LeakyReLU(W_r x_i + W_l x_j)
        candidates = [layer.att]
    elif hasattr(layer, "lin_query") and hasattr(layer, "lin_key"):
        candidates = [layer.lin_query.weight, layer.lin_query.bias, layer.lin_key.weight, layer.lin_key.bias]
    else:
        raise TypeError(f"{type(layer).__name__} has no attention parameters (att_src, att or lin_query/lin_key)")
    return [p for p in candidates if isinstance(p, Tensor)]


def attention_grad_norms(model: nn.Module) -> list[float]:
    """One float per ``model.attention_layers()`` entry: the L2 norm of its attention gradients.

    Parameters without a gradient count as zero. Computed in float64 so that exploding gradients
    (Fig. 2 reaches 1e8) are reported rather than overflowing when squared.
    """
    norms: list[float] = []
    for layer in model.attention_layers():
        grads = [p.grad.detach().double() for p in attention_parameters(layer) if p.grad is not None]
        if not grads:
            norms.append(0.0)
            continue
        per_tensor = torch.stack([torch.linalg.vector_norm(g) for g in grads])
        norms.append(float(torch.linalg.vector_norm(per_tensor)))
    return norms
