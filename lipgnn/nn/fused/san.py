r"""The SAN block's attention as a single fused operation (``model=san``, ``model.impl=fused``).

Guan & He's SAN layer (§3.1, Table 1) on Cora is small (2708 nodes, hidden 32, 4 heads of width 8)
but 256 layers deep, so its step time is set by the number of operations per layer rather than by
their arithmetic. :func:`san_attention` replaces the chain of operations the generic fused
:class:`~lipgnn.nn.fused.FusedLipTransformerConv` runs (three projections, an SDDMM and an SpMM per
head, the softmax's gathers and scatters, each again backward): from the one ``[N, 3·H·d]``
projection ``X [W_Q; W_K; W_V]ᵀ`` (:func:`qkv_projection`, one GEMM instead of three), per head

.. math::
    a_{ij,h} = \mathrm{softmax}_{j \in \mathcal{N}(i) \cup \{i\}}\Big(\frac{q_{i,h} \cdot k_{j,h}}{\sqrt{d}}\Big),
    \qquad o_{i,h} = \sum_j a_{ij,h}\, v_{j,h},

i.e. :math:`P_h X V_h`, and with ``x`` the nonlocal energy :math:`\|P_h X - X\|_F^2` of §4.1,
formed in the same visit of each CSR row (no ``[H, N, D]`` product :math:`P_h X` is kept).

On CPU it runs the compiled loops of :mod:`lipgnn.nn.fused.san_kernels` with a hand-written backward
pass; on CUDA, without numba or with ``LIPGNN_KERNELS=eager`` it runs its eager twin (the generic
fused layer's SDDMM / softmax / SpMM / residual energy). Both paths equal the PyG SAN within float
rounding (``tests/test_san_fused.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.nn.fused import kernels, san_kernels
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.sparse import csr_residual_energy, csr_sddmm, csr_softmax, csr_spmm

__all__ = ["qkv_projection", "san_attention"]


class _SANAttention(torch.autograd.Function):
    """``(out [N, H·d], energy [H])`` of :func:`san_attention` with the compiled loops; the backward
    recomputes the energy's residuals from the saved attention weights."""

    @staticmethod
    def forward(ctx, qkv: Tensor, x: Tensor | None, graph: CSRGraph, heads: int,  # type: ignore[override]
                width: int) -> tuple[Tensor, Tensor]:
        scale = 1.0 / math.sqrt(width)
        out, alpha, energy = san_kernels.san_attention(qkv, graph.rowptr, graph.col, heads, width, scale, x)
        ctx.graph, ctx.heads, ctx.width, ctx.scale = graph, heads, width, scale
        ctx.save_for_backward(qkv, alpha, out, x)
        if x is None:
            ctx.mark_non_differentiable(energy)
        return out, energy

    @staticmethod
    def backward(ctx, grad_out: Tensor | None,  # type: ignore[override]
                 grad_energy: Tensor | None) -> tuple[Tensor, Tensor | None, None, None, None]:
        qkv, alpha, out, x = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        if grad_out is None:
            grad_out = qkv.new_zeros(graph.num_dst, ctx.heads * ctx.width)
        use_x = x is not None and grad_energy is not None and ctx.needs_input_grad[1]
        grad_qkv, grad_x = san_kernels.san_attention_backward(
            grad_out, qkv, alpha, out, graph.rowptr, graph.col, ctx.heads, ctx.width, ctx.scale,
            x if use_x else None, grad_energy if use_x else None)
        return grad_qkv, grad_x, None, None, None


def _san_attention_eager(qkv: Tensor, x: Tensor | None, graph: CSRGraph, heads: int,
                         width: int) -> tuple[Tensor, Tensor | None]:
    """Eager twin of :class:`_SANAttention` (any device): the generic fused layer's operations."""
    n = qkv.size(0)
    q, k, v = qkv.view(n, 3, heads, width).unbind(1)
    weights = csr_softmax(csr_sddmm(q, k, graph) / math.sqrt(width), graph)
    out = csr_spmm(weights, v, graph).reshape(n, heads * width)
    energy = csr_residual_energy(weights, x, graph) if x is not None else None
    return out, energy


def san_attention(qkv: Tensor, graph: CSRGraph, heads: int, width: int,
                  x: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    r"""SAN's multi-head dot-product attention on ``graph`` (module docstring).

    Args:
        qkv: ``[N, 3·H·d]``, queries, keys and values side by side (each ``[N, H, d]`` heads-major,
            as ``TransformerConv``'s ``lin_query/key/value(x).view(-1, H, d)``).
        graph: the CSR graph (self-loops included by the caller; a square graph).
        heads, width: :math:`H` and :math:`d` (the scores are divided by :math:`\sqrt{d}`).
        x: ``[N, D]``: also return :math:`\|P_h X - X\|_F^2` per head (nonlocal message passing).
    Returns:
        ``(out, energy)``: ``out`` ``[N, H·d]`` the concatenated :math:`P_h X V_h`, ``energy`` ``[H]``
        (``None`` without ``x``).
    """
    if graph.num_src != graph.num_dst or qkv.size(0) != graph.num_src:
        raise ValueError(f"san_attention needs a square graph over the {qkv.size(0)} rows of qkv")
    if qkv.size(1) != 3 * heads * width:
        raise ValueError(f"qkv has {qkv.size(1)} columns, expected 3·heads·width = {3 * heads * width}")
    if graph.num_edges == 0:  # every P_h is 0: no aggregation, and ‖P_h X - X‖² = ‖X‖²
        out = qkv.new_zeros(qkv.size(0), heads * width)
        return out, (None if x is None else x.pow(2).sum().expand(heads))
    tensors = [qkv] if x is None else [qkv, x]
    if not kernels.available(*tensors):
        return _san_attention_eager(qkv, x, graph, heads, width)
    out, energy = _SANAttention.apply(qkv.contiguous(), None if x is None else x.contiguous(), graph, heads, width)
    return out, (energy if x is not None else None)


def qkv_projection(x: Tensor, query: nn.Module, key: nn.Module, value: nn.Module) -> Tensor:
    """``[Q x | K x | V x]`` (``[N, 3·H·d]``) as one GEMM with the three layers' weights stacked
    (each a PyG or torch ``Linear``; their biases, if any, stacked alike)."""
    layers = (query, key, value)
    weight = torch.cat([layer.weight for layer in layers])
    if all(layer.bias is None for layer in layers):
        return F.linear(x, weight)
    bias = torch.cat([layer.bias if layer.bias is not None else weight.new_zeros(layer.weight.size(0))
                      for layer in layers])
    return F.linear(x, weight, bias)
