r"""A whole GAT layer (no LipschitzNorm) as one autograd operation, for small graphs: one compiled loop each way.

GAT (Veličković et al. 2018, eqs. (3)–(4); the attention of the LipschitzNorm paper's eqs. (2)–(3)), head
:math:`h`, target :math:`i`, its CSR sources :math:`j \in \mathcal{N}(i)` (self-loops included where the layer
adds them):

.. math::
    z = x W^\top, \qquad
    e_{ij,h} = \mathrm{LeakyReLU}\big(a_{\mathrm{src},h}\cdot z_{j,h} + a_{\mathrm{dst},h}\cdot z_{i,h}\big),
    \qquad \alpha_{ij,h} = \frac{\exp(e_{ij,h} - m_{i,h})}{\sum_{k} \exp(e_{ik,h} - m_{i,h}) + 10^{-16}},

with the row maximum :math:`m_{i,h}` (PyG's softmax), :math:`o_{i,h} = \sum_j \alpha_{ij,h} z_{j,h}`, the heads
concatenated or averaged, plus the bias. Backward, with :math:`g_{i,h} = \partial L/\partial o_{i,h}`:
:math:`\partial z_j \mathrel{+}= \sum_i \alpha_{ij} g_i`, :math:`\delta_{ij} = g_i\cdot z_j`,
:math:`\partial e_{ij} = \alpha_{ij}(\delta_{ij} - \sum_k \alpha_{ik}\delta_{ik})`, through LeakyReLU to the
score terms :math:`s_j = a_{\mathrm{src}}\cdot z_j`, :math:`t_i = a_{\mathrm{dst}}\cdot z_i`, and from them to
:math:`z` and the attention vectors; :math:`\partial x = \partial z\, W` and :math:`\partial W = \partial z^\top x`.

Why by hand: on Fig. 5's tree batches (960 nodes of width 32 at tree depth 3) the layer has little arithmetic, and
the general CSR path (:class:`lipgnn.nn.fused.FusedLipGATConv`: projection, node terms, scores, LeakyReLU,
softmax, SpMM, bias, each its own autograd node) spends most of its time per layer forward and backward in
per-operation dispatch (1.9 ms there against 1.1 ms here, :data:`SMALL_EDGE_HEADS`). Here the layer is one
autograd node: a projection GEMM and one loop forward; one loop and two GEMMs backward. On large graphs the
general path's MKL products win, so :func:`applies` takes this path only up to :data:`SMALL_EDGE_HEADS` (which
covers Fig. 5's batches up to tree depth 4).

Only the plain layer runs here (no LipschitzNorm, no edge features, no residual projection, no attention dropout
while training); everything else takes the general path, which is this function's eager twin. Both are tested
equal to PyG's ``GATConv`` (``tests/test_fused_gat_small.py``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lipgnn.nn.fused import kernels
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.kernels import _np, _zero, numba

__all__ = ["SMALL_EDGE_HEADS", "applies", "small_gat"]

#: Largest ``edges × heads`` the one-operation path takes. Its loops scatter gradients to source rows in edge order
#: where the general path hands the attention products to MKL, so on large graphs without locality the general path
#: wins. Forward + backward of one layer against the general path, one thread, loaded 2-core host (ratio > 1: this
#: path faster): Fig. 5's tree batches, 4 heads of 8, at depth 3 (960 nodes, 7,424 edge-heads) 1.81x, at depth 4
#: (31,744 nodes, 249,856 edge-heads) 1.30x; random graphs with 5 edges per node, 4 heads of 8: 2,708 nodes
#: (~65,000 edge-heads) 1.15x, 8,000 nodes (~190,000) 1.11x, 19,717 nodes (PubMed's size, ~490,000) 0.71x.
SMALL_EDGE_HEADS = 1 << 18

if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})

    # Arithmetic stays in the tensors' float type (the scalars ``zero``, ``one``, ``inv_heads`` and ``slope``
    # are passed in it): a float literal, a Python float or an integer operand would promote the loops to
    # float64 and the exponentials to double ``exp``. Tree batches have one to three edges per row, so every
    # loop visits a row's edges with the heads innermost, and the channel loops run over a row's H·C values
    # at once, with per-head factors spread to H·C-sized scratch rows first: LLVM vectorises those flat loops
    # (the per-head 8-channel loops ran about 3x slower).

    @_jit
    def _forward(z, att_src, att_dst, rowptr, col, slope, bias, concat, out, alpha, s, t,
                 zero, one, inv_heads):  # pragma: no cover
        # z [N, H·C], att_* [H·C]; alpha [E, H] (written); s, t [N, H] score terms (written);
        # out [N, H·C] (concat) or [N, C]
        n, hc = z.shape
        heads = s.shape[1]
        width = hc // heads
        prod_s = np.empty(hc, z.dtype)
        prod_t = np.empty(hc, z.dtype)
        for v in range(n):
            for k in range(hc):
                prod_s[k] = z[v, k] * att_src[k]
                prod_t[k] = z[v, k] * att_dst[k]
            for h in range(heads):
                a = zero
                b = zero
                for c in range(width):
                    a += prod_s[h * width + c]
                    b += prod_t[h * width + c]
                s[v, h] = a
                t[v, h] = b
        m = np.empty(heads, z.dtype)
        total = np.empty(heads, z.dtype)
        weight = np.empty(hc, z.dtype)
        row = np.empty(hc, z.dtype)
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            for k in range(hc):
                row[k] = zero
            if start < stop:
                for h in range(heads):
                    total[h] = zero
                for e in range(start, stop):
                    j = col[e]
                    for h in range(heads):
                        u = s[j, h] + t[i, h]
                        u = u if u > zero else u * slope
                        alpha[e, h] = u
                        if e == start or u > m[h]:
                            m[h] = u
                for e in range(start, stop):
                    for h in range(heads):
                        w = np.exp(alpha[e, h] - m[h])
                        alpha[e, h] = w
                        total[h] += w
                for h in range(heads):
                    total[h] = one / (total[h] + np.float32(1e-16))
                for e in range(start, stop):
                    j = col[e]
                    for h in range(heads):
                        w = alpha[e, h] * total[h]
                        alpha[e, h] = w
                        for c in range(width):
                            weight[h * width + c] = w
                    for k in range(hc):
                        row[k] += weight[k] * z[j, k]
            if concat:
                for k in range(hc):
                    out[i, k] = bias[k] + row[k]
            else:
                for c in range(width):
                    acc = zero
                    for h in range(heads):
                        acc += row[h * width + c]
                    out[i, c] = bias[c] + acc * inv_heads

    @_jit
    def _backward(grad, z, att_src, att_dst, rowptr, col, slope, concat, alpha, s, t,
                  grad_z, grad_att_src, grad_att_dst, delta, grad_s, grad_t, zero, inv_heads):  # pragma: no cover
        # grad [N, H·C] or [N, C]; z, grad_z [N, H·C] (grad_z zeroed); att_* [H·C]; grad_s [N, H] (zeroed),
        # grad_t [N, H] (written); grad_att_* [H·C] (written); delta [max degree, H] scratch
        n, hc = z.shape
        heads = s.shape[1]
        width = hc // heads
        g_row = np.empty(hc, z.dtype)
        prod = np.empty(hc, z.dtype)
        weight = np.empty(hc, z.dtype)
        weighted = np.empty(heads, z.dtype)
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if concat:
                for k in range(hc):
                    g_row[k] = grad[i, k]
            else:  # the mean over heads: every head's output gets 1/H of the gradient
                for h in range(heads):
                    for c in range(width):
                        g_row[h * width + c] = grad[i, c] * inv_heads
            for h in range(heads):
                weighted[h] = zero
                grad_t[i, h] = zero
            for e in range(start, stop):
                j = col[e]
                for k in range(hc):
                    prod[k] = g_row[k] * z[j, k]
                for h in range(heads):
                    d = zero
                    for c in range(width):
                        d += prod[h * width + c]
                    delta[e - start, h] = d
                    a = alpha[e, h]
                    weighted[h] += a * d
                    for c in range(width):
                        weight[h * width + c] = a
                for k in range(hc):
                    grad_z[j, k] += weight[k] * g_row[k]
            for e in range(start, stop):
                j = col[e]
                for h in range(heads):
                    de = alpha[e, h] * (delta[e - start, h] - weighted[h])
                    de = de if s[j, h] + t[i, h] > zero else de * slope
                    grad_s[j, h] += de
                    grad_t[i, h] += de
        acc_src = np.zeros(hc, z.dtype)
        acc_dst = np.zeros(hc, z.dtype)
        for v in range(n):
            for h in range(heads):
                for c in range(width):
                    prod[h * width + c] = grad_s[v, h]
                    weight[h * width + c] = grad_t[v, h]
            for k in range(hc):
                zk = z[v, k]
                grad_z[v, k] += prod[k] * att_src[k] + weight[k] * att_dst[k]
                acc_src[k] += prod[k] * zk
                acc_dst[k] += weight[k] * zk
        for k in range(hc):
            grad_att_src[k] = acc_src[k]
            grad_att_dst[k] = acc_dst[k]


def applies(x: Tensor, graph: CSRGraph, heads: int) -> bool:
    """Whether the one-operation path takes this input: compiled loops available, ``edges × heads`` at most
    :data:`SMALL_EDGE_HEADS`."""
    return graph.num_edges * heads <= SMALL_EDGE_HEADS and kernels.available(x)


class _SmallGAT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None,  # type: ignore[override]
                graph: CSRGraph, concat: bool, slope: float) -> Tensor:
        heads, width = att_src.shape
        n = x.size(0)
        z = torch.mm(x, weight.t())  # [N, H·C]
        out = x.new_empty(n, heads * width if concat else width)
        alpha = x.new_empty(graph.num_edges, heads)
        s, t = x.new_empty(n, heads), x.new_empty(n, heads)
        zero = _zero(x)
        bias_arr = _np(bias) if bias is not None else np.zeros(out.size(1), dtype=zero.dtype)
        _forward(_np(z), _np(att_src).reshape(-1), _np(att_dst).reshape(-1), _np(graph.rowptr), _np(graph.col),
                 zero.dtype.type(slope),
                 bias_arr, concat, out.numpy(), alpha.numpy(), s.numpy(), t.numpy(), zero, zero.dtype.type(1),
                 zero.dtype.type(1.0 / heads))
        ctx.save_for_backward(x, weight, att_src, att_dst, z, alpha, s, t)
        ctx.graph, ctx.concat, ctx.slope, ctx.has_bias = graph, concat, slope, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight, att_src, att_dst, z, alpha, s, t = ctx.saved_tensors
        graph = ctx.graph
        heads, width = att_src.shape
        n = z.size(0)
        zero = _zero(x)
        grad_z = torch.zeros_like(z)
        grad_att = x.new_empty(2, heads, width)
        att = grad_att.numpy().reshape(2, heads * width)
        rowptr = _np(graph.rowptr)
        scratch = np.empty((int(np.diff(rowptr).max()) if n else 0, heads), dtype=zero.dtype)
        grad_st = np.zeros((2, n, heads), dtype=zero.dtype)
        _backward(_np(grad), _np(z), _np(att_src).reshape(-1), _np(att_dst).reshape(-1), rowptr, _np(graph.col),
                  zero.dtype.type(ctx.slope), ctx.concat, _np(alpha), _np(s), _np(t), grad_z.numpy(), att[0], att[1],
                  scratch, grad_st[0], grad_st[1], zero, zero.dtype.type(1.0 / heads))
        grad_x = torch.mm(grad_z, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.mm(grad_z.t(), x) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias else None
        return grad_x, grad_w, grad_att[0], grad_att[1], grad_bias, None, None, None


def small_gat(x: Tensor, weight: Tensor, att_src: Tensor, att_dst: Tensor, bias: Tensor | None, graph: CSRGraph,
              concat: bool, negative_slope: float) -> Tensor:
    """GAT's output ``[N, H·C]`` (``concat``) or ``[N, C]`` for the node features ``x`` ``[N, F]``, the projection
    ``weight`` ``[H·C, F]``, the attention vectors ``[H, C]`` and the CSR ``graph`` (module docstring)."""
    return _SmallGAT.apply(x.contiguous(), weight, att_src.contiguous(), att_dst.contiguous(), bias, graph,
                           bool(concat), float(negative_slope))
