r"""Per-edge vector operations of SAN's multi-head attention and nonlocal energy, written as LLVM vector IR.

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
- :class:`EnergyOps`: the nonlocal energy :math:`\|P_h X - X\|^2` (Guan & He §4.1) of each head, its residual rows
  :math:`r_{h,i} = \sum_e a_{e,h} x_j - x_i` and their gradients, all heads at once.

Operands are addresses (``array.ctypes.data`` plus offsets, in bytes) of float32 rows, each read and
written as one unaligned vector; the head sums are reassociated (pairwise), so results differ from a
sequential sum by float rounding only. An address does not keep its array alive: numba frees a local array
after its last use by name, so a caller takes addresses of its arguments, or of local arrays it goes on
using by name for as long as the addresses are used (inside the same loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from lipgnn.nn.fused.kernels import _jit_fast

__all__ = ["EdgeOps", "EnergyOps", "attn_aggregate_vec", "attn_bwd_vec", "attn_scores_vec", "edge_ops",
           "energy_bwd_vec", "energy_ops", "prefetch"]

_HEADS, _WIDTH = 4, 8  # lipgnn.nn.fused.san_kernels.VEC_HEADS, VEC_WIDTH
_F32_BYTES = 4
# How many edges ahead the backward prefetches a source's k and v rows: inside a deep step the forward's
# projections have left the core's caches by the time its backward runs (256-layer Cora steps, 16-64 edges
# ahead all saved 3-7 %, docs/performance.md).
_PREFETCH_EDGES = 32

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


def _block_sum(builder: ir.IRBuilder, value: ir.Value, blocks: int, width: int) -> ir.Value:
    # Sum of ``blocks`` consecutive blocks of ``width`` lanes (a power-of-two count): halves added pairwise.
    n = blocks * width
    while n > width:
        half = n // 2
        value = builder.fadd(_shuffle(builder, value, n, list(range(half))),
                             _shuffle(builder, value, n, list(range(half, n))))
        n = half
    return value


@dataclass(frozen=True)
class EnergyOps:
    r"""Per-edge vector operations of the nonlocal energy :math:`\|P_h X - X\|^2` (Guan & He §4.1) for
    ``heads`` heads and rows ``x`` of ``dim`` float32 channels; ``r`` is a row's ``[heads, dim]`` residuals
    :math:`r_{h,i} = \sum_e a_{e,h} x_j - x_i`, kept in a scratch row.

    - ``init(x_i, r)``: :math:`r_h = -x_i` for every head.
    - ``gather(x_j, a_e, r)``: :math:`r_h \mathrel{+}= a_{e,h} x_j`.
    - ``norms(r, out)``: ``out[h]`` :math:`= \|r_h\|^2`.
    - ``scatter(x_j, a_e, r, grad_a_e, grad_x_j)``, with ``r`` already scaled by the energies' gradients
      :math:`g_h`: ``grad_a_e[h]`` :math:`= \langle r_h, x_j\rangle` (written) and
      :math:`\partial x_j \mathrel{+}= \sum_h a_{e,h} r_h` (one accumulation for all heads).
    - ``subtract(r, grad_x_i)``: :math:`\partial x_i \mathrel{-}= \sum_h r_h`.
    """

    heads: int
    dim: int
    init: Any
    gather: Any
    norms: Any
    scatter: Any
    subtract: Any


def energy_ops(heads: int, dim: int) -> EnergyOps:
    """Build :class:`EnergyOps`; ``heads`` and ``dim`` must be powers of two."""
    for name, value in (("heads", heads), ("dim", dim)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"energy_ops needs a power-of-two {name}, got {value}")
    wide = heads * dim
    addr = types.uintp

    def tile(builder: ir.IRBuilder, row: ir.Value) -> ir.Value:  # [x | x | ... | x], one copy per head
        return _shuffle(builder, row, dim, [c for _ in range(heads) for c in range(dim)])

    @intrinsic
    def init(typingctx, x_addr, r_addr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            xa, ra = args
            _store(builder, builder.fneg(tile(builder, _load(builder, xa, dim))), ra, wide)
            return context.get_dummy_value()
        return types.void(addr, addr), codegen

    @intrinsic
    def gather(typingctx, x_addr, a_addr, r_addr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            xa, aa, ra = args
            weights = _broadcast_heads(builder, _load(builder, aa, heads), heads, dim)
            x = tile(builder, _load(builder, xa, dim))
            _store(builder, _fma(builder, weights, x, _load(builder, ra, wide), wide), ra, wide)
            return context.get_dummy_value()
        return types.void(addr, addr, addr), codegen

    @intrinsic
    def norms(typingctx, r_addr, out_addr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            ra, oa = args
            r = _load(builder, ra, wide)
            _store(builder, _head_sums(builder, builder.fmul(r, r), heads, dim), oa, heads)
            return context.get_dummy_value()
        return types.void(addr, addr), codegen

    @intrinsic
    def scatter(typingctx, x_addr, a_addr, r_addr, grad_a_addr, grad_x_addr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            xa, aa, ra, gaa, gxa = args
            r = _load(builder, ra, wide)
            x = _load(builder, xa, dim)
            _store(builder, _head_sums(builder, builder.fmul(r, tile(builder, x)), heads, dim), gaa, heads)
            weighted = builder.fmul(_broadcast_heads(builder, _load(builder, aa, heads), heads, dim), r)
            total = builder.fadd(_load(builder, gxa, dim), _block_sum(builder, weighted, heads, dim))
            _store(builder, total, gxa, dim)
            return context.get_dummy_value()
        return types.void(addr, addr, addr, addr, addr), codegen

    @intrinsic
    def subtract(typingctx, r_addr, grad_x_addr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            ra, gxa = args
            total = _block_sum(builder, _load(builder, ra, wide), heads, dim)
            _store(builder, builder.fsub(_load(builder, gxa, dim), total), gxa, dim)
            return context.get_dummy_value()
        return types.void(addr, addr), codegen

    return EnergyOps(heads, dim, init, gather, norms, scatter, subtract)


_ops = edge_ops(_HEADS, _WIDTH)
_edge_scores, _edge_aggregate, _edge_backward = _ops.scores, _ops.aggregate, _ops.backward
_HC = _HEADS * _WIDTH
_energy = energy_ops(_HEADS, _HC)  # the block input x has the model's width, heads x width
_energy_init, _energy_gather, _energy_norms = _energy.init, _energy.gather, _energy.norms
_energy_scatter, _energy_subtract = _energy.scatter, _energy.subtract


@_jit_fast  # as the scalar loops
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

@_jit_fast  # as the scalar loops
def attn_aggregate_vec(rowptr, col, qkv, alpha, out, x, energy, with_x, zero, one, tiny):  # pragma: no cover
    # _attn_aggregate for 4 heads of width 8, float32: each edge's weights and its v_j row in vector form;
    # with x (rows of the model's width, 32), the energies' residuals r_h as one [4, 32] scratch row.
    n = rowptr.shape[0] - 1
    base = qkv.ctypes.data
    row = qkv.shape[1] * _F32_BYTES
    weights = alpha.ctypes.data
    edge = _HEADS * _F32_BYTES
    x_base = x.ctypes.data
    x_row = _HC * _F32_BYTES
    acc = np.empty(_HC, dtype=qkv.dtype)
    inv = np.empty(_HEADS, dtype=qkv.dtype)
    acc_p, inv_p = acc.ctypes.data, inv.ctypes.data
    scratch = np.empty(_HEADS * _HC + _HEADS, dtype=qkv.dtype)  # r, then the heads' ‖r_h‖²
    r_p = scratch.ctypes.data
    sq_p = r_p + _HEADS * _HC * _F32_BYTES
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
            _edge_aggregate(weights + e * edge, inv_p, base + col[e] * row + 2 * _HC * _F32_BYTES, acc_p)
        for t in range(_HC):
            out[i, t] = acc[t]
        if with_x:
            _energy_init(x_base + i * x_row, r_p)
            for e in range(start, end):
                _energy_gather(x_base + col[e] * x_row, weights + e * edge, r_p)
            _energy_norms(r_p, sq_p)
            for h in range(_HEADS):
                energy[h] += scratch[_HEADS * _HC + h]


@_jit_fast  # as the scalar loops
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


@_jit_fast  # as the scalar loops
def energy_bwd_vec(rowptr, col, alpha, x, grad_energy, grad_alpha, grad_x):  # pragma: no cover
    # san_kernels._energy_bwd for 4 heads and rows x of 32 float32 channels (grad_energy[h] = 2 ∂L/∂e_h;
    # grad_x zero-initialised): r_h recomputed per row into a scratch row, then one visit of each edge writes
    # its four ∂a_e,h and adds Σ_h a_e,h g_h r_h to ∂x_j.
    n = rowptr.shape[0] - 1
    x_base, grad_x_base = x.ctypes.data, grad_x.ctypes.data
    weights, grad_weights = alpha.ctypes.data, grad_alpha.ctypes.data
    x_row = _HC * _F32_BYTES
    edge = _HEADS * _F32_BYTES
    r = np.empty(_HEADS * _HC, dtype=x.dtype)
    r_p = r.ctypes.data
    for i in range(n):
        start, end = rowptr[i], rowptr[i + 1]
        _energy_init(x_base + i * x_row, r_p)
        for e in range(start, end):
            _energy_gather(x_base + col[e] * x_row, weights + e * edge, r_p)
        for h in range(_HEADS):
            g = grad_energy[h]
            for c in range(_HC):
                r[h * _HC + c] *= g
        for e in range(start, end):
            j = col[e]
            _energy_scatter(x_base + j * x_row, weights + e * edge, r_p, grad_weights + e * edge,
                            grad_x_base + j * x_row)
        _energy_subtract(r_p, grad_x_base + i * x_row)
