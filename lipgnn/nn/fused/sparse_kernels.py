r"""Compiled CPU loops (numba) of the CSR products and the row softmax (:mod:`lipgnn.nn.fused.sparse`,
:mod:`lipgnn.nn.fused.sparse_input`).

- **SDDMM** (the attention weights' gradient in the SpMM backward, GT's ``q_i·k_j``): one dot product per
  CSR edge with the target row in cache, about half the time of torch's CPU ``sampled_addmm``.
- **Sparse input features, transposed product** (:mod:`lipgnn.nn.fused.sparse_input`): the encoder's
  weight gradient :math:`X^\top G` for a CSR ``X``. MKL's CSR product is slow for this shape (a few
  hundred output rows of thousands of entries each: PubMed's features, 45 ms against 22 ms dense);
  one pass over ``X``'s entries scattering rows of ``G`` takes 8.6 ms.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk
next to this file); each has an eager twin in the module that calls it, which runs where
:func:`lipgnn.nn.fused.kernels.available` says no (CUDA tensors, no numba, ``LIPGNN_KERNELS=eager``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lipgnn.nn.fused.kernels import _jit, _jit_fast, _np, _zero, numba

__all__ = [
    "csr_t_matmul", "row_softmax", "row_softmax_backward", "sddmm", "spmm_heads",
]


if numba is not None:
    # Loops over edges keep the head loop outermost: with the per-edge head loop innermost, rows of
    # ~5 edges and one head spend most of their time in loop overhead (measured 3-4x slower).

    @_jit_fast
    def _sddmm(rowptr, col, a, b, out, zero):  # pragma: no cover - compiled
        # out[e, h] = <a[i, h], b[col[e], h]> for the edges e of row i; a's row stays in cache. Several
        # heads are taken together per edge: each source row b[j] is then gathered once, not once per
        # head (per head, a narrow slice of the row per pass: 4 heads of 8 channels 1.8x slower).
        n_dst, h_dim, c_dim = a.shape
        if h_dim == 1:
            for i in range(n_dst):
                for e in range(rowptr[i], rowptr[i + 1]):
                    j = col[e]
                    acc = zero
                    for c in range(c_dim):
                        acc += a[i, 0, c] * b[j, 0, c]
                    out[e, 0] = acc
            return
        for i in range(n_dst):
            for e in range(rowptr[i], rowptr[i + 1]):
                j = col[e]
                for h in range(h_dim):
                    acc = zero
                    for c in range(c_dim):
                        acc += a[i, h, c] * b[j, h, c]
                    out[e, h] = acc

    @_jit
    def _row_max_shift(rowptr, s, out):  # pragma: no cover - compiled
        # out[e, h] = s[e, h] - max over e's CSR row of s[., h] (the softmax's shift)
        n_dst, h_dim = rowptr.shape[0] - 1, s.shape[1]
        for i in range(n_dst):
            lo, hi = rowptr[i], rowptr[i + 1]
            if lo == hi:
                continue
            for h in range(h_dim):
                m = s[lo, h]
                for e in range(lo + 1, hi):
                    if s[e, h] > m:
                        m = s[e, h]
                for e in range(lo, hi):
                    out[e, h] = s[e, h] - m

    @_jit_fast
    def _row_normalize(rowptr, p, tiny, one):  # pragma: no cover - compiled
        # p[e, h] /= (sum over e's CSR row of p[., h]) + tiny, in place
        n_dst, h_dim = rowptr.shape[0] - 1, p.shape[1]
        for i in range(n_dst):
            lo, hi = rowptr[i], rowptr[i + 1]
            for h in range(h_dim):
                acc = one - one
                for e in range(lo, hi):
                    acc += p[e, h]
                inv = one / (acc + tiny)
                for e in range(lo, hi):
                    p[e, h] = p[e, h] * inv

    @_jit_fast
    def _row_softmax_bwd(rowptr, p, g, out, zero):  # pragma: no cover - compiled
        # out = p * (g - sum over the row of p * g), per head
        n_dst, h_dim = rowptr.shape[0] - 1, p.shape[1]
        for i in range(n_dst):
            lo, hi = rowptr[i], rowptr[i + 1]
            for h in range(h_dim):
                acc = zero
                for e in range(lo, hi):
                    acc += p[e, h] * g[e, h]
                for e in range(lo, hi):
                    out[e, h] = p[e, h] * (g[e, h] - acc)

    @_jit_fast
    def _spmm_heads(rowptr, col, values, x, out, zero):  # pragma: no cover - compiled
        # out[i, h, c] = sum_e values[e, h] x[col[e], h, c] over the edges e of row i, all heads in one
        # visit of the row (x, out [N, H, C] contiguous; the target row stays in cache).
        n_dst, h_dim, c_dim = out.shape
        for i in range(n_dst):
            for h in range(h_dim):
                for c in range(c_dim):
                    out[i, h, c] = zero
            for e in range(rowptr[i], rowptr[i + 1]):
                j = col[e]
                for h in range(h_dim):
                    v = values[e, h]
                    for c in range(c_dim):
                        out[i, h, c] += v * x[j, h, c]

    @_jit_fast
    def _csr_t_matmul(rowptr, col, val, g, out):  # pragma: no cover - compiled
        # out[k, c] += x[i, k] g[i, c] over the stored entries (i, k) of the CSR x; out's rows are few
        # (the feature count) and stay in cache, g's row i is read once per entry of row i.
        c_dim = g.shape[1]
        for i in range(rowptr.shape[0] - 1):
            for e in range(rowptr[i], rowptr[i + 1]):
                k = col[e]
                v = val[e]
                for c in range(c_dim):
                    out[k, c] += v * g[i, c]


def csr_t_matmul(x: Tensor, g: Tensor) -> Tensor:
    """``xᵀ g`` for a CSR ``x`` ``[N, K]`` and a dense ``g`` ``[N, C]`` → dense ``[K, C]``."""
    out = g.new_zeros(x.size(1), g.size(1))
    _csr_t_matmul(_np(x.crow_indices()), _np(x.col_indices()), _np(x.values()), _np(g), out.numpy())
    return out


def sddmm(a: Tensor, b: Tensor, rowptr: Tensor, col: Tensor) -> Tensor:
    """``out[e, h] = <a[i, h], b[col[e], h]>`` for the edges ``e`` of CSR row ``i`` (``a`` ``[N_dst, H, C]``,
    ``b`` ``[N_src, H, C]``) → ``[E, H]``. torch's CPU ``sampled_addmm`` took about twice as long
    (PubMed, one head, 64 channels, one thread: 4.6 ms against 2.3 ms)."""
    out = a.new_empty(col.numel(), a.size(1))
    _sddmm(_np(rowptr), _np(col), _np(a), _np(b), out.numpy(), _zero(a))
    return out


def row_softmax(scores: Tensor, rowptr: Tensor, bound: float | None) -> Tensor:
    """Softmax of ``scores`` ``[E, H]`` over every CSR row (``rowptr``), per head, with the 1e-16 guard of
    ``torch_geometric.utils.softmax``: shifted by the row maximum, or by the constant ``bound`` (scores known
    to lie in ``[-bound, bound]``) → a new ``[E, H]`` tensor. The exponential is torch's (vectorised)."""
    if bound is None:
        p = torch.empty_like(scores, memory_format=torch.contiguous_format)
        _row_max_shift(_np(rowptr), _np(scores), p.numpy())
        p.exp_()
    else:
        p = scores.sub(bound).exp_()
    _row_normalize(_np(rowptr), p.numpy(), _zero(p) + 1e-16, _zero(p) + 1)
    return p


def row_softmax_backward(grad: Tensor, p: Tensor, rowptr: Tensor) -> Tensor:
    """``∂L/∂scores`` of :func:`row_softmax` from its output ``p`` and ``grad = ∂L/∂p``:
    ``p ⊙ (g − Σ_row p g)``."""
    out = torch.empty_like(p)
    _row_softmax_bwd(_np(rowptr), _np(p), _np(grad), out.numpy(), _zero(p))
    return out


def spmm_heads(values: Tensor, x: Tensor, rowptr: Tensor, col: Tensor, num_dst: int) -> Tensor:
    """``out[i, h] = Σ_e values[e, h] x[col[e], h]`` over the edges ``e`` of CSR row ``i`` (``values``
    ``[E, H]``, ``x`` ``[N_src, H, C]``) → ``[num_dst, H, C]``. For several heads: MKL's product takes one
    head at a time, and each head's strided ``[N, C]`` slice is copied in and its result copied back
    (a 4-head, 8-channel GAT layer on TREES batches spent ~14 % of its step in those copies)."""
    out = x.new_empty(num_dst, x.size(1), x.size(2))
    _spmm_heads(_np(rowptr), _np(col), _np(values), _np(x), out.numpy(), _zero(x))
    return out
