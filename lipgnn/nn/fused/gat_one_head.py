r"""A one-head GAT or GAT-Lip layer on a graph of a few thousand edges or more as one autograd operation: compiled
loops for the attention and the aggregation, MKL's GEMMs for the projection.

The layer is :mod:`lipgnn.nn.fused.gat_small`'s (GAT, Veličković et al. 2018, eqs. (3)–(4); LipschitzNorm's eq. (17),
``variant="paper"``, for GAT-Lip), with one head of :math:`C` channels, :math:`z = xW^\top`:

.. math::
    u_{ij} = \mathrm{LeakyReLU}\big(k_i\,(s_j + t_i)\big),\quad s_j = a_{\mathrm{src}}\cdot z_j,\ t_i =
    a_{\mathrm{dst}}\cdot z_i,\qquad
    \alpha_{ij} = \frac{\exp(u_{ij} - m_i)}{\sum_{k} \exp(u_{ik} - m_i) + 10^{-16}},\qquad
    o_i = b + \sum_j \alpha_{ij}\, z_j,

with :math:`k_i = 1` for GAT and :math:`k_i = \alpha / c_i`,
:math:`c_i = \|a\|\sqrt{\|z_i\|^2 + \max_j \|z_j\|^2 + \epsilon^2} + \epsilon` for GAT-Lip, :math:`m_i` the row
maximum. Backward, :math:`g_i = \partial L/\partial o_i`: :math:`\partial z = A^\top g` and
:math:`\delta_{ij} = g_i \cdot z_j` in one visit of each edge, :math:`\partial u_{ij} = \alpha_{ij}(\delta_{ij} - \sum_k
\alpha_{ik}\delta_{ik})`, then through LeakyReLU, :math:`k_i`, :math:`\|z\|^2` and the score terms to :math:`z` and
the attention vectors (:mod:`lipgnn.nn.fused.gat_small` states each term), last :math:`\partial x = \partial z\,W`,
:math:`\partial W = \partial z^\top x`.

Why by hand: with one head every per-edge quantity is a scalar, and the general CSR path
(:class:`lipgnn.nn.fused.FusedLipGATConv`: node terms, neighbour maxima, eq. (17)'s factor, scores, LeakyReLU,
softmax, each its own autograd node over ``[E, 1]`` or ``[N, 1]`` tensors) and ``gat_small``'s head-generic loops
keep those scalars in ``[., H]`` arrays, so each edge pays a store and a reload per quantity. Here they stay in
registers: on PubMed (19,717 nodes, 108,365 edges with self-loops, 64 channels, locality order) the forward's
score loop took 1.8 against 3.1 ms for ``gat_small``'s and the score backward 1.6 against 2.8 ms (one thread,
medians of 20). Each row is also visited once where the general path makes separate passes: forward, the row's
softmax sum, its normalisation, the drop factors, the aggregation and the bias (and ELU) in one loop (1.08 against
1.37 ms for the normalisation loop, MKL's CSR product and the bias add); backward, one visit of each edge reads
:math:`g_i` and :math:`z_j` once for both :math:`\delta_{ij}` and the scatter :math:`\partial z_j \mathrel{+}=
w_{ij} g_i` (3.7 against 4.4 ms for the score backward plus MKL's product with the transposed CSR, which needs
the weights gathered into its order), and the bias gradient's column sums come from the same rows. Whole layers,
forward + backward: ``docs/performance.md``, "One-head GAT and GAT-Lip layers on large graphs".
``gat_small`` takes the small graphs, where per-operation overhead dominates instead.

Attention dropout multiplies each weight by :math:`m_{ij}/(1-p)`, drawn as the general path draws it (same
generator call, same decisions; :func:`one_head_gat`). The general path is this operation's eager twin (CUDA,
``LIPGNN_KERNELS=eager``); tests compare both with PyG's ``GATConv`` and :class:`lipgnn.nn.LipGATConv`
(``tests/test_fused_gat_one_head.py``). The compiled loops are :mod:`lipgnn.nn.fused.gat_kernels`' ``one_head_*``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lipgnn.nn.fused import elementwise_kernels, gat_kernels, gat_small, kernels
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.kernels import _np, _zero
from lipgnn.nn.lipschitz import EPS

__all__ = ["applies", "one_head_gat"]

#: One-head layers on graphs of at least this many edges (self-loops included) take this path even below
#: :data:`lipgnn.nn.fused.gat_small.SMALL_EDGE_CHANNELS`. Measured against ``gat_small`` (30-layer GAT-Lip, hidden 64,
#: the authors' dropouts, one thread): whole ``train.py`` runs on Cora (13,264 edges, 200 epochs) 1.12x faster in nine
#: of nine alternating pairs; single steps in one process level on Cora (80.4 against 78.6 ms) and faster on a random
#: graph of 1,000 nodes and 5,000 edges (34.0 against 37.1 ms); level at 1,500 edges; slower at 320 edges (13.1
#: against 12.2 ms), where the per-call overhead of its separate loops and MKL's GEMMs outweighs the per-edge scalars.
MIN_EDGES = 2048


def applies(x: Tensor, graph: CSRGraph, heads: int, channels: int) -> bool:
    """Whether this path takes the input: one head, the compiled loops available, and a graph of at least
    :data:`MIN_EDGES` edges or too large for :mod:`lipgnn.nn.fused.gat_small` (which takes the other inputs)."""
    return (heads == 1 and (graph.num_edges >= MIN_EDGES
                            or graph.num_edges * channels > gat_small.SMALL_EDGE_CHANNELS)
            and kernels.available(x))


class _OneHeadGAT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None,  # type: ignore[override]
                graph: CSRGraph, slope: float, lip_alpha: float | None, eps: float, drop: Tensor | None,
                elu_alpha: float | None) -> Tensor:
        n = x.size(0)
        lip = lip_alpha is not None
        zero = _zero(x)
        kind = zero.dtype.type
        z = torch.mm(x, weight.t())  # [N, C]
        a_src, a_dst = _np(att_src).reshape(-1), _np(att_dst).reshape(-1)
        att_norm = np.empty(1, dtype=zero.dtype)  # eq. (17)'s ‖a‖
        att_norm[0] = np.sqrt(np.dot(a_src, a_src) + np.dot(a_dst, a_dst) + kind(eps) * kind(eps))
        node = np.empty((6, n), dtype=zero.dtype)  # s, t, sq, scale, nmax, ties (see gat_kernels.one_head_scores)
        alpha = x.new_empty(graph.num_edges)
        rowptr, col = _np(graph.rowptr), _np(graph.col)
        gat_kernels.one_head_scores(_np(z), a_src, a_dst, rowptr, col, kind(slope), alpha.numpy(), node, lip, att_norm,
                                    kind(lip_alpha if lip else 1.0), kind(eps), zero, kind(1))
        alpha.exp_()  # torch's vectorised exp: numba's scalar one costs ~6 ns an edge
        weights = alpha if drop is None else torch.empty_like(alpha)
        drop_np = _np(drop) if drop is not None else alpha.numpy()
        b = _np(bias) if bias is not None else np.zeros(z.size(1), dtype=zero.dtype)
        out = x.new_empty(n, z.size(1))
        if elu_alpha is not None and x.dtype == torch.float32:
            gat_kernels.one_head_aggregate_elu(rowptr, col, alpha.numpy(), drop_np, drop is not None, weights.numpy(),
                                               _np(z), b, out.numpy(), kind(elu_alpha), kind(1))
        else:
            gat_kernels.one_head_aggregate(rowptr, col, alpha.numpy(), drop_np, drop is not None, weights.numpy(),
                                           _np(z), b, out.numpy(), kind(1))
            if elu_alpha is not None:
                out = F.elu(out, elu_alpha)
        ctx.save_for_backward(x, weight, att_src, att_dst, z, alpha, weights, drop,
                              out if elu_alpha is not None else None)
        ctx.graph, ctx.slope, ctx.lip_alpha, ctx.eps, ctx.elu_alpha = graph, slope, lip_alpha, eps, elu_alpha
        ctx.node, ctx.att_norm, ctx.has_bias = node, att_norm, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight, att_src, att_dst, z, alpha, weights, drop, out = ctx.saved_tensors
        graph = ctx.graph
        lip = ctx.lip_alpha is not None
        zero = _zero(x)
        kind = zero.dtype.type
        grad = grad.contiguous()
        grad_bias = None
        if ctx.elu_alpha is not None:
            grad, grad_bias = elementwise_kernels.bias_elu_backward(grad, out, ctx.elu_alpha, ctx.has_bias)
        with_bias = ctx.has_bias and ctx.elu_alpha is None
        grad_bias_np = np.zeros(z.size(1) if with_bias else 1, dtype=np.float64)
        # ∂z = Aᵀ g from the aggregation, scattered in the score backward's edge visit (no transposed product)
        grad_z = torch.zeros_like(z)
        grad_node = np.zeros((3, z.size(0)), dtype=zero.dtype)
        grad_att_norm = np.zeros(1, dtype=zero.dtype)
        drop_np = _np(drop) if drop is not None else np.empty(0, dtype=zero.dtype)
        gat_kernels.one_head_score_backward(_np(grad), _np(z), _np(alpha), _np(weights), drop_np, drop is not None,
                                            _np(graph.rowptr), _np(graph.col), kind(ctx.slope), ctx.node, lip,
                                            ctx.att_norm, kind(ctx.lip_alpha if lip else 1.0), kind(ctx.eps),
                                            grad_z.numpy(), grad_node, grad_att_norm, grad_bias_np, with_bias,
                                            np.empty(max(graph.max_degree, 1), dtype=zero.dtype), zero, kind(1))
        if with_bias:
            grad_bias = torch.from_numpy(grad_bias_np).to(grad.dtype)
        grad_att = x.new_empty(2, 1, z.size(1))
        att = grad_att.numpy().reshape(2, -1)
        gat_kernels.one_head_node_backward(grad_z.numpy(), _np(z), _np(att_src).reshape(-1), _np(att_dst).reshape(-1),
                                           grad_node, lip, ctx.att_norm, grad_att_norm, att[0], att[1], zero, kind(1))
        grad_x = torch.mm(grad_z, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.mm(grad_z.t(), x) if ctx.needs_input_grad[1] else None
        return (grad_x, grad_w, grad_att[0], grad_att[1], grad_bias, None, None, None, None, None, None)


def one_head_gat(x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None,
                 graph: CSRGraph, negative_slope: float, lip_alpha: float | None = None, eps: float = EPS,
                 attn_dropout: float = 0.0, elu_alpha: float | None = None) -> Tensor:
    """The one-head layer's output ``[N, C]`` for the node features ``x`` ``[N, F]``, the projection ``weight``
    ``[C, F]``, the attention vectors ``[1, C]`` and the CSR ``graph`` (module docstring); with ``lip_alpha`` the
    scores of eq. (17) with that α; with ``attn_dropout`` p > 0, dropout on the attention weights (training), drawn
    from torch's generator at the point and in the edge coordinates (``graph.edge_order``) the general path draws
    it, so both drop the same weights; with ``elu_alpha``, ``ELU(out)`` (the bias added first)."""
    drop = None
    if attn_dropout > 0.0:
        drop = dropout(x.new_ones(graph.num_edges, 1), attn_dropout, True, rows=graph.edge_order).view(-1)
    return _OneHeadGAT.apply(x.contiguous(), weight, att_src.contiguous(), att_dst.contiguous(), bias, graph,
                             float(negative_slope), None if lip_alpha is None else float(lip_alpha), float(eps),
                             drop, None if elu_alpha is None else float(elu_alpha))
