"""What the fused layers share: when an input must take the reference path, and the head merge."""

from __future__ import annotations

import torch
from torch import Tensor

from lipgnn.nn.fused.graph import CSRGraph

__all__ = ["fallback_reason", "finish_heads"]


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
