"""What the fused layers share: when an input must take the reference path, the head merge, and the
per-head parts of a layer that nonlocal message passing reads."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lipgnn.nn.fused.graph import CSRGraph

__all__ = ["CSRHeads", "fallback_reason", "finish_heads"]


class CSRHeads(NamedTuple):
    r"""A fused attention layer's per-head aggregation with the attention weights it used.

    ``heads[i, h] = Σ_j a_{ij,h} v_{j,h}`` (``[N_dst, H, C]``, before the head merge, the root term and
    the bias) for the CSR matrix :math:`P_h` with values ``alpha[:, h]`` on ``graph``; ``alpha``
    (``[E, H]``, in ``graph``'s edge order, differentiable) are the weights the reference layer returns
    with ``return_attention_weights=True`` (its edge order aside), ``value`` the projected values
    :math:`X V_h` (``[N_src, H, C]``).
    """

    heads: Tensor
    alpha: Tensor
    value: Tensor
    graph: CSRGraph


def finish_heads(out: Tensor, concat: bool) -> Tensor:
    """``[N, H, C]`` → ``[N, H·C]`` (concatenated heads) or ``[N, C]`` (their mean)."""
    return out.reshape(out.size(0), -1) if concat else out.mean(dim=1)


def fallback_reason(x: object, edge_index: object, size: object, return_attention_weights: object) -> str | None:
    """Why an input cannot take the CSR path (``None`` if it can); those calls use the reference path."""
    if not isinstance(x, Tensor):
        return "bipartite (x_src, x_dst) input"
    if isinstance(edge_index, CSRGraph):
        return None
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        return "sparse adjacency input"
    if size is not None:
        return "explicit size"
    if return_attention_weights is not None:
        return "return_attention_weights"
    return None
