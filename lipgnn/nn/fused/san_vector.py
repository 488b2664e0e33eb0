r"""Per-edge vector operations of multi-head dot-product attention, written as LLVM vector IR.

Why by hand: numba compiles the per-head loops of :mod:`lipgnn.nn.fused.san_kernels` (a 32-wide product,
then a sum of each head's 8 channels, per edge) to scalar code; none of the loop forms tried made LLVM's
auto-vectoriser emit vector code for them (``docs/performance.md``). Here each edge's work is a few whole-
vector instructions that numba inlines into the compiled loops (``numba.extending.intrinsic``), so no C
toolchain is needed. For a row ``i``, an edge ``e = (i, j)`` and ``H`` heads of width ``d`` laid out
head-major (``t = h·d + c``):

- :func:`EdgeOps.scores`: :math:`s_{e,h} = \mathrm{scale} \sum_c q_{i,hd+c}\, k_{j,hd+c}`, one ``H·d``-wide
  product, then log₂ d pairwise folds of neighbouring lanes leave the ``H`` head sums (a power-of-two ``d``
  keeps each head's lanes together at every fold).
- :func:`EdgeOps.aggregate`: the normalised weight :math:`a_{e,h} = \tilde a_{e,h}\, r_{i,h}` (written back)
  and :math:`o_i \mathrel{+}= \mathrm{bcast}(a_e) \odot v_j`, the weights broadcast to their heads' lanes.
- :func:`EdgeOps.backward`: the softmax-attention backward of one edge (Guan & He's SAN, Table 1):
  :math:`\partial v_j \mathrel{+}= \mathrm{bcast}(a_e) \odot \partial o_i`,
  :math:`\partial s_{e,h} = a_{e,h}(\langle \partial o_{i,h}, v_{j,h}\rangle + g_{e,h} - \delta_{i,h})\,\mathrm{scale}`
  with :math:`\delta_{i,h} = \sum_{e'} a_{e',h}(\langle \partial o_{i,h}, v_{j',h}\rangle + g_{e',h})` and
  ``g`` a further gradient of the weights (zeros without one), then
  :math:`\partial q_i \mathrel{+}= \mathrm{bcast}(\partial s_e) \odot k_j` and
  :math:`\partial k_j \mathrel{+}= \mathrm{bcast}(\partial s_e) \odot q_i`.

Operands are addresses (``array.ctypes.data`` plus offsets, in bytes) of float32 rows, each read and
written as one unaligned vector; the head sums are reassociated (pairwise), so results differ from a
sequential sum by float rounding only. An address does not keep its array alive: numba frees a local array
after its last use by name, so a caller takes addresses of its arguments, or of local arrays it goes on
using by name for as long as the addresses are used (inside the same loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["EdgeOps", "attn_aggregate_vec", "attn_bwd_vec", "attn_scores_vec", "edge_ops", "prefetch"]

_HEADS, _WIDTH = 4, 8  # lipgnn.nn.fused.san_kernels.VEC_HEADS, VEC_WIDTH
_F32_BYTES = 4
# How many edges ahead the backward prefetches a source's k and v rows: inside a deep step the forward's
# projections have left the core's caches by the time its backward runs (256-layer Cora steps, 16-64 edges
# ahead all saved 3-7 %, docs/performance.md).
_PREFETCH_EDGES = 32
# As the scalar loops: reassociated sums and fused multiply-adds, no "no NaN/inf" assumptions.
_jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})

_F32 = ir.FloatType()
_I32 = ir.IntType(32)


def _vec(n: int) -> ir.VectorType:
    return ir.VectorType(_F32, n)


def _load(builder: ir.IRBuilder, addr: ir.Value, n: int) -> ir.Value:
    return builder.load(builder.inttoptr(addr, _vec(n).as_pointer()), align=4)


def _store(builder: ir.IRBuilder, value: ir.Value, addr: ir.Value, n: int) -> None:
    builder.store(value, builder.inttoptr(addr, _vec(n).as_pointer()), align=4)


def _shuffle(builder: ir.IRBuilder, value: ir.Value, n: int, lanes: list[int]) -> ir.Value:
    undef = ir.Constant(_vec(n), ir.Undefined)
    return builder.shuffle_vector(value, undef, ir.Constant(ir.VectorType(_I32, len(lanes)), lanes))


def _head_sums(builder: ir.IRBuilder, value: ir.Value, heads: int, width: int) -> ir.Value:
    # Adding even to odd lanes halves every head's group of lanes; log2(width) times leaves one per head.
    n = heads * width
    while n > heads:
        even = _shuffle(builder, value, n, list(range(0, n, 2)))
        odd = _shuffle(builder, value, n, list(range(1, n, 2)))
        value = builder.fadd(even, odd)
        n //= 2
    return value


def _broadcast_heads(builder: ir.IRBuilder, value: ir.Value, heads: int, width: int) -> ir.Value:
    return _shuffle(builder, value, heads, [h for h in range(heads) for _ in range(width)])


def _splat(builder: ir.IRBuilder, scalar: ir.Value, n: int) -> ir.Value:
    one = builder.insert_element(ir.Constant(_vec(n), ir.Undefined), scalar, ir.Constant(_I32, 0))
    return _shuffle(builder, one, n, [0] * n)


def _fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value, n: int) -> ir.Value:
    # llvmlite's IRBuilder.fma takes scalars only; the vector form is LLVM's overloaded intrinsic.
    name = f"llvm.fma.v{n}f32"
    fn = builder.module.globals.get(name)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(_vec(n), [_vec(n)] * 3), name=name)
    return builder.call(fn, [a, b, c])


@intrinsic
def prefetch(typingctx, address):  # type: ignore[no-untyped-def]
    """A read prefetch of the cache line at ``address`` (LLVM's ``llvm.prefetch``; a hint, never a fault)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p = ir.IntType(8).as_pointer()
        name = "llvm.prefetch.p0i8"
        fn = builder.module.globals.get(name)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]), name=name)
        builder.call(fn, [builder.inttoptr(args[0], i8p), ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                          ir.Constant(_I32, 1)])
        return context.get_dummy_value()
    return types.void(types.uintp), codegen


@dataclass(frozen=True)
class EdgeOps:
    """The three per-edge intrinsics for ``heads`` heads of ``width`` float32 channels (see the module)."""

    heads: int
    width: int
    scores: Any
    aggregate: Any
    backward: Any


def edge_ops(heads: int, width: int) -> EdgeOps:
    """Build :class:`EdgeOps` for ``heads × width`` lanes; ``width`` must be a power of two."""
    if width < 1 or width & (width - 1):
        raise ValueError(f"edge_ops needs a power-of-two head width, got {width}")
    hc = heads * width
    addr = types.uintp

    @intrinsic
    def scores(typingctx, q_addr, k_addr, out_addr, scale):  # type: ignore[no-untyped-def]
        """``out[0:H] = scale · head_sums(q[0:H·d] ⊙ k[0:H·d])``."""
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            q, k, out, sc = args
            sums = _head_sums(builder, builder.fmul(_load(builder, q, hc), _load(builder, k, hc)), heads, width)
            _store(builder, builder.fmul(sums, _splat(builder, sc, heads)), out, heads)
            return context.get_dummy_value()
        return types.void(addr, addr, addr, types.float32), codegen

    @intrinsic
    def aggregate(typingctx, alpha_addr, inv_addr, v_addr, acc_addr):  # type: ignore[no-untyped-def]
        """``a = alpha[0:H] · inv[0:H]`` (written back to ``alpha``); ``acc[0:H·d] += bcast(a) ⊙ v``."""
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            al, inv, v, acc = args
            a = builder.fmul(_load(builder, al, heads), _load(builder, inv, heads))
            _store(builder, a, al, heads)
            wide = _broadcast_heads(builder, a, heads, width)
            _store(builder, _fma(builder, wide, _load(builder, v, hc), _load(builder, acc, hc), hc), acc, hc)
            return context.get_dummy_value()
        return types.void(addr, addr, addr, addr), codegen

    @intrinsic
    def backward(typingctx, q_i, k_j, v_j, grad_out_i, alpha_e, grad_alpha_e, delta_i, grad_q_i, grad_k_j,
                 grad_v_j, scale):  # type: ignore[no-untyped-def]
        """One edge's softmax-attention backward (module docstring); ``grad_q_i`` is a row accumulator."""
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            q, k, v, go, al, ga, delta, gq, gk, gv, sc = args
            g = _load(builder, go, hc)
            a = _load(builder, al, heads)
            _store(builder, _fma(builder, _broadcast_heads(builder, a, heads, width), g, _load(builder, gv, hc), hc),
                   gv, hc)
            dot = _head_sums(builder, builder.fmul(g, _load(builder, v, hc)), heads, width)
            ds = builder.fsub(builder.fadd(dot, _load(builder, ga, heads)), _load(builder, delta, heads))
            ds = builder.fmul(builder.fmul(a, ds), _splat(builder, sc, heads))
            wide = _broadcast_heads(builder, ds, heads, width)
            _store(builder, _fma(builder, wide, _load(builder, k, hc), _load(builder, gq, hc), hc), gq, hc)
            _store(builder, _fma(builder, wide, _load(builder, q, hc), _load(builder, gk, hc), hc), gk, hc)
            return context.get_dummy_value()
        return types.void(*([addr] * 10), types.float32), codegen

    return EdgeOps(heads, width, scores, aggregate, backward)


_ops = edge_ops(_HEADS, _WIDTH)
_edge_scores, _edge_aggregate, _edge_backward = _ops.scores, _ops.aggregate, _ops.backward
_HC = _HEADS * _WIDTH


@_jit
def attn_scores_vec(rowptr, col, qkv, scale, shifted, ninf):  # pragma: no cover
    # _attn_scores for 4 heads of width 8, float32: each edge's four scores from one vector product.
    n = rowptr.shape[0] - 1
    base = qkv.ctypes.data
    row = qkv.shape[1] * _F32_BYTES
    out = shifted.ctypes.data
    best = np.empty(_HEADS, dtype=qkv.dtype)
    for i in range(n):
        start, end = rowptr[i], rowptr[i + 1]
        for h in range(_HEADS):
            best[h] = ninf
        q_i = base + i * row
        for e in range(start, end):
            _edge_scores(q_i, base + col[e] * row + _HC * _F32_BYTES, out + e * _HEADS * _F32_BYTES, scale)
            for h in range(_HEADS):
                d = shifted[e, h]
                best[h] = d if (d > best[h] or d != d) else best[h]
        for e in range(start, end):
            for h in range(_HEADS):
                shifted[e, h] -= best[h]

@_jit
def attn_aggregate_vec(rowptr, col, qkv, alpha, out, x, energy, with_x, zero, one, tiny):  # pragma: no cover
    # _attn_aggregate for 4 heads of width 8, float32: each edge's weights and its v_j row in vector form.
    n = rowptr.shape[0] - 1
    dim = x.shape[1]
    base = qkv.ctypes.data
    row = qkv.shape[1] * _F32_BYTES
    weights = alpha.ctypes.data
    acc = np.empty(_HC, dtype=qkv.dtype)
    inv = np.empty(_HEADS, dtype=qkv.dtype)
    acc_p, inv_p = acc.ctypes.data, inv.ctypes.data
    r = np.empty((_HEADS, dim), dtype=qkv.dtype)
    for i in range(n):
        start, end = rowptr[i], rowptr[i + 1]
        for h in range(_HEADS):
            inv[h] = zero
        for e in range(start, end):
            for h in range(_HEADS):
                inv[h] += alpha[e, h]
        for h in range(_HEADS):
            inv[h] = one / (inv[h] + tiny)
        for t in range(_HC):
            acc[t] = zero
        for e in range(start, end):
            _edge_aggregate(weights + e * _HEADS * _F32_BYTES, inv_p, base + col[e] * row + 2 * _HC * _F32_BYTES,
                            acc_p)
        for t in range(_HC):
            out[i, t] = acc[t]
        if with_x:
            for h in range(_HEADS):
                for c in range(dim):
                    r[h, c] = -x[i, c]
            for e in range(start, end):
                j = col[e]
                for h in range(_HEADS):
                    a = alpha[e, h]
                    for c in range(dim):
                        r[h, c] += a * x[j, c]
            for h in range(_HEADS):
                t2 = zero
                for c in range(dim):
                    t2 += r[h, c] * r[h, c]
                energy[h] += t2

@_jit
def attn_bwd_vec(rowptr, col, qkv, scale, alpha, grad_out, out, grad_alpha, with_grad_alpha, grad_qkv,
                  zero):  # pragma: no cover
    # _attn_bwd for 4 heads of width 8, float32. Without grad_alpha every edge reads its first row, zeros
    # (a stride of 0), so one loop serves both cases.
    n = rowptr.shape[0] - 1
    last = col.shape[0] - _PREFETCH_EDGES
    base = qkv.ctypes.data
    grads = grad_qkv.ctypes.data
    row = qkv.shape[1] * _F32_BYTES
    go_base = grad_out.ctypes.data
    go_row = grad_out.shape[1] * _F32_BYTES
    weights = alpha.ctypes.data
    edge = _HEADS * _F32_BYTES
    ga_base = grad_alpha.ctypes.data
    ga_edge = edge if with_grad_alpha else 0
    gq = np.empty(_HC, dtype=qkv.dtype)
    delta = np.empty(_HEADS, dtype=qkv.dtype)
    gq_p, delta_p = gq.ctypes.data, delta.ctypes.data
    k_off, v_off = _HC * _F32_BYTES, 2 * _HC * _F32_BYTES
    for i in range(n):
        start, end = rowptr[i], rowptr[i + 1]
        for h in range(_HEADS):
            d = zero
            for c in range(_WIDTH):
                d += grad_out[i, h * _WIDTH + c] * out[i, h * _WIDTH + c]
            delta[h] = d
        if with_grad_alpha:
            for e in range(start, end):
                for h in range(_HEADS):
                    delta[h] += alpha[e, h] * grad_alpha[e, h]
        for t in range(_HC):
            gq[t] = zero
        q_i = base + i * row
        go_i = go_base + i * go_row
        for e in range(start, end):
            j = col[e]
            if e < last:  # the k and v rows (256 bytes, four cache lines) of a later edge's source
                ahead = base + col[e + _PREFETCH_EDGES] * row + k_off
                prefetch(ahead)
                prefetch(ahead + 64)
                prefetch(ahead + 128)
                prefetch(ahead + 192)
            _edge_backward(q_i, base + j * row + k_off, base + j * row + v_off, go_i, weights + e * edge,
                           ga_base + e * ga_edge, delta_p, gq_p, grads + j * row + k_off, grads + j * row + v_off,
                           scale)
        for t in range(_HC):
            grad_qkv[i, t] += gq[t]
