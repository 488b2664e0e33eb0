r"""Compiled CPU loops (numba) of the per-element passes every deep block shares: dropout and ELU (alone and
finishing a CSR aggregation) (:mod:`lipgnn.nn.fused.dropout`, :mod:`~lipgnn.nn.fused.activation`,
:mod:`~lipgnn.nn.fused.sparse`, and the row code that the GAT loops of :mod:`~lipgnn.nn.fused.gat_kernels` reuse).

- **Dropout** (:mod:`lipgnn.nn.fused.dropout`): ``F.dropout`` draws a float per element with
  torch's generator, stores a mask and multiplies (15 ms on PubMed's ``[19717, 64]``, one thread,
  more than a whole fused layer forward). Here a counter-based generator (SplitMix64, 32 bits per
  element) decides each element in the loop that writes the output, and the backward regenerates the
  same decisions from the seed, so no mask is stored.

- **ELU** (the activation between fused layers, :mod:`lipgnn.nn.fused.activation`): torch's CPU kernel
  evaluates ``expm1`` with a slow vectorised polynomial (3.4-4.5 ms on ``[19717, 64]``, more than the
  layer's projection); a branch-free float32 ``exp`` that LLVM vectorises takes ~1.8 ms, and the
  backward reads the output only.
  The same row code finishes each row of a concatenating GAT layer's aggregation (its sum, bias and
  ELU in one pass over the CSR rows), so that sum is never written out and read back.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk
next to this file); each has an eager twin in the module that calls it, which runs where
:func:`lipgnn.nn.fused.kernels.available` says no (CUDA tensors, no numba, ``LIPGNN_KERNELS=eager``).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit, _jit_fast, _jit_inline, _np, _zero, numba

__all__ = ["bias_elu", "bias_elu_backward", "dropout_", "dropout_rows_", "spmm_bias_elu"]


if numba is not None:
    _GAMMA = np.uint64(0x9E3779B97F4A7C15)
    _MIX1 = np.uint64(0xBF58476D1CE4E5B9)
    _MIX2 = np.uint64(0x94D049BB133111EB)
    _LOW32 = np.uint64(0xFFFFFFFF)

    @_jit
    def _splitmix64(z):  # pragma: no cover - compiled
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))

    @_jit
    def _dropout(x, out, seed, threshold, scale, zero):  # pragma: no cover - compiled
        # SplitMix64: state z advances by γ, each output mix(z) decides two elements (its low and high
        # 32 bits against keep · 2^32). Selecting the factor before the multiply keeps the loop
        # branch-free (vectorised); the state is carried, not recomputed from the index (~8x faster).
        n = x.size
        z = seed
        for pair in range(n // 2):
            z = z + _GAMMA
            w = _splitmix64(z)
            a = scale if (w & _LOW32) < threshold else zero
            b = scale if (w >> np.uint64(32)) < threshold else zero
            out[2 * pair] = x[2 * pair] * a
            out[2 * pair + 1] = x[2 * pair + 1] * b
        if n % 2:
            w = _splitmix64(z + _GAMMA)
            out[n - 1] = x[n - 1] * (scale if (w & _LOW32) < threshold else zero)

    @_jit
    def _dropout_rows(x, out, rows, seed, threshold, scale, zero):  # pragma: no cover - compiled
        # ``_dropout``'s decisions for a row-permuted ``[R, C]`` array, ``C`` even: row ``i`` holds row
        # ``rows[i]`` of the array ``_dropout`` would see, which starts at pair ``rows[i]·C/2``, so the
        # state is carried along the row from ``seed + (rows[i]·C/2)γ`` as ``_dropout`` carries it.
        R, C = x.shape
        half = np.uint64(C // 2)
        for i in range(R):
            z = seed + np.uint64(rows[i]) * half * _GAMMA
            for pair in range(C // 2):
                z = z + _GAMMA
                w = _splitmix64(z)
                a = scale if (w & _LOW32) < threshold else zero
                b = scale if (w >> np.uint64(32)) < threshold else zero
                out[i, 2 * pair] = x[i, 2 * pair] * a
                out[i, 2 * pair + 1] = x[i, 2 * pair + 1] * b

    @_jit
    def _dropout_index(x, out, index, seed, threshold, scale, zero):  # pragma: no cover - compiled
        # Element k takes the decision of flat index n = index[k] in ``_dropout``: half n % 2 of
        # mix(seed + (n // 2 + 1)γ). Branch-free, so LLVM vectorises it (narrow rows: attention dropout).
        for k in range(x.size):
            n = np.uint64(index[k])
            w = _splitmix64(seed + ((n >> np.uint64(1)) + np.uint64(1)) * _GAMMA)
            bits = (w >> ((n & np.uint64(1)) * np.uint64(32))) & _LOW32
            out[k] = x[k] * (scale if bits < threshold else zero)

    # exp for x <= 0 in float32 without a libm call, so that LLVM vectorises the loop (numba's np.exp
    # calls the scalar expf: ~4x slower than torch's ELU, ~6x slower than this). Cephes' expf: x = k ln2 + r,
    # |r| <= ln2 / 2, a degree-7 polynomial for e^r (<= 2 ulp), 2^k from the exponent bits. Inputs are
    # clamped to [-87, 0] (e^-87 is still a normal float32; ELU only needs the negative side).

    @_jit_inline
    def _bias_elu_row(src, bias, dst, alpha, one, h, poly, bits, pow2):  # pragma: no cover - compiled
        # dst[t] = ELU(src[t] + bias[t]) for one float32 row (h, poly, bits and its float32 view pow2 are
        # row-sized scratch that stays in L1; dst may be src)
        f_dim = src.shape[0]
        zero, lo, half = one - one, one * np.float32(-87.0), one * np.float32(0.5)
        log2e, ln2_hi, ln2_lo = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)
        p0, p1, p2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
        p3, p4, p5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
        for t in range(f_dim):
            u = src[t] + bias[t]
            h[t] = u
            v = u if u < zero else zero
            v = v if v > lo else lo
            kn = np.int32(half - v * log2e)  # -k = -round(v / ln2), truncating a positive number
            kf = np.float32(kn)
            r = v + kf * ln2_hi + kf * ln2_lo
            p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
            poly[t] = p * r * r + r + one
            bits[t] = (np.int32(127) - kn) << np.int32(23)  # the float32 2^k
        for t in range(f_dim):
            u = h[t]
            # written so that a NaN input stays NaN (it is not <= 0)
            dst[t] = alpha * (poly[t] * pow2[t] - one) if u <= zero else u

    @_jit_inline
    def _elu_row_scratch(f_dim):  # pragma: no cover - compiled
        # the row-sized scratch _bias_elu_row takes, (h, poly, bits, pow2): pow2 is the float32 view of bits
        bits = np.empty(f_dim, np.int32)
        return np.empty(f_dim, np.float32), np.empty(f_dim, np.float32), bits, bits.view(np.float32)

    @_jit_fast
    def _bias_elu(x, bias, out, alpha, one):  # pragma: no cover - compiled
        # out[i, t] = ELU(x[i, t] + bias[t]) for float32 [R, F] x, out
        r_dim, f_dim = x.shape
        h, poly, bits, pow2 = _elu_row_scratch(f_dim)
        for i in range(r_dim):
            _bias_elu_row(x[i], bias, out[i], alpha, one, h, poly, bits, pow2)

    @_jit_fast
    def _spmm_bias_elu(rowptr, col, values, x, bias, out, alpha, one):  # pragma: no cover - compiled
        # out[i, h C + c] = ELU(sum_e values[e, h] x[col[e], h, c] + bias[h C + c]) over the edges e of row i:
        # _spmm_heads with the bias and ELU applied to each row while it is in cache (float32; x [N, H, C],
        # out [N, H C] contiguous)
        n_dst, f_dim = out.shape
        h_dim, c_dim = x.shape[1], x.shape[2]
        zero = one - one
        acc = np.empty(f_dim, np.float32)
        h, poly, bits, pow2 = _elu_row_scratch(f_dim)
        for i in range(n_dst):
            for t in range(f_dim):
                acc[t] = zero
            for e in range(rowptr[i], rowptr[i + 1]):
                j = col[e]
                for hd in range(h_dim):
                    v = values[e, hd]
                    base = hd * c_dim
                    for c in range(c_dim):
                        acc[base + c] += v * x[j, hd, c]
            _bias_elu_row(acc, bias, out[i], alpha, one, h, poly, bits, pow2)

    @_jit_fast
    def _bias_elu_bwd(grad, y, out, grad_bias, with_bias, alpha):  # pragma: no cover - compiled
        # d ELU / dx = 1 for x > 0, alpha e^x = y + alpha otherwise, from the output y (torch's rule);
        # the bias gradient (column sums) accumulates in float64 (grad_bias), rows in order
        r_dim, f_dim = grad.shape
        for i in range(r_dim):
            for t in range(f_dim):
                v = y[i, t]
                g = grad[i, t] * (v + alpha) if v <= 0 else grad[i, t]
                out[i, t] = g
                if with_bias:
                    grad_bias[t] += g



def bias_elu(x: Tensor, bias: Tensor | None, alpha: float) -> Tensor:
    """``ELU(x + bias)`` (``x`` float32 ``[R, F]``, ``bias`` ``[F]`` or ``None``) → a new tensor: ``u`` for
    ``u > 0``, ``alpha (e^u - 1)`` otherwise; NaN stays NaN."""
    out = x.new_empty(x.shape)
    b = _np(bias) if bias is not None else np.zeros(x.size(1), np.float32)
    _bias_elu(_np(x), b, out.numpy(), _zero(x) + alpha, _zero(x) + 1)
    return out


def spmm_bias_elu(values: Tensor, x: Tensor, rowptr: Tensor, col: Tensor, bias: Tensor | None,
                  alpha: float) -> Tensor:
    """``ELU(out + bias)`` with ``out`` :func:`spmm_heads`'s ``[num_dst, H, C]`` sum flattened to ``[num_dst,
    H·C]`` (float32; ``bias`` ``[H·C]`` or ``None``) → a new tensor, each row finished while it is in cache
    instead of a second pass over ``[N, H·C]``."""
    out = x.new_empty(rowptr.numel() - 1, x.size(1) * x.size(2))
    b = _np(bias) if bias is not None else np.zeros(out.size(1), np.float32)
    _spmm_bias_elu(_np(rowptr), _np(col), _np(values), _np(x), b, out.numpy(), _zero(x) + alpha, _zero(x) + 1)
    return out


def bias_elu_backward(grad: Tensor, y: Tensor, alpha: float, with_bias: bool) -> tuple[Tensor, Tensor | None]:
    """``(∂L/∂x, ∂L/∂bias)`` of :func:`bias_elu` from its output ``y``: ``grad`` where ``y > 0``,
    ``grad (y + alpha)`` elsewhere, and its column sums (``None`` without a bias)."""
    out = grad.new_empty(grad.shape)
    grad_bias = np.zeros(grad.size(1) if with_bias else 1, np.float64)
    _bias_elu_bwd(_np(grad), _np(y), out.numpy(), grad_bias, with_bias, _zero(y) + alpha)
    return out, (torch.from_numpy(grad_bias).to(grad.dtype) if with_bias else None)


def dropout_(x: Tensor, out: Tensor, seed: int, keep: float) -> Tensor:
    """``out = x · m / keep`` with ``m_n ~ Bernoulli(keep)`` decided by SplitMix64 from ``(seed, n)``
    (``x``, ``out`` contiguous, ``n`` the flat index); the same ``seed`` gives the same ``m``."""
    _dropout(_np(x).reshape(-1), out.detach().numpy().reshape(-1), *_dropout_args(x, seed, keep))
    return out


def _dropout_args(x: Tensor, seed: int, keep: float) -> tuple:
    """The compiled dropouts' trailing arguments: seed, keep threshold on 32 bits, scale, zero."""
    threshold = np.uint64(min(int(round(keep * 2.0**32)), 2**32))
    return np.uint64(seed % 2**64), threshold, (_zero(x) + 1) / keep, _zero(x)


def dropout_rows_(x: Tensor, out: Tensor, rows: Tensor, seed: int, keep: float) -> Tensor:
    """:func:`dropout_` of a row-permuted tensor: with ``x`` (``[R, ...]``, contiguous) holding row
    ``rows[i]`` of some ``x0`` in row ``i``, ``out[i] = dropout_(x0, seed, keep)[rows[i]]`` exactly, i.e.
    every element keeps the decision of its original coordinates (:mod:`lipgnn.nn.fused.locality`)."""
    rows_, width = x.size(0), x.numel() // max(x.size(0), 1)
    args = _dropout_args(x, seed, keep)
    if width % 2 == 0 and width >= 16:
        _dropout_rows(_np(x).reshape(rows_, width), out.detach().numpy().reshape(rows_, width), _np(rows), *args)
        return out
    # Narrow rows (attention weights, one entry per head): one flat index per element.
    _dropout_index(_np(x).reshape(-1), out.detach().numpy().reshape(-1), _np(_flat_index(rows, width)), *args)
    return out


_FLAT_INDEX: list = [None, 0, None]  # (weak reference to rows, width, index): every layer of a stack shares one


def _flat_index(rows: Tensor, width: int) -> Tensor:
    """``rows[i]·width + c`` for every element ``(i, c)``, flat; kept for the ``rows`` tensor last seen."""
    if width == 1:
        return rows
    ref, cached_width, index = _FLAT_INDEX
    if ref is None or ref() is not rows or cached_width != width:
        index = (rows.view(-1, 1) * width + torch.arange(width)).view(-1)
        _FLAT_INDEX[:] = [weakref.ref(rows), width, index]
    return index
