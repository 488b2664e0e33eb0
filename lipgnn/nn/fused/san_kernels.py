r"""Compiled CPU loops (numba) of the fused SAN attention (:mod:`lipgnn.nn.fused.san`).

Why by hand: a SAN layer on Cora (2708 nodes, hidden 32, 4 heads of width 8, ~13k edges with
self-loops) has almost no arithmetic outside its GEMMs, and eagerly each step of its attention (an
SDDMM per head, scale, row maximum, exp, row sum, divide, an SpMM per head, each again backward) is a
separate call whose dispatch, allocation and memory pass cost more than its arithmetic; torch has no
fused sparse attention for CPU.

Dot-product attention (Guan & He Table 1; TransformerConv's scores without root weight), per target
row ``i`` and head ``h``: :math:`s_e = q_{i,h}\cdot k_{j,h}/\sqrt{d}`,
:math:`a_e = \exp(s_e - m_i) / (\sum_{e'} \exp(s_{e'} - m_i) + 10^{-16})` with the row maximum
:math:`m_i` (PyG's softmax), :math:`o_{i,h} = \sum_e a_e v_{j,h}`, reading ``q``, ``k``, ``v`` from the
one ``[N, 3·H·d]`` projection: one loop forms the shifted scores, one vectorised torch ``exp_`` call
exponentiates them (numba's scalar ``exp`` took a third of the forward), a second loop normalises and
aggregates. With ``x`` given, that loop also forms :math:`r_{h,i} = \sum_e a_e x_j - x_i` and
accumulates the nonlocal energy :math:`\|P_h X - X\|^2 = \sum_i \|r_{h,i}\|^2` (Guan & He §4.1) without
storing :math:`P_h X`. The backward visits every edge once and scatters into the source rows (a serial
loop, so no races); :math:`r_{h,i}` is recomputed there instead of stored.

Loops over a head's channels are written ``for c in range(width): a[h * width + c]``: numba compiled
``for c in range(h * width, (h + 1) * width): a[c]`` about 1.8x slower here.

For float32 data with 4 heads of width 8 (``conf/model/san.yaml``'s SAN), the per-edge work runs as
vector instructions (:mod:`lipgnn.nn.fused.san_vector_kernels`): the same loops over rows and edges, each edge's
products, head sums, weight broadcasts and accumulations done on whole 32-lane rows. Other shapes and float64 take the
scalar loops, which the tests hold the vector ones equal to.

Each function here has an eager twin in :mod:`lipgnn.nn.fused.san` (CUDA tensors, no numba, or
``LIPGNN_KERNELS=eager``); the tests check both against each other and against the PyG SAN.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit_fast, _np, _zero, numba

__all__ = ["san_attention", "san_attention_backward", "vectorised"]

VEC_HEADS, VEC_WIDTH = 4, 8  # the vector loops' shape (lipgnn.nn.fused.san_vector_kernels): conf/model/san.yaml's SAN


def vectorised(qkv: Tensor, heads: int, width: int, x: Tensor | None = None) -> bool:
    """Whether :func:`san_attention` takes the vector loops for these operands: float32, 4 heads of width 8,
    and the nonlocal energy's ``x`` (if any) float32 rows of the same 32 channels."""
    if numba is None or qkv.dtype != torch.float32 or (heads, width) != (VEC_HEADS, VEC_WIDTH):
        return False
    return x is None or (x.dtype == torch.float32 and x.dim() == 2 and x.size(1) == VEC_HEADS * VEC_WIDTH)

if numba is not None:
    # Reassociated sums and fused multiply-adds let LLVM vectorise the channel loops (kernels._jit_fast); no
    # "no NaN/inf" assumptions, so a diverging run still shows its NaN.

    @_jit_fast
    def _attn_scores(rowptr, col, qkv, heads, width, scale, shifted, ninf, zero):  # pragma: no cover
        # shifted[e, h] = s_e - m_i with s_e = q_i·k_j·scale and m_i the row maximum (per head).
        # ninf, zero, scale: scalars of the data's dtype (a Python literal would make float32 data
        # compute in float64). The products are formed for all heads at once (one vectorised loop),
        # then summed per head.
        n = rowptr.shape[0] - 1
        hc = heads * width
        prod = np.empty(hc, dtype=qkv.dtype)
        best = np.empty(heads, dtype=qkv.dtype)
        for i in range(n):
            start, end = rowptr[i], rowptr[i + 1]
            for h in range(heads):
                best[h] = ninf
            for e in range(start, end):
                j = col[e]
                for t in range(hc):
                    prod[t] = qkv[i, t] * qkv[j, hc + t]
                for h in range(heads):
                    d = zero
                    for c in range(width):
                        d += prod[h * width + c]
                    d *= scale
                    shifted[e, h] = d
                    # a NaN sticks (as in torch's max), so a diverging run shows it
                    best[h] = d if (d > best[h] or d != d) else best[h]
            for e in range(start, end):
                for h in range(heads):
                    shifted[e, h] -= best[h]

    @_jit_fast
    def _attn_aggregate(rowptr, col, qkv, heads, width, alpha, out, x, energy, with_x, zero, one,
                        tiny):  # pragma: no cover
        # alpha holds exp(s - m) on entry and the softmax weights on exit (PyG's 1e-16 guard in the
        # denominator); out[i] = Σ_e a_e v_j per head; with x, energy[h] += ‖Σ_e a_e x_j - x_i‖².
        n = rowptr.shape[0] - 1
        hc = heads * width
        dim = x.shape[1]
        acc = np.empty(hc, dtype=qkv.dtype)
        wide = np.empty(hc, dtype=qkv.dtype)
        inv = np.empty(heads, dtype=qkv.dtype)
        r = np.empty((heads, dim), dtype=qkv.dtype)
        for i in range(n):
            start, end = rowptr[i], rowptr[i + 1]
            for h in range(heads):
                inv[h] = zero
            for e in range(start, end):
                for h in range(heads):
                    inv[h] += alpha[e, h]
            for h in range(heads):
                inv[h] = one / (inv[h] + tiny)
            for t in range(hc):
                acc[t] = zero
            if with_x:
                for h in range(heads):
                    for c in range(dim):
                        r[h, c] = -x[i, c]
            for e in range(start, end):
                j = col[e]
                for h in range(heads):
                    a = alpha[e, h] * inv[h]
                    alpha[e, h] = a
                    for c in range(width):
                        wide[h * width + c] = a
                for t in range(hc):
                    acc[t] += wide[t] * qkv[j, 2 * hc + t]
                if with_x:
                    for h in range(heads):
                        a = alpha[e, h]
                        for c in range(dim):
                            r[h, c] += a * x[j, c]
            for t in range(hc):
                out[i, t] = acc[t]
            if with_x:
                for h in range(heads):
                    t2 = zero
                    for c in range(dim):
                        t2 += r[h, c] * r[h, c]
                    energy[h] += t2

    @_jit_fast
    def _energy_bwd(rowptr, col, alpha, x, grad_energy, grad_alpha, grad_x, zero):  # pragma: no cover
        # Gradients of e_h = Σ_i ‖r_{h,i}‖², r_{h,i} = Σ_e a_e x_j - x_i (r recomputed, not stored), for
        # grad_energy[h] = 2 ∂L/∂e_h: grad_alpha[e, h] = 2 g_h <r_{h,i}, x_j> (written),
        # grad_x[j] += 2 g_h a_e r_{h,i}, grad_x[i] -= 2 g_h r_{h,i} (grad_x zero-initialised).
        n = rowptr.shape[0] - 1
        heads = alpha.shape[1]
        dim = x.shape[1]
        r = np.empty(dim, dtype=x.dtype)
        for i in range(n):
            start, end = rowptr[i], rowptr[i + 1]
            for h in range(heads):
                g = grad_energy[h]
                for c in range(dim):
                    r[c] = -x[i, c]
                for e in range(start, end):
                    j = col[e]
                    a = alpha[e, h]
                    for c in range(dim):
                        r[c] += a * x[j, c]
                for c in range(dim):
                    r[c] *= g
                for e in range(start, end):
                    j = col[e]
                    a = alpha[e, h]
                    d = zero
                    for c in range(dim):
                        d += r[c] * x[j, c]
                        grad_x[j, c] += a * r[c]
                    grad_alpha[e, h] = d
                for c in range(dim):
                    grad_x[i, c] -= r[c]

    @_jit_fast
    def _attn_bwd(rowptr, col, qkv, heads, width, scale, alpha, grad_out, out, grad_alpha, with_grad_alpha,
                  grad_qkv, zero):  # pragma: no cover
        # grad_qkv: zero-initialised. grad_alpha (used when with_grad_alpha): a further ∂L/∂a_e from
        # outside the aggregation (the nonlocal energy's), added before the softmax backward.
        # The softmax backward ∂s_e = a_e (∂a_e - Σ_e' a_e' ∂a_e') needs the row sum first; its
        # aggregation part is Σ_e a_e <∂o_i, v_j> = <∂o_i, o_i>, read from the saved output, so that
        # one visit of each edge does all of: ∂a_e = <∂o_i, v_j>, ∂v_j += a_e ∂o_i, ∂q_i += ∂s_e k_j / √d,
        # ∂k_j += ∂s_e q_i / √d.
        n = rowptr.shape[0] - 1
        hc = heads * width
        prod = np.empty(hc, dtype=qkv.dtype)
        wide = np.empty(hc, dtype=qkv.dtype)
        gq = np.empty(hc, dtype=qkv.dtype)
        dot = np.empty(heads, dtype=qkv.dtype)
        for i in range(n):
            start, end = rowptr[i], rowptr[i + 1]
            for t in range(hc):
                prod[t] = grad_out[i, t] * out[i, t]
            for h in range(heads):
                d = zero
                for c in range(width):
                    d += prod[h * width + c]
                dot[h] = d
            if with_grad_alpha:
                for e in range(start, end):
                    for h in range(heads):
                        dot[h] += alpha[e, h] * grad_alpha[e, h]
            for t in range(hc):
                gq[t] = zero
            for e in range(start, end):
                j = col[e]
                for h in range(heads):
                    a = alpha[e, h]
                    for c in range(width):
                        wide[h * width + c] = a
                for t in range(hc):
                    go = grad_out[i, t]
                    prod[t] = go * qkv[j, 2 * hc + t]
                    grad_qkv[j, 2 * hc + t] += wide[t] * go
                for h in range(heads):
                    g = zero
                    for c in range(width):
                        g += prod[h * width + c]
                    if with_grad_alpha:
                        g += grad_alpha[e, h]
                    g = alpha[e, h] * (g - dot[h]) * scale
                    for c in range(width):
                        wide[h * width + c] = g
                for t in range(hc):
                    gq[t] += wide[t] * qkv[j, hc + t]
                    grad_qkv[j, hc + t] += wide[t] * qkv[i, t]
            for t in range(hc):
                grad_qkv[i, t] += gq[t]

    from lipgnn.nn.fused.san_vector_kernels import attn_aggregate_vec as _attn_aggregate_vec
    from lipgnn.nn.fused.san_vector_kernels import attn_bwd_vec as _attn_bwd_vec
    from lipgnn.nn.fused.san_vector_kernels import attn_scores_vec as _attn_scores_vec
    from lipgnn.nn.fused.san_vector_kernels import energy_bwd_vec as _energy_bwd_vec


def san_attention(qkv: Tensor, rowptr: Tensor, col: Tensor, heads: int, width: int, scale: float,
                  x: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(out [N, H·d], alpha [E, H], energy [H])`` from ``qkv`` ``[N, 3·H·d]`` (q, k, v side by side,
    heads-major within each) on the CSR ``(rowptr, col)``; ``energy`` is :math:`\\|P_h X - X\\|^2` for
    ``x`` ``[N, D]`` (zeros without ``x``). The exponentials are one vectorised torch call between the
    two loops (numba's scalar ``exp`` took a third of the forward)."""
    n = rowptr.numel() - 1
    q, rp, cl = _np(qkv), _np(rowptr), _np(col)
    z = _zero(qkv)
    alpha = qkv.new_empty(col.numel(), heads)
    vec = vectorised(qkv, heads, width, x)
    if vec:
        _attn_scores_vec(rp, cl, q, z + scale, alpha.numpy(), z - np.inf)
    else:
        _attn_scores(rp, cl, q, heads, width, z + scale, alpha.numpy(), z - np.inf, z)
    alpha.exp_()
    out = qkv.new_empty(n, heads * width)
    energy = torch.zeros(heads, dtype=torch.float64)  # a sum over all nodes: accumulated in float64
    xx = _np(x) if x is not None else np.zeros((1, 1), dtype=q.dtype)
    if vec:
        _attn_aggregate_vec(rp, cl, q, alpha.numpy(), out.numpy(), xx, energy.numpy(), x is not None, z, z + 1,
                            z + 1e-16)
    else:
        _attn_aggregate(rp, cl, q, heads, width, alpha.numpy(), out.numpy(), xx, energy.numpy(), x is not None, z,
                        z + 1, z + 1e-16)
    return out, alpha, energy.to(qkv.dtype)


def san_attention_backward(grad_out: Tensor, qkv: Tensor, alpha: Tensor, out: Tensor, rowptr: Tensor, col: Tensor,
                           heads: int, width: int, scale: float, x: Tensor | None,
                           grad_energy: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``(∂L/∂qkv, ∂L/∂x)`` of :func:`san_attention` (``None`` for ``x`` without ``x`` or ``grad_energy``),
    from its saved ``alpha`` and ``out``."""
    z = _zero(qkv)
    rp, cl, al = _np(rowptr), _np(col), _np(alpha)
    grad_x = grad_alpha = None
    if x is not None and grad_energy is not None:
        grad_x = torch.zeros(x.shape, dtype=x.dtype)
        grad_alpha = alpha.new_empty(alpha.shape)
        if vectorised(qkv, heads, width, x):
            _energy_bwd_vec(rp, cl, al, _np(x), _np(2 * grad_energy.to(x.dtype)), grad_alpha.numpy(), grad_x.numpy())
        else:
            _energy_bwd(rp, cl, al, _np(x), _np(2 * grad_energy.to(x.dtype)), grad_alpha.numpy(), grad_x.numpy(), z)
    grad_qkv = torch.zeros(qkv.shape, dtype=qkv.dtype)
    if vectorised(qkv, heads, width):
        # without a weights' gradient the vector loop reads one zero row (stride 0)
        ga = grad_alpha.numpy() if grad_alpha is not None else np.zeros((1, heads), dtype=al.dtype)
        _attn_bwd_vec(rp, cl, _np(qkv), z + scale, al, _np(grad_out), _np(out), ga, grad_alpha is not None,
                      grad_qkv.numpy(), z)
    else:
        ga = grad_alpha.numpy() if grad_alpha is not None else al
        _attn_bwd(rp, cl, _np(qkv), heads, width, z + scale, al, _np(grad_out), _np(out), ga, grad_alpha is not None,
                  grad_qkv.numpy(), z)
    return grad_qkv, grad_x
