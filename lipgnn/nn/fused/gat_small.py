r"""A whole GAT or GAT-Lip layer as one autograd operation, for small graphs: one compiled loop each way.

GAT (Veličković et al. 2018, eqs. (3)–(4); the attention of the LipschitzNorm paper's eqs. (2)–(3)), head
:math:`h`, target :math:`i`, its CSR sources :math:`j \in \mathcal{N}(i)` (self-loops included where the layer
adds them):

.. math::
    z = x W^\top, \qquad
    e_{ij,h} = \mathrm{LeakyReLU}\big(k_{i,h}\,(a_{\mathrm{src},h}\cdot z_{j,h} + a_{\mathrm{dst},h}\cdot z_{i,h})\big),
    \qquad \alpha_{ij,h} = \frac{\exp(e_{ij,h} - m_{i,h})}{\sum_{k} \exp(e_{ik,h} - m_{i,h}) + 10^{-16}},

with the row maximum :math:`m_{i,h}` (PyG's softmax), :math:`o_{i,h} = \sum_j \alpha_{ij,h} z_{j,h}`, the heads
concatenated or averaged, plus the bias. :math:`k = 1` for GAT; for GAT-Lip, LipschitzNorm's eq. (17)
(``variant="paper"``), :math:`k_{i,h} = \alpha / c_{i,h}` with
:math:`c_{i,h} = \|a_h\|\sqrt{\|z_{i,h}\|^2 + \max_j \|z_{j,h}\|^2 + \epsilon^2} + \epsilon` and
:math:`\|a_h\| = \sqrt{\|a_{\mathrm{src},h}\|^2 + \|a_{\mathrm{dst},h}\|^2 + \epsilon^2}`
(:func:`lipgnn.nn.fused.lipschitz_csr.gat_node_denominator_csr`).

Backward, with :math:`g_{i,h} = \partial L/\partial o_{i,h}`: :math:`\partial z_j \mathrel{+}= \sum_i \alpha_{ij}
g_i`, :math:`\delta_{ij} = g_i\cdot z_j`, :math:`\partial e_{ij} = \alpha_{ij}(\delta_{ij} - \sum_k \alpha_{ik}
\delta_{ik})`, through LeakyReLU to the score terms :math:`s_j = a_{\mathrm{src}}\cdot z_j`,
:math:`t_i = a_{\mathrm{dst}}\cdot z_i` (times :math:`k_i`), and from them to :math:`z` and the attention vectors.
For GAT-Lip also :math:`\partial k_i = \sum_j \partial e_{ij} (s_j + t_i)`,
:math:`\partial c_i = -\partial k_i\, k_i^2 / \alpha`, to :math:`\|a_h\|` and, through
:math:`\partial\|z\|^2 / \partial z = 2z`, to :math:`z_i` and to the maximising sources (a maximum shared by
several sources splits its gradient equally, as the general path does). Last, :math:`\partial x = \partial z\, W`
and :math:`\partial W = \partial z^\top x`.

Why by hand: on Fig. 5's tree batches (960 nodes of width 32 at tree depth 3) the layer has little arithmetic, and
the general CSR path (:class:`lipgnn.nn.fused.FusedLipGATConv`: projection, node terms, eq. (17)'s neighbour maxima
and factor, scores, LeakyReLU, softmax, SpMM, bias, each its own autograd node) spends most of its time per layer
forward and backward in per-operation dispatch (GAT 1.9 ms there against 1.1 ms here, GAT-Lip 2.4 ms against 1.4 ms;
:data:`SMALL_EDGE_CHANNELS`). Here the layer is one autograd node: forward a projection GEMM, a loop forming the
scores shifted by their row maxima, torch's vectorised ``exp_`` and a loop normalising and aggregating; backward one
loop and two GEMMs. A following ELU (a deep block's activation, float32) is applied to each output row in the
aggregating loop, and its derivative in the backward loop's first visit of the row, instead of a pass of its own
each way: 30-layer GAT-Lip training steps on Cora 3.2 % faster, evaluation forwards 4.6 %. On large graphs MKL's
products win over these loops, so :func:`applies` takes this path only up to :data:`SMALL_EDGE_CHANNELS` (which
covers Fig. 5's batches up to tree depth 4 and Cora, not PubMed); above it a one-head layer runs as
:mod:`lipgnn.nn.fused.gat_one_head`, several heads on the general path. A one-head layer on a graph of
:data:`lipgnn.nn.fused.gat_one_head.MIN_EDGES` edges or more (Cora's, CiteSeer's) also runs there, whose per-edge
scalars beat these head-generic loops from about 1,500 edges; this path keeps several heads (Fig. 5's four) and
one head on smaller graphs.

The softmax is shifted by the row maximum, where the general path's GAT-Lip shifts by the score bound
:math:`\alpha` (equal in exact arithmetic). Attention dropout in training multiplies each weight
:math:`\alpha_{ij,h}` by :math:`m_{ij,h}/(1-p)`, :math:`m \sim \mathrm{Bernoulli}(1-p)`, with the general path's
decisions (:func:`small_gat`); the backward then sees :math:`\partial\alpha_{ij} = m_{ij} (g_i\cdot z_j)/(1-p)`.
The authors' reference variant, edge features and a residual projection take the general path, which is also this
function's eager twin (CUDA, ``LIPGNN_KERNELS=eager``). Both paths are tested equal to PyG's ``GATConv`` and to
:class:`lipgnn.nn.LipGATConv`, and to each other with attention dropout (``tests/test_fused_gat_small.py``). The
compiled loops are :mod:`lipgnn.nn.fused.gat_kernels`' ``small_*``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lipgnn.nn.fused import gat_kernels, kernels
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.kernels import _np, _zero
from lipgnn.nn.lipschitz import EPS

__all__ = ["SMALL_EDGE_CHANNELS", "applies", "small_gat"]

#: Largest ``edges × heads × channels per head`` (the aggregation's multiply-adds) the one-operation path takes.
#: Its loops scatter gradients to source rows in edge order where the general path hands the attention products to
#: MKL, so on large graphs the general path wins. Forward + backward of one layer against the general path, one
#: thread, loaded 2-core host (ratio > 1: this path faster), GAT and GAT-Lip: Fig. 5's tree batches, 4 heads of 8,
#: at depth 3 (960 nodes, 1,856 edges: 0.06 M) 1.81x and 1.71x, at depth 4 (31,744 nodes, 62,464 edges: 2.0 M)
#: 1.30x and 1.08x; Cora with 1 head of 64 (13,264 edges: 0.85 M) about 1.1x and 1.2x; random graphs of 5 edges
#: per node, 4 heads of 8: 2,708 nodes (0.5 M) 1.15x and 1.11x, 8,000 nodes (1.5 M) 1.11x and 0.91x; PubMed with
#: 1 head of 64 (108,365 edges: 6.9 M) 0.7x and 0.8x, so it stays above the limit.
SMALL_EDGE_CHANNELS = 1 << 21

def applies(x: Tensor, graph: CSRGraph, heads: int, channels: int) -> bool:
    """Whether the one-operation path takes this input: compiled loops available, ``edges × heads × channels`` at
    most :data:`SMALL_EDGE_CHANNELS`."""
    return graph.num_edges * heads * channels <= SMALL_EDGE_CHANNELS and kernels.available(x)


class _SmallGAT(torch.autograd.Function):
    # Besides the two loops and the GEMMs, each direction allocates its buffers once and converts each tensor to a
    # NumPy view once: on tree-depth-3 batches (960 nodes) the per-call overhead is as large as the loops.
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None,  # type: ignore[override]
                graph: CSRGraph, concat: bool, slope: float, lip_alpha: float | None, eps: float,
                drop: Tensor | None, elu_alpha: float | None) -> Tensor:
        heads, width = att_src.shape
        n = x.size(0)
        lip = lip_alpha is not None
        z = torch.mm(x, weight.t())  # [N, H·C]
        out = x.new_empty(n, heads * width if concat else width)
        alpha = x.new_empty(graph.num_edges, heads)
        zero = _zero(x)
        kind = zero.dtype.type
        node = np.empty((6, n, heads), dtype=zero.dtype)  # s, t, sq, scale, nmax, ties (see gat_kernels.small_scores)
        att_norm = np.empty(heads, dtype=zero.dtype)  # eq. (17)'s ‖a_h‖, written only with ``lip``
        bias_arr = _np(bias) if bias is not None else np.zeros(out.size(1), dtype=zero.dtype)
        z_np, rowptr, col, alpha_np = _np(z), _np(graph.rowptr), _np(graph.col), alpha.numpy()
        gat_kernels.small_scores(z_np, _np(att_src).reshape(-1), _np(att_dst).reshape(-1), rowptr, col, kind(slope),
                                 alpha_np, node, lip, att_norm, kind(lip_alpha if lip else 1.0), kind(eps), zero,
                                 kind(1))
        alpha.exp_()  # torch's vectorised exp: numba's scalar one cost ~10 ns an edge-head
        drop_np = _np(drop) if drop is not None else np.empty((0, heads), dtype=zero.dtype)
        elu = elu_alpha is not None
        gat_kernels.small_aggregate(z_np, rowptr, col, bias_arr, concat, out.numpy(), alpha_np, drop is not None,
                                    drop_np, elu, kind(elu_alpha if elu else 1.0), zero, kind(1), kind(1.0 / heads))
        ctx.save_for_backward(x, weight, att_src, att_dst, z, alpha, out if elu else None)
        ctx.elu_alpha = elu_alpha
        ctx.dropped, ctx.drop = drop is not None, drop_np
        ctx.graph, ctx.concat, ctx.slope, ctx.has_bias = graph, concat, slope, bias is not None
        ctx.lip_alpha, ctx.eps, ctx.node, ctx.att_norm = lip_alpha, eps, node, att_norm
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight, att_src, att_dst, z, alpha, y = ctx.saved_tensors
        elu = ctx.elu_alpha is not None
        graph = ctx.graph
        heads, width = att_src.shape
        n = z.size(0)
        lip = ctx.lip_alpha is not None
        zero = _zero(x)
        kind = zero.dtype.type
        grad_z = torch.zeros_like(z)
        grad_att = x.new_empty(2, heads, width)
        att = grad_att.numpy().reshape(2, heads * width)
        grad_bias = x.new_empty(grad.size(1))
        gat_kernels.small_backward(_np(grad), _np(z), _np(att_src).reshape(-1), _np(att_dst).reshape(-1),
                                   _np(graph.rowptr), _np(graph.col), kind(ctx.slope), ctx.concat, _np(alpha),
                                   ctx.dropped, ctx.drop, ctx.node, lip, ctx.att_norm,
                                   kind(ctx.lip_alpha if lip else 1.0), kind(ctx.eps), grad_z.numpy(), att[0], att[1],
                                   grad_bias.numpy(), np.empty((graph.max_degree, heads), dtype=zero.dtype),
                                   np.zeros((3, n, heads), dtype=zero.dtype), elu, _np(y) if elu else _np(grad),
                                   kind(ctx.elu_alpha if elu else 1.0), zero, kind(1), kind(1.0 / heads))
        grad_x = torch.mm(grad_z, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.mm(grad_z.t(), x) if ctx.needs_input_grad[1] else None
        return (grad_x, grad_w, grad_att[0], grad_att[1], grad_bias if ctx.has_bias else None,
                None, None, None, None, None, None, None)


def small_gat(x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None, graph: CSRGraph,
              concat: bool, negative_slope: float, lip_alpha: float | None = None, eps: float = EPS,
              attn_dropout: float = 0.0, elu_alpha: float | None = None) -> Tensor:
    """GAT's output ``[N, H·C]`` (``concat``) or ``[N, C]`` for the node features ``x`` ``[N, F]``, the projection
    ``weight`` ``[H·C, F]``, the attention vectors ``[H, C]`` and the CSR ``graph`` (module docstring); with
    ``lip_alpha``, the scores of LipschitzNorm's eq. (17) (``variant="paper"``) with that α; with ``attn_dropout``
    p > 0, dropout on the attention weights (training), each edge and head deciding as the general path's
    :func:`~lipgnn.nn.fused.dropout.dropout` does in the caller's edge coordinates (``graph.edge_order``), from
    the same draw of torch's generator at the same point, so both paths drop the same weights; with ``elu_alpha``
    (float32 only), ``ELU(out)`` with the bias added first, in the same row visits each way instead of a further
    pass (:func:`lipgnn.nn.fused.activation.bias_elu`'s)."""
    if elu_alpha is not None and x.dtype != torch.float32:
        raise ValueError("small_gat folds the ELU for float32 only (its exponential is a float32 polynomial)")
    drop = None
    if attn_dropout > 0.0:
        ones = x.new_ones(graph.num_edges, att_src.size(0))
        drop = dropout(ones, attn_dropout, True, rows=graph.edge_order)
    return _SmallGAT.apply(x.contiguous(), weight, att_src.contiguous(), att_dst.contiguous(), bias, graph,
                           bool(concat), float(negative_slope), None if lip_alpha is None else float(lip_alpha),
                           float(eps), drop, None if elu_alpha is None else float(elu_alpha))
