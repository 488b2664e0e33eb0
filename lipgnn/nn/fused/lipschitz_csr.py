r"""LipschitzNorm's denominators (eq. (17) and (19)) per target node, on a :class:`CSRGraph`.

:mod:`lipgnn.nn.lipschitz` is the definition of eq. (17)/(19): its functions take per-edge inputs and
compute neighbour maxima with a scatter, about 20 edge-sized operations forward and backward. Why a
second, fast form must exist: for graphs without edge features every quantity there is a function of
per-node norms and of one neighbour maximum per target, so on the sorted CSR graph the same values
come from per-node tensors and one pass over the rows (edges of a target are contiguous). On a
PubMed-sized graph (1 thread) the shared GAT denominator costs ~14 ms forward+backward per layer,
this form ~2-3 ms. The functions below restate the shared formulas in that form with the shared
helpers (:func:`~lipgnn.nn.lipschitz.safe_sqrt`, :func:`~lipgnn.nn.lipschitz.eq19_denominator`,
:func:`~lipgnn.nn.lipschitz.query_sq_norm_per_head`, ``EPS``, the reference factor), and
tests/test_fused.py and tests/test_kernels.py check them against the shared functions, values and
gradients, ties included. With edge features the layers call the shared functions directly.

Since eq. (17) (paper variant) and eq. (19) give one denominator per target node, the layers divide
by it per node and apply the factor :math:`\alpha / c_i` in the pass that gathers the scores per edge
(:func:`~lipgnn.nn.fused.sparse.gat_edge_scores`, :func:`~lipgnn.nn.fused.sparse.row_scale`) instead
of building an ``[E, H]`` denominator.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lipgnn.nn.fused import kernels, score_kernels
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.sparse import gather_rows, scatter_rows_sum
from lipgnn.nn.lipschitz import (
    EPS,
    REFERENCE_GAT_FACTOR,
    check_variant,
    query_sq_norm_per_head,
    safe_sqrt,
)

__all__ = [
    "gat_denominator_csr",
    "gat_node_denominator_csr",
    "neighbour_max_csr",
    "transformer_denominator_csr",
    "transformer_scale_csr",
]


class _NeighbourMax(torch.autograd.Function):
    """``m_i = max_{j ∈ N(i)} s_j`` for per-node values ``s >= 0`` (``[N_src, K]`` → ``[N_dst, K]``,
    0 for targets without edges): the gather + scatter max of the shared functions in one
    function. Backward sends ``∂L/∂m_i`` to the maximising edges, split evenly between tied ones
    (as the shared functions' scatter max does), and sums them per source node."""

    @staticmethod
    def forward(ctx, s: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        if kernels.available(s):
            m, arg, count = score_kernels.neighbour_max(s, graph.rowptr, graph.col, graph.num_dst)
            ctx.compiled = True
            ctx.save_for_backward(s, m, arg, count)
            return m
        ctx.compiled = False
        s_edge = gather_rows(s, graph.col)
        # The inputs are norms (>= 0), so initial=0 gives the empty rows their 0 directly.
        m = torch.segment_reduce(s_edge, "max", offsets=graph.rowptr, initial=0.0)
        ctx.save_for_backward(s_edge, m)
        return m

    @staticmethod
    def backward(ctx, grad_m: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        if ctx.compiled:
            s, m, arg, count = ctx.saved_tensors
            return score_kernels.neighbour_max_backward(grad_m, s, m, arg, count, graph.rowptr, graph.col), None
        s_edge, m = ctx.saved_tensors
        # 1 on the maximising edges, else 0: m_i - s_e >= 0, so 1 - sign(m_i - s_e) is that indicator
        # (float arithmetic; the boolean eq/where/nonzero kernels are several times slower on CPU).
        is_max = torch.sign(gather_rows(m, graph.row) - s_edge).neg_().add_(1)
        # Ties (several maximising edges in a row, e.g. a duplicated edge) share the gradient evenly.
        # Every non-empty row has at least one maximising edge, so if the indicator sums to the number
        # of non-empty rows there is no tie and the per-row count (one more scatter) is skipped; the
        # check reads the sum on the host, so on GPUs (no host sync) the count is always taken.
        if is_max.is_cuda or int(is_max.sum()) != graph.num_nonempty * is_max.size(1):
            ties = scatter_rows_sum(is_max, graph.row, graph.num_dst).clamp_(min=1)
            grad_m = grad_m / ties
        grad_edge = is_max.mul_(gather_rows(grad_m, graph.row))
        return scatter_rows_sum(grad_edge, graph.col, graph.num_src), None


class _MaxOfProducts(torch.autograd.Function):
    """``max{u v, u w, v w}`` (eq. (19)) on per-node ``[N, H]`` tensors (``u`` may be ``[1, H]``): a fast
    copy of :func:`lipgnn.nn.lipschitz.eq19_denominator` (without its ``+ ε²``), equal in value and
    gradient, ties included (the reference's tie rule: each of two equal arguments of a maximum gets
    half the gradient). Why: autograd's
    ``maximum`` backward runs boolean kernels (eq, where, masked_fill), several times slower on CPU
    than the float arithmetic below."""

    @staticmethod
    def forward(ctx, u: Tensor, v: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        uv, uw = u * v, u * w
        t = torch.maximum(uv, uw)
        vw = v * w
        ctx.save_for_backward(u, v, w, uv, uw, t, vw)
        return torch.maximum(t, vw)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        u, v, w, uv, uw, t, vw = ctx.saved_tensors
        # Share of max(x, y)'s gradient that goes to x: 1 if x > y, 1/2 if x == y, 0 if x < y.
        to_t = torch.sign(t - vw).mul_(0.5).add_(0.5)
        to_uv = torch.sign(uv - uw).mul_(0.5).add_(0.5)
        g_t = grad * to_t
        g_uv = g_t * to_uv
        g_uw = g_t - g_uv
        g_vw = grad - g_t
        grad_u = (g_uv * v + g_uw * w).sum_to_size(u.shape)
        grad_v = g_uv * u + g_vw * w
        grad_w = g_uw * u + g_vw * v
        return grad_u, grad_v, grad_w


def neighbour_max_csr(s: Tensor, graph: CSRGraph) -> Tensor:
    """Per-target maximum of the non-negative per-node values ``s`` (``[N_src, K]``) over the sources
    of its incoming edges, ``[N_dst, K]`` (0 for targets without edges)."""
    return _NeighbourMax.apply(s, graph)


def gat_denominator_csr(
    sq_src: Tensor, sq_dst: Tensor | None, att_src: Tensor, att_dst: Tensor | None, graph: CSRGraph,
    variant: str = "paper", eps: float = EPS,
) -> Tensor:
    r"""Eq. (17) denominators ``[E, H]`` in ``graph``'s edge order from the squared projection norms
    ``sq_src = ‖Wx_j‖²``, ``sq_dst = ‖Wx_i‖²`` (``[N, H]``; ``sq_dst=None`` without a target term):
    equal to ``lipschitz.gat_lipschitz_denominator(x_src, x_dst, att_src, att_dst, graph.edge_index)``
    without edge features.

    paper: :math:`c_i = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j \in \mathcal{N}(i)}
    \|\mathbf{W}x_j\|^2}` per target, gathered per edge; reference:
    :math:`c_{ij} = 4 \|\mathbf{a}\|_F \sqrt{\max_{k \in \mathcal{N}(i)} \|\mathbf{W}x_k\|^2 +
    \|\mathbf{W}x_j\|^2}`.
    """
    check_variant(variant)
    if variant == "paper":
        return gather_rows(gat_node_denominator_csr(sq_src, sq_dst, att_src, att_dst, graph, eps), graph.row)
    nb_max = neighbour_max_csr(sq_src, graph)  # [N_dst, H]
    att_sq = query_sq_norm_per_head(att_src, att_dst if sq_dst is not None else None)
    q = safe_sqrt(att_sq.sum(), eps)
    per_edge = gather_rows(nb_max, graph.row) + gather_rows(sq_src, graph.col)  # max_k ‖W x_k‖² + ‖W x_j‖²
    return REFERENCE_GAT_FACTOR * q * safe_sqrt(per_edge, eps) + eps


def gat_node_denominator_csr(
    sq_src: Tensor, sq_dst: Tensor | None, att_src: Tensor, att_dst: Tensor | None, graph: CSRGraph,
    eps: float = EPS,
) -> Tensor:
    r"""Eq. (17) (``variant="paper"``) per *target node*, ``[N_dst, H]``:
    :math:`c_i = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j} \|\mathbf{W}x_j\|^2} + \epsilon`
    (:func:`gat_denominator_csr` gathers it per edge)."""
    nb_max = neighbour_max_csr(sq_src, graph)  # [N_dst, H]
    att_sq = query_sq_norm_per_head(att_src, att_dst if sq_dst is not None else None)
    per_node = nb_max if sq_dst is None else nb_max + sq_dst
    return safe_sqrt(att_sq, eps) * safe_sqrt(per_node, eps) + eps


def transformer_denominator_csr(
    q_sq: Tensor, k_sq: Tensor, v_sq: Tensor, graph: CSRGraph, variant: str = "paper", eps: float = EPS
) -> Tensor:
    r"""Eq. (19) denominators per *target node* ``[N_dst, H]`` (gather with ``graph.row``) from the
    squared norms of queries, keys and values (``[N, H]`` each): equal to
    ``lipschitz.transformer_lipschitz_denominator(query[row], key[col], value[col], row)``.

    :math:`v_i = \max_{j} \|k_j\|`, :math:`w_i = \max_j \|v_j\|`, :math:`u_i = \|q_i\|` (paper) or
    :math:`u = \|Q\|_F` over the per-edge queries, i.e. :math:`\sqrt{\sum_i \deg(i) \|q_i\|^2}`
    (reference); :math:`c_i = \max\{u v_i, u w_i, v_i w_i\} + \epsilon^2` (the shared function's
    guard), and 1 for targets without in-edges (they have no scores).
    """
    check_variant(variant)
    # max_j √(s_j + ε²) = √(max_j s_j + ε²) (√ is increasing; same gradient, ties included): the
    # square roots are taken after the neighbour maxima, on the targets. Empty rows differ (0 vs ε)
    # but get c = 1 below. Two [N, H] maxima rather than one over [N, 2H]: with one head each is 1-D.
    v_i = safe_sqrt(neighbour_max_csr(k_sq, graph), eps)
    w_i = safe_sqrt(neighbour_max_csr(v_sq, graph), eps)
    if variant == "paper":
        u = safe_sqrt(q_sq, eps)
    else:
        degree = (graph.rowptr[1:] - graph.rowptr[:-1]).to(q_sq.dtype).unsqueeze(-1)
        u = safe_sqrt((q_sq * degree).sum(dim=0), eps).unsqueeze(0)
    c = _MaxOfProducts.apply(u, v_i, w_i) + eps * eps
    # A target without in-edges has v = w = 0, so c = ε² there: never used forward, but α / c's
    # gradient α / c² would overflow float32 (0 · inf = NaN). Give those rows c = 1.
    no_edges = (graph.rowptr[1:] == graph.rowptr[:-1]).unsqueeze(-1)
    return torch.where(no_edges, torch.ones_like(c), c)


class _Eq19Scale(torch.autograd.Function):
    """Eq. (19)'s ``α / c_i`` (paper variant) in one compiled per-node pass and its hand-written
    backward (:func:`lipgnn.nn.fused.score_kernels.eq19_scale`); equal in value and gradient to ``α`` divided by
    :func:`transformer_denominator_csr`, which takes about 25 small per-node operations for it."""

    @staticmethod
    def forward(ctx, q_sq: Tensor, k_max: Tensor, v_max: Tensor, graph: CSRGraph, alpha: float,  # type: ignore[override]
                eps: float) -> Tensor:
        ctx.graph, ctx.alpha, ctx.eps = graph, alpha, eps
        scale, uvw = score_kernels.eq19_scale(q_sq, k_max, v_max, graph.rowptr, alpha, eps)
        ctx.save_for_backward(uvw)
        return scale

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (uvw,) = ctx.saved_tensors
        grads = score_kernels.eq19_scale_backward(grad, uvw, ctx.graph.rowptr, ctx.alpha, ctx.eps)
        return (*grads, None, None, None)


class _NeighbourMaxPair(torch.autograd.Function):
    """:func:`neighbour_max_csr` of two inputs (GT's key and value norms) in one compiled loop over
    the rows (CPU only; the eager path takes the two maxima separately)."""

    @staticmethod
    def forward(ctx, s1: Tensor, s2: Tensor, graph: CSRGraph) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.graph = graph
        (m1, a1, c1), (m2, a2, c2) = score_kernels.neighbour_max_pair(s1, s2, graph.rowptr, graph.col, graph.num_dst)
        ctx.save_for_backward(s1, m1, a1, c1, s2, m2, a2, c2)
        return m1, m2

    @staticmethod
    def backward(ctx, g1: Tensor, g2: Tensor):  # type: ignore[override]
        s1, m1, a1, c1, s2, m2, a2, c2 = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        return (score_kernels.neighbour_max_backward(g1, s1, m1, a1, c1, graph.rowptr, graph.col),
                score_kernels.neighbour_max_backward(g2, s2, m2, a2, c2, graph.rowptr, graph.col), None)


def transformer_scale_csr(
    q_sq: Tensor, k_sq: Tensor, v_sq: Tensor, graph: CSRGraph, alpha: float, channels: int,
    variant: str = "paper", eps: float = EPS,
) -> Tensor:
    r"""The per-target factor that multiplies GT's dot products :math:`q_i^\top k_j` under
    LipschitzNorm, ``[N_dst, H]``: :math:`\alpha / c_i` (paper) or :math:`\alpha / (c_i \sqrt{d})`
    (reference, ``d = channels``), with :math:`c_i` of eq. (19) (:func:`transformer_denominator_csr`)."""
    if variant == "paper" and kernels.available(q_sq, k_sq, v_sq):
        k_max, v_max = _NeighbourMaxPair.apply(k_sq, v_sq, graph)
        return _Eq19Scale.apply(q_sq, k_max, v_max, graph, alpha, eps)
    c = transformer_denominator_csr(q_sq, k_sq, v_sq, graph, variant, eps)
    return alpha / c if variant == "paper" else alpha / (c * math.sqrt(channels))
