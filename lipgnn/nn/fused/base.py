"""What the fused layers share: when an input must take the reference path, the head merge, and the
per-head parts of a layer that nonlocal message passing reads."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lipgnn.nn.fused.graph import CSRGraph

__all__ = ["CSRHeads", "fallback_reason", "finish_heads", "plain_csr_input", "reference_forward"]


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


def plain_csr_input(x: object, edge_index: object, edge_weight: object) -> bool:
    """Whether a plain (non-attention) fused layer's CSR path takes this input: one 2-D floating ``x``, no edge
    weights, and an ``edge_index`` tensor or a prebuilt :class:`CSRGraph`."""
    if edge_weight is not None or not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        return False
    return isinstance(edge_index, CSRGraph) or (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided)


def reference_forward(forward, x: Tensor, edge_index: object, extra: object, name: str) -> Tensor:
    """The PyG parent's ``forward(x, edge_index, extra)`` (``extra``: its third argument, edge weights or
    ``size``) for an input the CSR path does not take (a :class:`CSRGraph` has no other path: an error naming
    the layer ``name``)."""
    if isinstance(edge_index, CSRGraph):
        raise ValueError(f"a CSRGraph edge_index needs {name}'s defaults and no edge weights")
    return forward(x, edge_index, extra)
