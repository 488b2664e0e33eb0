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
(``tests/test_fused_gat_one_head.py``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lipgnn.nn.fused import elementwise_kernels, gat_small, kernels
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.kernels import _np, _zero, numba
from lipgnn.nn.lipschitz import EPS

__all__ = ["applies", "one_head_gat"]

if numba is not None:
    from lipgnn.nn.fused.elementwise_kernels import _bias_elu_row, _elu_row_scratch

    # Reassociated sums let LLVM vectorise the channel loops; the numpy error model drops the zero-divisor check
    # (the divisors here are sums of exponentials plus 1e-16, c_i >= eps, tie counts >= 1).
    _jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
    # a row helper is inlined into its callers' loops at numba's IR level: left as a call, it cost 0.5 ms a PubMed
    # layer (1.99 against 1.49 ms for the ELU aggregation, one thread)
    _jit_inline = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy",
                             inline="always")

    @_jit
    def _scores(z, att_src, att_dst, rowptr, col, slope, alpha, node, lip, att_norm, lip_alpha, eps, zero,
                one):  # pragma: no cover
        # z [N, C], att_* [C]; written: node [6, N] = s, t, sq = ‖z_v‖², and with ``lip`` per target
        # scale = α / c_i, nmax = max_j ‖z_j‖² and ties (its count); alpha [E] the scores shifted by their row's
        # maximum (<= 0, exponentiated by the caller). Rows without edges leave scale, nmax, ties unwritten.
        n, width = z.shape
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        for v in range(n):
            a = zero
            b = zero
            q = zero
            for c in range(width):
                zc = z[v, c]
                a += zc * att_src[c]
                b += zc * att_dst[c]
                q += zc * zc
            s[v] = a
            t[v] = b
            sq[v] = q
        norm = att_norm[0]
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if start == stop:
                continue
            k = one
            if lip:  # eq. (17), the neighbour maximum from 0 like the general path
                best = zero
                count = zero
                for e in range(start, stop):
                    q = sq[col[e]]
                    if q > best:
                        best = q
                        count = one
                    elif q == best:
                        count += one
                k = lip_alpha / (norm * np.sqrt(sq[i] + best + eps * eps) + eps)
                scale[i] = k
                nmax[i] = best
                ties[i] = count
            t_i = t[i]
            m = (s[col[start]] + t_i) * k
            m = m if m > zero else m * slope
            for e in range(start, stop):
                u = (s[col[e]] + t_i) * k
                u = u if u > zero else u * slope
                alpha[e] = u
                m = max(m, u)
            for e in range(start, stop):
                alpha[e] -= m

    @_jit_inline
    def _aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one):  # pragma: no cover
        # acc [C] += Σ_e w_e z_j over row i's edges. alpha [E] holds exp(shifted scores) on entry and the softmax
        # weights on exit (PyG's softmax, 1e-16 guard); with ``dropped`` weights [E] = alpha · drop (the factors
        # m / (1 - p)), else weights is alpha. One visit per row: the row's sum, its normalisation, the drop factor
        # and the aggregation while the row's weights are in cache.
        start, stop = rowptr[i], rowptr[i + 1]
        total = one - one
        for e in range(start, stop):
            total += alpha[e]
        r = one / (total + np.float32(1e-16))
        width = z.shape[1]
        for e in range(start, stop):
            a = alpha[e] * r
            alpha[e] = a
            w = a * drop[e] if dropped else a
            weights[e] = w
            j = col[e]
            for c in range(width):
                acc[c] += w * z[j, c]

    @_jit
    def _aggregate(rowptr, col, alpha, drop, dropped, weights, z, bias, out, one):  # pragma: no cover
        # out[i] = b + Σ_e w_e z_j (_aggregate_row)
        n, width = z.shape
        acc = np.empty(width, z.dtype)
        for i in range(n):
            for c in range(width):
                acc[c] = bias[c]
            _aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one)
            for c in range(width):
                out[i, c] = acc[c]

    @_jit
    def _aggregate_elu(rowptr, col, alpha, drop, dropped, weights, z, bias, out, elu_alpha, one):  # pragma: no cover
        # out[i] = ELU(b + Σ_e w_e z_j) (float32: kernels' polynomial exponential)
        n, width = z.shape
        acc = np.empty(width, np.float32)
        h, poly, bits, pow2 = _elu_row_scratch(width)
        for i in range(n):
            acc[:] = 0
            _aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one)
            _bias_elu_row(acc, bias, out[i], elu_alpha, one, h, poly, bits, pow2)

    @_jit
    def _score_backward(grad, z, alpha, weights, drop, dropped, rowptr, col, slope, node, lip, att_norm, lip_alpha,
                        eps, grad_z, grad_node, grad_att_norm, grad_bias, with_bias, delta, zero,
                        one):  # pragma: no cover
        # grad [N, C] (∂o), z [N, C], alpha [E] (undropped weights), weights [E] (the weights the aggregation used),
        # drop [E] (m / (1 - p), read with ``dropped``); grad_z [N, C] (zeroed): accumulates the aggregation's
        # ∂z_j += w_ij g_i; grad_node [3, N] (zeroed): accumulates ∂s, ∂t, ∂sq; grad_att_norm [1]: ∂‖a‖;
        # with ``with_bias`` grad_bias [C] (float64, zeroed): the column sums of grad, row by row as each g_i is read;
        # delta [max degree] scratch. Per edge one visit of the rows g_i and z_j forms δ_ij = g_i·z_j (times the
        # drop factor) and scatters w_ij g_i into ∂z_j; then the row's softmax, LeakyReLU and eq. (17) backward
        # while g_i and its δ are in cache. The serial loop makes the scatter race-free.
        n, width = z.shape
        two = one + one
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        grad_s, grad_t, grad_sq = grad_node[0], grad_node[1], grad_node[2]
        norm = att_norm[0]
        total_norm = zero
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if with_bias:
                for c in range(width):
                    grad_bias[c] += grad[i, c]
            if start == stop:
                continue
            weighted = zero
            for e in range(start, stop):
                j = col[e]
                d = zero
                w = weights[e]
                for c in range(width):
                    g = grad[i, c]
                    d += g * z[j, c]
                    grad_z[j, c] += w * g
                if dropped:
                    d *= drop[e]
                delta[e - start] = d
                weighted += alpha[e] * d
            t_i = t[i]
            k_i = scale[i] if lip else one
            grad_k = zero
            grad_ti = zero
            for e in range(start, stop):
                j = col[e]
                p = s[j] + t_i
                de = alpha[e] * (delta[e - start] - weighted)
                de = de if p > zero else de * slope  # the sign of p · k_i is p's
                grad_k += de * p
                de *= k_i
                grad_s[j] += de
                grad_ti += de
            grad_t[i] += grad_ti
            if lip:
                # k = α / c: ∂c = -∂k · k² / α; c = ‖a‖ R + eps, R = sqrt(‖z_i‖² + M_i + eps²)
                r_i = np.sqrt(sq[i] + nmax[i] + eps * eps)
                grad_c = -grad_k * k_i * k_i / lip_alpha
                total_norm += grad_c * r_i
                grad_q = grad_c * norm / (two * r_i)
                grad_sq[i] += grad_q
                share = grad_q / ties[i]  # the maximum's gradient, split among tied sources
                best = nmax[i]
                for e in range(start, stop):
                    j = col[e]
                    if sq[j] == best:
                        grad_sq[j] += share
        grad_att_norm[0] = total_norm

    @_jit
    def _node_backward(grad_z, z, att_src, att_dst, grad_node, lip, att_norm, grad_att_norm, grad_att_src,
                       grad_att_dst, zero, one):  # pragma: no cover
        # Adds ∂s a_src + ∂t a_dst + 2 ∂sq z to grad_z [N, C] in place; writes the attention vectors' gradients [C]
        # (with eq. (17) also through ‖a‖ = sqrt(‖a_src‖² + ‖a_dst‖² + eps²): ∂‖a‖/∂a = a / ‖a‖).
        # score_kernels.gat_node_terms_backward computes the same terms for any number of heads, but its [N, H, C]
        # loop took 0.45–0.70 ms here against this one's 0.30–0.40 ms (PubMed, 64 channels, one thread,
        # alternating repeats; also with local sums or hoisted branches in it), so one head keeps its own.
        n, width = z.shape
        two = one + one
        grad_s, grad_t, grad_sq = grad_node[0], grad_node[1], grad_node[2]
        acc_src = np.zeros(width, z.dtype)
        acc_dst = np.zeros(width, z.dtype)
        for v in range(n):
            gs = grad_s[v]
            gt = grad_t[v]
            gq = two * grad_sq[v]
            for c in range(width):
                zc = z[v, c]
                grad_z[v, c] += gs * att_src[c] + gt * att_dst[c] + gq * zc
                acc_src[c] += gs * zc
                acc_dst[c] += gt * zc
        f = grad_att_norm[0] / att_norm[0] if lip else zero
        for c in range(width):
            grad_att_src[c] = acc_src[c] + f * att_src[c]
            grad_att_dst[c] = acc_dst[c] + f * att_dst[c]


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
        node = np.empty((6, n), dtype=zero.dtype)  # s, t, sq, scale, nmax, ties (see _scores)
        alpha = x.new_empty(graph.num_edges)
        rowptr, col = _np(graph.rowptr), _np(graph.col)
        _scores(_np(z), a_src, a_dst, rowptr, col, kind(slope), alpha.numpy(), node, lip, att_norm,
                kind(lip_alpha if lip else 1.0), kind(eps), zero, kind(1))
        alpha.exp_()  # torch's vectorised exp: numba's scalar one costs ~6 ns an edge
        weights = alpha if drop is None else torch.empty_like(alpha)
        drop_np = _np(drop) if drop is not None else alpha.numpy()
        b = _np(bias) if bias is not None else np.zeros(z.size(1), dtype=zero.dtype)
        out = x.new_empty(n, z.size(1))
        if elu_alpha is not None and x.dtype == torch.float32:
            _aggregate_elu(rowptr, col, alpha.numpy(), drop_np, drop is not None, weights.numpy(), _np(z), b,
                           out.numpy(), kind(elu_alpha), kind(1))
        else:
            _aggregate(rowptr, col, alpha.numpy(), drop_np, drop is not None, weights.numpy(), _np(z), b, out.numpy(),
                       kind(1))
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
        _score_backward(_np(grad), _np(z), _np(alpha), _np(weights), drop_np, drop is not None, _np(graph.rowptr),
                        _np(graph.col), kind(ctx.slope), ctx.node, lip, ctx.att_norm,
                        kind(ctx.lip_alpha if lip else 1.0), kind(ctx.eps), grad_z.numpy(), grad_node, grad_att_norm,
                        grad_bias_np, with_bias, np.empty(max(graph.max_degree, 1), dtype=zero.dtype), zero, kind(1))
        if with_bias:
            grad_bias = torch.from_numpy(grad_bias_np).to(grad.dtype)
        grad_att = x.new_empty(2, 1, z.size(1))
        att = grad_att.numpy().reshape(2, -1)
        _node_backward(grad_z.numpy(), _np(z), _np(att_src).reshape(-1), _np(att_dst).reshape(-1), grad_node, lip,
                       ctx.att_norm, grad_att_norm, att[0], att[1], zero, kind(1))
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
