r"""Compiled CPU loops (numba) for the per-node and per-row passes of the fused attention layers.

Why by hand: eager PyTorch runs each elementary step as its own pass over memory, and several
places of :mod:`lipgnn.nn.fused` are chains of such passes that one loop does at once:

- **Dropout** (:mod:`lipgnn.nn.fused.dropout`): ``F.dropout`` draws a float per element with
  torch's generator, stores a mask and multiplies (15 ms on PubMed's ``[19717, 64]``, one thread,
  more than a whole fused layer forward). Here a counter-based generator (SplitMix64, 32 bits per
  element) decides each element in the loop that writes the output, and the backward regenerates the
  same decisions from the seed, so no mask is stored.

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
- **ELU** (the activation between fused layers, :mod:`lipgnn.nn.fused.activation`): torch's CPU kernel
  evaluates ``expm1`` with a slow vectorised polynomial (3.4-4.5 ms on ``[19717, 64]``, more than the
  layer's projection); a branch-free float32 ``exp`` that LLVM vectorises takes ~1.8 ms, and the
  backward reads the output only.
  The same row code finishes each row of a concatenating GAT layer's aggregation (its sum, bias and
  ELU in one pass over the CSR rows), so that sum is never written out and read back.
- **GRU cell** (GGNN's update, :mod:`lipgnn.nn.fused.gru`): torch's CPU ``GRUCell`` runs the gates as about
  ten elementwise passes over ``[N, C]`` and ``[N, 3C]`` forward and more backward, with the gate
  gradients concatenated from chunks; here one loop each way between the two gate GEMMs.
- **PairNorm** (:mod:`lipgnn.nn.fused.pair_norm`): PyG's version runs about eight elementwise operations
  forward and more backward; on Fig. 5's small tree batches their per-operation cost dominated. Here one
  pass of column sums and one output pass each way.
- **SDDMM** (the attention weights' gradient in the SpMM backward, GT's ``q_i·k_j``): one dot product per
  CSR edge with the target row in cache, about half the time of torch's CPU ``sampled_addmm``.
- **Sparse input features, transposed product** (:mod:`lipgnn.nn.fused.sparse_input`): the encoder's
  weight gradient :math:`X^\top G` for a CSR ``X``. MKL's CSR product is slow for this shape (a few
  hundred output rows of thousands of entries each: PubMed's features, 45 ms against 22 ms dense);
  one pass over ``X``'s entries scattering rows of ``G`` takes 8.6 ms.
- **Per-edge scores from per-node terms**: GAT's ``(a_src[j] + a_dst[i]) k_i`` (``k`` is eq. (17)'s
  per-target factor, or absent without LipschitzNorm) and GT's ``s_e k_i``. Each is one loop over the
  edges instead of two or three gathers forward and up to three scatters backward.

numba compiles each loop on first use (cached on disk next to this file), so no C++ toolchain is
needed. Every kernel has an eager twin in the module that calls it, which runs for CUDA tensors, without
numba, or with ``LIPGNN_KERNELS=eager``; the tests check both paths against each other and against
the PyG reference. The loops are serial: on this 2-core machine a second thread only contends (GPUs
use the eager path).

The ``zero`` arguments are ``0`` in the tensors' dtype, so that numba compiles float32 arithmetic for
float32 data (a literal ``0.0`` would make it float64, ~2x slower).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the eager path runs without it
    numba = None

__all__ = [
    "add_sq_norm_grad_",
    "available",
    "disabled",
    "dropout_",
    "dropout_rows_",
    "bias_elu",
    "bias_elu_backward",
    "csr_t_matmul",
    "eq19_scale",
    "eq19_scale_backward",
    "gat_edge_scores",
    "gat_edge_scores_backward",
    "gat_node_terms",
    "gat_node_terms_backward",
    "gru_cell",
    "gru_cell_backward",
    "neighbour_max",
    "neighbour_max_backward",
    "neighbour_max_pair",
    "pair_norm_backward",
    "pair_norm_forward",
    "row_scale",
    "row_scale_backward",
    "row_softmax",
    "row_softmax_backward",
    "sddmm",
    "spmm_bias_elu",
    "sq_norm",
]

_FLOATS = (torch.float32, torch.float64)
_disabled = False


def available(*tensors: Tensor) -> bool:
    """Whether the compiled loops apply: numba present, CPU float tensors of one dtype, not disabled
    (``LIPGNN_KERNELS=eager`` or :func:`disabled`)."""
    if numba is None or _disabled or os.environ.get("LIPGNN_KERNELS", "numba") == "eager":
        return False
    dtype = tensors[0].dtype
    if dtype not in _FLOATS:
        return False
    for t in tensors:
        if not t.is_cpu or t.dtype != dtype:
            return False
    return True


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the eager twins inside the block (the tests compare both paths)."""
    global _disabled
    previous, _disabled = _disabled, True
    try:
        yield
    finally:
        _disabled = previous


_ZEROS = {torch.float32: np.float32(0), torch.float64: np.float64(0)}


def _np(t: Tensor) -> np.ndarray:
    """Zero-copy NumPy view (a contiguous copy first if needed; no autograd). Every compiled call
    converts its arguments, so new tensor objects are made only where needed."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _zero(t: Tensor) -> np.generic:
    """A zero of ``t``'s float type (the compiled loops take their float type from it)."""
    return _ZEROS.get(t.dtype, _ZEROS[torch.float64])


if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, fastmath=False)
    # Reassociated sums and fused multiply-adds let LLVM vectorise the reductions; no "no NaN/inf"
    # assumptions, so a diverging run still shows its NaN (the trainer stops on it).
    _jit_fast = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    # numba's default (Python) error model checks every float division for a zero divisor, to raise
    # ZeroDivisionError, and that branch keeps LLVM from vectorising the loop; loops whose divisors cannot
    # be zero take numpy's model (IEEE results, no check).
    _jit_fast_div = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
    # Row helpers shared by several loops, inlined into each caller's IR: called as functions, LLVM kept
    # their loops scalar and the callers ran about a third slower.
    _jit_inline = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")

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

    # GRU cell (torch.nn.GRUCell's equations, lipgnn.nn.fused.gru) from its two gate pre-activations
    # gi = W_i m + b_i, gh = W_h h + b_h ([N, 3C], gates r | z | n): one pass forward, one backward. float32
    # only: sigmoid and tanh use the Cephes exp of _bias_elu on -|a| (always <= 0): sigmoid(a) = 1 / (1 + e)
    # for a > 0, e / (1 + e) otherwise, with e = exp(-|a|); tanh(a) = sign(a) (1 - e) / (1 + e), e = exp(-2|a|).

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
