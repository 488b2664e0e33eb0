r"""Compiled CPU loops (numba) of GGNN's GRU cell (:mod:`lipgnn.nn.fused.gru`, ``model=ggnn``).

torch's CPU ``GRUCell`` runs the gates as about ten elementwise passes over ``[N, C]`` and ``[N, 3C]`` forward and
more backward, with the gate gradients concatenated from chunks; here one loop each way between the two gate GEMMs.
Its sigmoid and tanh use the float32 ``exp`` polynomial of :mod:`lipgnn.nn.fused.elementwise_kernels`' ELU.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk next to
this file); their eager twin is in the module that calls them, which runs where
:func:`lipgnn.nn.fused.kernels.available` says no (CUDA tensors, no numba, ``LIPGNN_KERNELS=eager``).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit_fast, _jit_fast_div, _np, _zero, numba

__all__ = ["gru_cell", "gru_cell_backward"]


if numba is not None:
    # GRU cell (torch.nn.GRUCell's equations, lipgnn.nn.fused.gru) from its two gate pre-activations
    # gi = W_i m + b_i, gh = W_h h + b_h ([N, 3C], gates r | z | n): one pass forward, one backward. float32
    # only: sigmoid and tanh use the Cephes exp of elementwise_kernels._bias_elu on -|a| (always <= 0):
    # sigmoid(a) = 1 / (1 + e) for a > 0, e / (1 + e) otherwise, with e = exp(-|a|);
    # tanh(a) = sign(a) (1 - e) / (1 + e), e = exp(-2|a|).

    @_jit_fast_div  # divisors 1 + e >= 1
    def _gru_cell(gi, gh, h, out, saved, one):  # pragma: no cover - compiled
        n, c3 = gi.shape
        c_dim = c3 // 3
        c2 = 2 * c_dim
        zero, lo, half, two = one - one, one * np.float32(-87.0), one * np.float32(0.5), one + one
        log2e, ln2_hi, ln2_lo = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)
        p0, p1, p2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
        p3, p4, p5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
        pre = np.empty(c2, np.float32)   # r | z pre-activations, then n's in the first C
        gate = np.empty(c2, np.float32)  # exp polynomial, then r | z
        bits = np.empty(c2, np.int32)
        pow2 = bits.view(np.float32)
        for i in range(n):
            for t in range(c2):
                a = gi[i, t] + gh[i, t]
                pre[t] = a
                u = -a if a > zero else a
                u = lo if u < lo else u  # keeps a NaN (which then stays NaN to the output)
                kn = np.int32(half - u * log2e)
                kf = np.float32(kn)
                r = u + kf * ln2_hi + kf * ln2_lo
                p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
                gate[t] = p * r * r + r + one
                bits[t] = (np.int32(127) - kn) << np.int32(23)
            for t in range(c2):
                e = gate[t] * pow2[t]
                gate[t] = (one if pre[t] > zero else e) / (one + e)
            for c in range(c_dim):
                a = gi[i, c2 + c] + gate[c] * gh[i, c2 + c]
                pre[c] = a
                u = -two * a if a > zero else two * a
                u = lo if u < lo else u  # keeps a NaN (which then stays NaN to the output)
                kn = np.int32(half - u * log2e)
                kf = np.float32(kn)
                r = u + kf * ln2_hi + kf * ln2_lo
                p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
                pre[c_dim + c] = p * r * r + r + one
                bits[c] = (np.int32(127) - kn) << np.int32(23)
            for c in range(c_dim):
                e = pre[c_dim + c] * pow2[c]
                pre[c_dim + c] = ((one - e) if pre[c] > zero else (e - one)) / (one + e)
            for c in range(c_dim):
                nn = pre[c_dim + c]
                out[i, c] = nn + gate[c_dim + c] * (h[i, c] - nn)
            for c in range(c_dim):
                saved[0, i, c] = gate[c]
            for c in range(c_dim):
                saved[1, i, c] = gate[c_dim + c]
            for c in range(c_dim):
                saved[2, i, c] = pre[c_dim + c]
            for c in range(c_dim):
                saved[3, i, c] = gh[i, c2 + c]

    @_jit_fast
    def _gru_cell_bwd(grad, h, saved, d_gi, d_gh, d_h, one):  # pragma: no cover - compiled
        # one output array per loop: with several, LLVM left the loop scalar (possible aliasing)
        n, c_dim = grad.shape
        c2 = 2 * c_dim
        for i in range(n):
            for c in range(c_dim):
                d_h[i, c] = grad[i, c] * saved[1, i, c]
            for c in range(c_dim):
                z, nn = saved[1, i, c], saved[2, i, c]
                g = grad[i, c]
                d_n = g * (one - z) * (one - nn * nn)       # through tanh
                r = saved[0, i, c]
                d_gi[i, c] = d_n * saved[3, i, c] * r * (one - r)
                d_gi[i, c_dim + c] = g * (h[i, c] - nn) * z * (one - z)  # through sigmoid
                d_gi[i, c2 + c] = d_n
            for c in range(c2):
                d_gh[i, c] = d_gi[i, c]
            for c in range(c_dim):
                d_gh[i, c2 + c] = d_gi[i, c2 + c] * saved[0, i, c]


def gru_cell(gi: Tensor, gh: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """The GRU cell's new state ``[N, C]`` from the gate pre-activations ``gi``, ``gh`` (``[N, 3C]``, float32)
    and the state ``h``, and what its backward reads: ``[4, N, C]`` = (r, z, n, the n-gate's ``gh`` part)."""
    out = h.new_empty(h.shape)
    saved = h.new_empty(4, h.size(0), h.size(1))
    _gru_cell(_np(gi), _np(gh), _np(h), out.numpy(), saved.numpy(), _zero(h) + 1)
    return out, saved


def gru_cell_backward(grad: Tensor, h: Tensor, saved: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(∂L/∂gi, ∂L/∂gh, ∂L/∂h)`` of :func:`gru_cell` (the last without the gate pre-activations' share)."""
    n, c = h.shape
    d_gi, d_gh, d_h = h.new_empty(n, 3 * c), h.new_empty(n, 3 * c), h.new_empty(n, c)
    _gru_cell_bwd(_np(grad), _np(h), _np(saved), d_gi.numpy(), d_gh.numpy(), d_h.numpy(), _zero(h) + 1)
    return d_gi, d_gh, d_h
