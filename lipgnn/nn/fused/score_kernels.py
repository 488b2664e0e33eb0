r"""Compiled CPU loops (numba) of the attention scores and LipschitzNorm's denominators (eq. (17)/(19)):
what :mod:`lipgnn.nn.fused.lipschitz_csr`, :mod:`lipgnn.nn.fused.norms`, :mod:`lipgnn.nn.fused.sparse` and the
fused GAT layers call.

- **Neighbour maximum** :math:`m_i = \max_{j \in \mathcal{N}(i)} s_j` (eq. (17)/(19)). Eagerly it
  is a gather to the edges and a segment max forward, and four more edge-sized passes backward to find
  the maximising edges again: torch has no segment *arg*max. ``torch_scatter``'s ``scatter_max`` has
  one, but it cannot be installed everywhere and gives tied edges no shared gradient. Here one loop
  over the CSR rows finds the maximum, its source and the number of tied sources; the backward is a
  node-sized scatter. PubMed, 1 thread: 1.7 → 0.8 ms forward + backward.
- **Eq. (19)'s per-target factor** :math:`\alpha / \max\{u v, u w, v w\}`: one per-node loop instead
  of about 25 small per-node tensor operations, forward and backward.
- **GAT's node terms** (``a_src·Wx``, ``a_dst·Wx`` and, for eq. (17), ``‖Wx‖²``) and their
  gradients: one pass over ``Wx`` instead of a GEMM plus a norm pass. The backward pass also
  accumulates the attention vectors' gradient.
- **Squared norms** of eq. (17)/(19) and their gradient ``2 g x``, skipping the rows whose gradient
  is zero (eq. (19) reads key/value norms only through neighbour maxima).
- **Per-edge scores from per-node terms**: GAT's ``(a_src[j] + a_dst[i]) k_i`` (``k`` is eq. (17)'s
  per-target factor, or absent without LipschitzNorm) and GT's ``s_e k_i``. Each is one loop over the
  edges instead of two or three gathers forward and up to three scatters backward.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk
next to this file); each has an eager twin in the module that calls it, which runs where
:func:`lipgnn.nn.fused.kernels.available` says no (CUDA tensors, no numba, ``LIPGNN_KERNELS=eager``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit, _jit_fast, _np, _zero, numba

__all__ = [
    "add_sq_norm_grad_", "eq19_scale", "eq19_scale_backward", "gat_edge_scores", "gat_edge_scores_backward",
    "gat_node_terms", "gat_node_terms_backward", "neighbour_max", "neighbour_max_backward", "neighbour_max_pair",
    "row_scale", "row_scale_backward", "sq_norm",
]


if numba is not None:
    # Loops over edges keep the head loop outermost: with the per-edge head loop innermost, rows of
    # ~5 edges and one head spend most of their time in loop overhead (measured 3-4x slower).

    @_jit
    def _nmax_fwd(rowptr, col, s, m, arg, count, zero):  # pragma: no cover - compiled
        n_dst, k_dim = m.shape
        for k in range(k_dim):
            for i in range(n_dst):
                start, end = rowptr[i], rowptr[i + 1]
                best = zero  # the eager path's initial=0 (the values are norms, >= 0)
                for e in range(start, end):
                    v = s[col[e], k]
                    best = v if (v > best or v != v) else best  # a NaN sticks, as in torch's max
                # A second pass over the (cached) row finds the maximiser and its ties; one branchy
                # pass that tracks both is slower (a misprediction at every new running maximum).
                where, ties = -1, 0
                for e in range(start, end):
                    j = col[e]
                    hit = s[j, k] == best
                    ties += hit
                    where = j if hit else where
                m[i, k] = best
                arg[i, k] = where
                count[i, k] = ties

    @_jit
    def _nmax_pair_fwd(rowptr, col, s1, s2, m1, m2, arg1, arg2, count1, count2, zero):  # pragma: no cover
        # _nmax_fwd for two inputs in the same row passes (GT's key and value norms): the row
        # structure, the column indices and the loop overhead are shared.
        n_dst, k_dim = m1.shape
        for k in range(k_dim):
            for i in range(n_dst):
                start, end = rowptr[i], rowptr[i + 1]
                b1, b2 = zero, zero
                for e in range(start, end):
                    j = col[e]
                    v1, v2 = s1[j, k], s2[j, k]
                    b1 = v1 if (v1 > b1 or v1 != v1) else b1
                    b2 = v2 if (v2 > b2 or v2 != v2) else b2
                w1, w2, t1, t2 = -1, -1, 0, 0
                for e in range(start, end):
                    j = col[e]
                    h1, h2 = s1[j, k] == b1, s2[j, k] == b2
                    t1 += h1
                    t2 += h2
                    w1 = j if h1 else w1
                    w2 = j if h2 else w2
                m1[i, k], arg1[i, k], count1[i, k] = b1, w1, t1
                m2[i, k], arg2[i, k], count2[i, k] = b2, w2, t2

    @_jit
    def _nmax_bwd(rowptr, col, s, m, arg, count, grad_m, grad_s):  # pragma: no cover - compiled
        n_dst, k_dim = m.shape
        for i in range(n_dst):
            for k in range(k_dim):
                c = count[i, k]
                if c == 1:
                    grad_s[arg[i, k], k] += grad_m[i, k]
                elif c > 1:
                    share = grad_m[i, k] / c
                    for e in range(rowptr[i], rowptr[i + 1]):
                        if s[col[e], k] == m[i, k]:
                            grad_s[col[e], k] += share

    @_jit_fast
    def _sq_norm(x, out, zero):  # pragma: no cover - compiled
        n, h_dim, c_dim = x.shape
        for i in range(n):
            for h in range(h_dim):
                acc = zero
                for c in range(c_dim):
                    acc += x[i, h, c] * x[i, h, c]
                out[i, h] = acc

    @_jit_fast
    def _add_sq_norm_grad(grad_x, x, grad_sq):  # pragma: no cover - compiled
        n, h_dim, c_dim = x.shape
        for i in range(n):
            for h in range(h_dim):
                g = grad_sq[i, h]
                if g != 0:
                    g2 = g + g
                    for c in range(c_dim):
                        grad_x[i, h, c] += g2 * x[i, h, c]

    @_jit_fast
    def _gat_node_terms(x, att_src, att_dst, both, sq, with_sq, zero):  # pragma: no cover - compiled
        n, h_dim, c_dim = x.shape
        for i in range(n):
            for h in range(h_dim):
                a, b, s = zero, zero, zero
                for c in range(c_dim):
                    v = x[i, h, c]
                    a += v * att_src[h, c]
                    b += v * att_dst[h, c]
                    s += v * v
                both[i, h, 0] = a
                both[i, h, 1] = b
                if with_sq:
                    sq[i, h] = s

    @_jit_fast
    def _gat_node_terms_bwd(grad_x, x, att_src, att_dst, grad_both, grad_sq, with_sq,
                            grad_att_src, grad_att_dst, with_att, zero):  # pragma: no cover - compiled
        n, h_dim, c_dim = x.shape
        for i in range(n):
            for h in range(h_dim):
                g0, g1 = grad_both[i, h, 0], grad_both[i, h, 1]
                g2 = grad_sq[i, h] + grad_sq[i, h] if with_sq else zero
                for c in range(c_dim):
                    v = x[i, h, c]
                    grad_x[i, h, c] += g0 * att_src[h, c] + g1 * att_dst[h, c] + g2 * v
                    if with_att:
                        grad_att_src[h, c] += g0 * v
                        grad_att_dst[h, c] += g1 * v

    @_jit
    def _gat_edge_scores(row, col, a_src, a_dst, k, with_k, out):  # pragma: no cover - compiled
        n_edges, h_dim = out.shape
        for h in range(h_dim):
            for e in range(n_edges):
                i = row[e]
                z = a_src[col[e], h] + a_dst[i, h]
                out[e, h] = z * k[i, h] if with_k else z

    @_jit
    def _gat_edge_scores_bwd(row, col, a_src, a_dst, k, with_k, grad, grad_src, grad_dst,
                             grad_k):  # pragma: no cover - compiled
        n_edges, h_dim = grad.shape
        for h in range(h_dim):
            for e in range(n_edges):
                i, j = row[e], col[e]
                g = grad[e, h]
                if with_k:
                    grad_k[i, h] += g * (a_src[j, h] + a_dst[i, h])
                    g = g * k[i, h]
                grad_src[j, h] += g
                grad_dst[i, h] += g

    @_jit
    def _row_scale(row, s, k, out):  # pragma: no cover - compiled
        n_edges, h_dim = s.shape
        for h in range(h_dim):
            for e in range(n_edges):
                out[e, h] = s[e, h] * k[row[e], h]

    @_jit
    def _row_scale_bwd(row, s, k, grad, grad_s, grad_k):  # pragma: no cover - compiled
        n_edges, h_dim = s.shape
        for h in range(h_dim):
            for e in range(n_edges):
                i = row[e]
                g = grad[e, h]
                grad_s[e, h] = g * k[i, h]
                grad_k[i, h] += g * s[e, h]

    @_jit
    def _eq19_scale(rowptr, q_sq, k_max, v_max, alpha, eps, scale, u_out, v_out, w_out):  # pragma: no cover
        n_dst, h_dim = scale.shape
        e2 = eps * eps
        for i in range(n_dst):
            empty = rowptr[i + 1] == rowptr[i]
            for h in range(h_dim):
                u = np.sqrt(q_sq[i, h] + e2)
                v = np.sqrt(k_max[i, h] + e2)
                w = np.sqrt(v_max[i, h] + e2)
                c = max(max(u * v, u * w), v * w) + e2
                scale[i, h] = alpha if empty else alpha / c
                u_out[i, h], v_out[i, h], w_out[i, h] = u, v, w

    @_jit
    def _eq19_scale_bwd(rowptr, u_in, v_in, w_in, alpha, eps, half, grad, g_q, g_k, g_v):  # pragma: no cover
        n_dst, h_dim = grad.shape
        e2 = eps * eps
        for i in range(n_dst):
            empty = rowptr[i + 1] == rowptr[i]
            for h in range(h_dim):
                if empty:
                    g_q[i, h] = g_k[i, h] = g_v[i, h] = 0
                    continue
                u, v, w = u_in[i, h], v_in[i, h], w_in[i, h]
                uv, uw, vw = u * v, u * w, v * w
                t = max(uv, uw)
                c = max(t, vw) + e2
                g_c = -grad[i, h] * alpha / (c * c)
                # max(x, y) sends its gradient to the larger argument, half to each when equal
                # (torch.maximum's rule, as in the eager _MaxOfProducts)
                g_t = g_c if t > vw else (g_c * half if t == vw else g_c * 0)
                g_uv = g_t if uv > uw else (g_t * half if uv == uw else g_t * 0)
                g_uw = g_t - g_uv
                g_vw = g_c - g_t
                # d√(x + ε²)/dx = 1 / (2√(x + ε²))
                g_q[i, h] = (g_uv * v + g_uw * w) * half / u
                g_k[i, h] = (g_uv * u + g_vw * w) * half / v
                g_v[i, h] = (g_uw * u + g_vw * v) * half / w


def eq19_scale(q_sq: Tensor, k_max: Tensor, v_max: Tensor, rowptr: Tensor, alpha: float,
               eps: float) -> tuple[Tensor, Tensor]:
    """Eq. (19)'s per-target factor ``α / c_i`` (paper variant) from ``‖q_i‖²`` and the neighbour
    maxima of ``‖k_j‖²``, ``‖v_j‖²`` (``[N_dst, H]``): ``u, v, w = √(· + ε²)``,
    ``c_i = max{u v, u w, v w} + ε²``; ``α`` on targets without in-edges (they have no scores).
    Also returns ``(u, v, w)`` stacked ``[3, N_dst, H]`` for the backward."""
    scale = q_sq.new_empty(q_sq.shape)
    uvw = q_sq.new_empty(3, *q_sq.shape)
    one = _zero(q_sq) + 1
    _eq19_scale(_np(rowptr), _np(q_sq), _np(k_max), _np(v_max), one * alpha, one * eps, scale.numpy(),
                *uvw.numpy())
    return scale, uvw


def eq19_scale_backward(grad: Tensor, uvw: Tensor, rowptr: Tensor, alpha: float,
                        eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of :func:`eq19_scale` with respect to ``q_sq``, ``k_max``, ``v_max``."""
    g_q, g_k, g_v = (grad.new_empty(grad.shape) for _ in range(3))
    one = _zero(grad) + 1
    _eq19_scale_bwd(_np(rowptr), *uvw.numpy(), one * alpha, one * eps, one / 2, _np(grad),
                    g_q.numpy(), g_k.numpy(), g_v.numpy())
    return g_q, g_k, g_v


def row_scale(s: Tensor, k: Tensor, row: Tensor) -> Tensor:
    """``s_e · k_{row_e}`` (``s`` ``[E, H]``, ``k`` ``[N_dst, H]``, ``row`` the target of each edge)."""
    out = s.new_empty(s.shape)
    _row_scale(_np(row), _np(s), _np(k), out.numpy())
    return out


def row_scale_backward(grad: Tensor, s: Tensor, k: Tensor, row: Tensor) -> tuple[Tensor, Tensor]:
    """``(∂L/∂s, ∂L/∂k)`` of :func:`row_scale`."""
    grad_s, grad_k = s.new_empty(s.shape), torch.zeros(k.shape, dtype=k.dtype)
    _row_scale_bwd(_np(row), _np(s), _np(k), _np(grad), grad_s.numpy(), grad_k.numpy())
    return grad_s, grad_k


def neighbour_max(s: Tensor, rowptr: Tensor, col: Tensor, num_dst: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(m, arg, count)`` for ``s`` ``[N_src, K]``: per target row of the CSR ``(rowptr, col)`` the
    maximum over its sources (0 for an empty row), the first maximising source (-1 if none) and the
    number of sources attaining it."""
    m = s.new_empty(num_dst, s.size(1))
    arg = torch.empty(num_dst, s.size(1), dtype=torch.int64)
    count = torch.empty(num_dst, s.size(1), dtype=torch.int32)
    _nmax_fwd(_np(rowptr), _np(col), _np(s), m.numpy(), arg.numpy(), count.numpy(), _zero(s))
    return m, arg, count


def neighbour_max_pair(s1: Tensor, s2: Tensor, rowptr: Tensor, col: Tensor,
                       num_dst: int) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]:
    """:func:`neighbour_max` of two ``[N_src, K]`` inputs over the same graph in one loop."""
    outs = []
    for s in (s1, s2):
        outs.append((s.new_empty(num_dst, s.size(1)), torch.empty(num_dst, s.size(1), dtype=torch.int64),
                     torch.empty(num_dst, s.size(1), dtype=torch.int32)))
    (m1, a1, c1), (m2, a2, c2) = outs
    _nmax_pair_fwd(_np(rowptr), _np(col), _np(s1), _np(s2), m1.numpy(), m2.numpy(), a1.numpy(), a2.numpy(),
                   c1.numpy(), c2.numpy(), _zero(s1))
    return (m1, a1, c1), (m2, a2, c2)


def neighbour_max_backward(grad_m: Tensor, s: Tensor, m: Tensor, arg: Tensor, count: Tensor,
                           rowptr: Tensor, col: Tensor) -> Tensor:
    """``∂L/∂s`` from ``∂L/∂m``: each row's gradient to its maximising source, split evenly between
    tied sources (as the eager path and the shared functions' scatter max do)."""
    grad_s = torch.zeros(s.shape, dtype=s.dtype)
    _nmax_bwd(_np(rowptr), _np(col), _np(s), _np(m), _np(arg), _np(count), _np(grad_m), grad_s.numpy())
    return grad_s


def sq_norm(x: Tensor) -> Tensor:
    """``‖x‖²`` over the last dim of ``[N, H, C]`` → ``[N, H]``."""
    out = x.new_empty(x.shape[:2])
    _sq_norm(_np(x), out.numpy(), _zero(x))
    return out


def add_sq_norm_grad_(grad_x: Tensor, x: Tensor, grad_sq: Tensor) -> Tensor:
    """``grad_x += 2 grad_sq x`` in place (contiguous ``[N, H, C]`` ``grad_x``), rows with a zero
    ``grad_sq`` untouched."""
    _add_sq_norm_grad(grad_x.detach().numpy(), _np(x), _np(grad_sq))
    return grad_x


def gat_node_terms(x: Tensor, att_src: Tensor, att_dst: Tensor, with_sq: bool) -> tuple[Tensor, Tensor | None]:
    """``both [N, H, 2]`` (``a_src·x``, ``a_dst·x`` per head, ``att_*`` ``[H, C]``) and, if asked,
    ``‖x‖² [N, H]``, in one pass over ``x`` ``[N, H, C]``."""
    both = x.new_empty(x.size(0), x.size(1), 2)
    sq = x.new_empty(x.shape[:2]) if with_sq else x.new_empty(1, 1)
    _gat_node_terms(_np(x), _np(att_src), _np(att_dst), both.numpy(), sq.numpy(), with_sq, _zero(x))
    return both, (sq if with_sq else None)


def gat_node_terms_backward(grad_x: Tensor, x: Tensor, att_src: Tensor, att_dst: Tensor, grad_both: Tensor,
                            grad_sq: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Adds the score (and norm) gradient to the contiguous ``grad_x`` in place; returns it and the
    gradients of ``att_src``, ``att_dst`` (``[H, C]``)."""
    ga_src, ga_dst = torch.zeros_like(att_src), torch.zeros_like(att_dst)
    with_sq = grad_sq is not None
    # Several narrow heads: the loop's accumulation into [H, C] goes through memory for every element
    # (2x the loop's time on Fig. 5's 4 x 8 heads); there the attention vectors' gradients
    # Σ_i g[i, h] x[i, h, :] are one batched product instead, from ~2k nodes on (4 x 8 heads: 0.28 → 0.24 ms
    # at 4,096 nodes, 2.3 → 1.5 ms at 31,744; below, the product's fixed cost loses: 0.076 → 0.098 ms at 960).
    # One wide head keeps the loop (as fast).
    with_att = x.size(1) == 1 or x.size(0) < 2048
    _gat_node_terms_bwd(grad_x.detach().numpy(), _np(x), _np(att_src), _np(att_dst), _np(grad_both),
                        _np(grad_sq) if with_sq else np.zeros((1, 1), grad_x.numpy().dtype), with_sq,
                        ga_src.numpy(), ga_dst.numpy(), with_att, _zero(x))
    if not with_att:
        both = torch.einsum("nhc,nhk->khc", x.detach(), grad_both.detach())
        ga_src, ga_dst = both[0], both[1]
    return grad_x, ga_src, ga_dst


def gat_edge_scores(a_src: Tensor, a_dst: Tensor, k: Tensor | None, row: Tensor, col: Tensor) -> Tensor:
    """Per edge ``j → i`` (``row``, ``col``): ``(a_src[j] + a_dst[i]) · k[i]`` (or without ``k``), ``[E, H]``."""
    out = a_src.new_empty(col.numel(), a_src.size(1))
    kk = _np(k) if k is not None else np.zeros((1, 1), out.numpy().dtype)
    _gat_edge_scores(_np(row), _np(col), _np(a_src), _np(a_dst), kk, k is not None, out.numpy())
    return out


def gat_edge_scores_backward(grad: Tensor, a_src: Tensor, a_dst: Tensor, k: Tensor | None, row: Tensor,
                             col: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(∂L/∂a_src, ∂L/∂a_dst, ∂L/∂k)`` of :func:`gat_edge_scores` (``None`` for ``k`` without it)."""
    grad_src = torch.zeros(a_src.shape, dtype=a_src.dtype)
    grad_dst = torch.zeros(a_dst.shape, dtype=a_dst.dtype)
    grad_k = torch.zeros(a_dst.shape if k is not None else (1, 1), dtype=a_dst.dtype)
    kk = _np(k) if k is not None else np.zeros((1, 1), grad_dst.numpy().dtype)
    _gat_edge_scores_bwd(_np(row), _np(col), _np(a_src), _np(a_dst), kk, k is not None, _np(grad),
                         grad_src.numpy(), grad_dst.numpy(), grad_k.numpy())
    return grad_src, grad_dst, (grad_k if k is not None else None)
