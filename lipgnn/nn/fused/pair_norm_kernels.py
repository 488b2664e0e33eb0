r"""Compiled CPU loops (numba) of PairNorm (:mod:`lipgnn.nn.fused.pair_norm`, ``norm=pairnorm``).

PyG's version runs about eight elementwise operations forward and more backward; on Fig. 5's small tree batches
their per-operation cost dominated. Here one pass of column sums and one output pass each way.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk next to
this file); their eager twin is in the module that calls them, which runs where
:func:`lipgnn.nn.fused.kernels.available` says no (CUDA tensors, no numba, ``LIPGNN_KERNELS=eager``).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit_fast, _np, _zero, numba

__all__ = ["pair_norm_backward", "pair_norm_forward"]


if numba is not None:
    # PairNorm (lipgnn.nn.fused.pair_norm), one call each way: column sums in float64 in one pass, then the
    # per-column and scalar factors, then one output pass. Scalars that must stay in the data's float type go
    # through one-element arrays of it (a float64 scalar would promote the output pass).

    @_jit_fast
    def _pair_norm_fwd(x, scale, eps, mean, factor, out):  # pragma: no cover - compiled
        # mean[c] = Σ_i x[i, c] / N; r = sqrt(eps + Σ_i ‖x_i‖² / N − ‖mean‖²) (returned, float64);
        # out = (x − mean) · scale / r, with factor[0] = scale / r in x's type
        n, c_dim = x.shape
        col_sum = np.zeros(c_dim, np.float64)
        col_sq = np.zeros(c_dim, np.float64)
        for i in range(n):
            for c in range(c_dim):
                v = np.float64(x[i, c])
                col_sum[c] += v
                col_sq[c] += v * v
        total_sq = 0.0
        mean_sq = 0.0
        for c in range(c_dim):
            m = col_sum[c] / n
            mean[c] = m
            total_sq += col_sq[c]
            mean_sq += m * m
        r = np.sqrt(eps + max(total_sq / n - mean_sq, 0.0))
        factor[0] = scale / r
        k = factor[0]
        for i in range(n):
            for c in range(c_dim):
                out[i, c] = (x[i, c] - mean[c]) * k
        return r

    @_jit_fast
    def _pair_norm_bwd(g, x, mean, k, r, factor, g_mean, out):  # pragma: no cover - compiled
        # D = Σ_ic g (x − mean), q = D / (N r²), g_mean = Σ_i g / N; out = k (g − g_mean − (x − mean) q), with
        # factor[0] = q in x's type
        n, c_dim = x.shape
        g_sum = np.zeros(c_dim, np.float64)
        gx_sum = np.zeros(c_dim, np.float64)
        for i in range(n):
            for c in range(c_dim):
                v = np.float64(g[i, c])
                g_sum[c] += v
                gx_sum[c] += v * (x[i, c] - mean[c])
        total = 0.0
        for c in range(c_dim):
            g_mean[c] = g_sum[c] / n
            total += gx_sum[c]
        factor[0] = total / (n * r * r)
        q = factor[0]
        for i in range(n):
            for c in range(c_dim):
                out[i, c] = k * (g[i, c] - g_mean[c] - (x[i, c] - mean[c]) * q)


def pair_norm_forward(x: Tensor, scale: float, eps: float) -> tuple[Tensor, Tensor, float, np.generic]:
    """PairNorm's ``(out, mean, r, k)``: ``out = (x − mean) k`` with the column means ``mean`` of ``x`` ``[N, C]``,
    ``r = sqrt(eps + Σ_i ‖x_i − mean‖² / N)`` and ``k = scale / r`` (in ``x``'s float type)."""
    out, mean = x.new_empty(x.shape), x.new_empty(x.size(1))
    factor = np.empty(1, dtype=_zero(x).dtype)
    r = _pair_norm_fwd(_np(x), float(scale), float(eps), mean.numpy(), factor, out.numpy())
    return out, mean, float(r), factor[0]


def pair_norm_backward(g: Tensor, x: Tensor, mean: Tensor, k: np.generic, r: float) -> Tensor:
    """PairNorm's ``∂L/∂x = k (g − ḡ − (x − mean) q)``, ``q = Σ g (x − mean) / (N r²)``, for ``g = ∂L/∂out``."""
    out, g_mean = x.new_empty(x.shape), x.new_empty(x.size(1))
    _pair_norm_bwd(_np(g), _np(x), _np(mean), k, float(r), np.empty(1, dtype=_zero(x).dtype), g_mean.numpy(),
                   out.numpy())
    return out
