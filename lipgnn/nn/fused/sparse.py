r"""Sparse products and row operations on a :class:`~lipgnn.nn.fused.graph.CSRGraph`, each with a
hand-written backward (torch's own autograd for sparse values is very slow on CPU).

* SpMM, the weighted neighbourhood sum of eq. (4) per head,
  :math:`\text{out}_{i,h} = \sum_{j \in \mathcal{N}(i)} a_{ij,h} x_{j,h} = (A_h X_h)_i`, whose
  backward is :math:`\partial X_h = A_h^\top\, \partial\text{out}_h` and the SDDMM
  :math:`\partial a_{ij,h} = \langle \partial\text{out}_{i,h}, x_{j,h} \rangle`;
* SDDMM, the per-edge dot products :math:`\langle a_{i,h}, b_{j,h} \rangle` (GT's :math:`q_i^\top k_j`);
* the segment softmax over the CSR rows (eq. (3));
* gathers of per-node terms to the edges and scatters back (GAT's scores, per-target rescaling);
* every head's matrix applied to one shared ``X`` (:math:`P_h X` for all :math:`h` in one product) and
  the residual energies :math:`\|P_h X - X\|^2` of nonlocal message passing.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor
from torch_geometric.utils import segment

from lipgnn.nn.fused import elementwise_kernels, kernels, score_kernels, sparse_kernels
from lipgnn.nn.fused.activation import bias_elu
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.fused.norms import add_sq_norm_grad_, sq_norm_nograd

__all__ = [
    "MAX_SHIFT_FREE_BOUND",
    "csr_residual_energy",
    "csr_sddmm",
    "csr_sddmm_with_norms",
    "csr_softmax",
    "csr_spmm",
    "csr_spmm_bias_elu",
    "csr_spmm_shared",
    "gather_rows",
    "gat_edge_scores",
    "row_scale",
    "scatter_rows_sum",
]


def _csr(ptr: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    return torch.sparse_csr_tensor(ptr, col, values, shape, check_invariants=False)


def _heads_first(values: Tensor) -> Tensor:
    """``[E, H]`` → contiguous ``[H, E]`` so every head's values are one contiguous CSR value array."""
    return values.t().contiguous()


def _csr_mm(ptr: Tensor, col: Tensor, values: Tensor, x: Tensor, shape: tuple[int, int]) -> Tensor:
    """``CSR(ptr, col, values) @ x`` → a new ``[shape[0], C]`` tensor.

    Why ``addmm(out, A, x, beta=0, out=out)`` instead of ``A @ x``: on CPU the ``@`` path zero-fills
    its result and copies it (and its operands) between layouts, 2-4x the time of MKL's product
    itself on a PubMed-sized graph; with ``beta=0`` the uninitialised ``out`` is never read (not even
    its NaNs, as documented for ``addmm``)."""
    out = x.new_empty(shape[0], x.size(-1))
    return torch.addmm(out, _csr(ptr, col, values, shape), x, beta=0.0, out=out)


def _spmm(ptr: Tensor, col: Tensor, values: Tensor, x: Tensor, shape: tuple[int, int]) -> Tensor:
    """``out[:, h] = CSR(ptr, col, values[:, h]) @ x[:, h]`` for ``values [E, H]``, ``x [M, H, C]``."""
    heads = values.size(1)
    if heads == 1:
        return _csr_mm(ptr, col, values.reshape(-1), x[:, 0], shape).unsqueeze(1)
    if kernels.available(values, x):
        return sparse_kernels.spmm_heads(values, x, ptr, col, shape[0])
    vals = _heads_first(values)
    out = x.new_empty(shape[0], heads, x.size(2))
    for h in range(heads):
        out[:, h] = _csr_mm(ptr, col, vals[h], x[:, h], shape)
    return out


def _sddmm(graph: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """``out[e, h] = <a[row_e, h], b[col_e, h]>`` for ``a [N_dst, H, C]``, ``b [N_src, H, C]``."""
    if kernels.available(a, b):
        return sparse_kernels.sddmm(a, b, graph.rowptr, graph.col)
    heads = a.size(1)
    # beta=0: the pattern's values are ignored, but give zeros so no NaN can leak through.
    pattern = _csr(graph.csr_ptr, graph.csr_col, a.new_zeros(graph.num_edges), graph.shape)
    outs = [
        torch.sparse.sampled_addmm(pattern, a[:, h], b[:, h].t(), beta=0.0).values() for h in range(heads)
    ]
    return outs[0].unsqueeze(1) if heads == 1 else torch.stack(outs, dim=1)


class _CSRSpMM(torch.autograd.Function):
    """``out = A X`` per head with ``A`` the CSR matrix of ``values``; backward via ``Aᵀ`` and SDDMM."""

    @staticmethod
    def forward(ctx, values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        ctx.save_for_backward(values, x)
        return _spmm(graph.csr_ptr, graph.csr_col, values, x, graph.shape)

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        values, x = ctx.saved_tensors
        return (*_spmm_backward(ctx.graph, values, x, grad_out, ctx.needs_input_grad[0], ctx.needs_input_grad[1]),
                None)


def _spmm_backward(graph: CSRGraph, values: Tensor, x: Tensor, grad_out: Tensor, need_values: bool,
                   need_x: bool) -> tuple[Tensor | None, Tensor | None]:
    r"""``(∂values, ∂x)`` of ``out = A X`` per head: the SDDMM :math:`\langle \partial\text{out}_i, x_j
    \rangle` and :math:`A^\top \partial\text{out}` (``None`` where not needed)."""
    grad_out = grad_out.contiguous()
    grad_values = grad_x = None
    if need_values:
        grad_values = _sddmm(graph, grad_out, x)
    if need_x:
        grad_x = _spmm(graph.t_csr_ptr, graph.t_csr_col, gather_rows(values, graph.t_perm), grad_out,
                       (graph.num_src, graph.num_dst))
    return grad_values, grad_x


class _CSRSpMMBiasELU(torch.autograd.Function):
    """``ELU(A X + b)`` with the heads concatenated: the SpMM, the bias and the ELU in one pass over the rows
    forward; backward the ELU's gradient from the saved output, then the SpMM's."""

    @staticmethod
    def forward(ctx, values: Tensor, x: Tensor, bias: Tensor | None, graph: CSRGraph,  # type: ignore[override]
                alpha: float) -> Tensor:
        out = elementwise_kernels.spmm_bias_elu(values, x, graph.csr_ptr, graph.csr_col, bias, alpha)
        ctx.graph, ctx.alpha, ctx.with_bias = graph, alpha, bias is not None
        ctx.save_for_backward(values, x, out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None, None, None]:  # type: ignore[override]
        values, x, out = ctx.saved_tensors
        grad_pre, grad_bias = elementwise_kernels.bias_elu_backward(grad.contiguous(), out, ctx.alpha,
                                                        ctx.with_bias and ctx.needs_input_grad[2])
        grad_values, grad_x = _spmm_backward(ctx.graph, values, x, grad_pre.view(-1, *x.shape[1:]),
                                             ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return grad_values, grad_x, grad_bias, None, None


class _CSRSDDMM(torch.autograd.Function):
    """``s[e] = <a[row_e], b[col_e]>`` per head; backward is two SpMMs with the incoming gradient.

    With ``with_norms`` it also returns ``‖a‖²`` and ``‖b‖²`` per node and head (LipschitzNorm needs
    them): their gradient ``2 g x`` is then added in place to the SpMM results instead of being
    allocated and accumulated separately (two fewer passes over ``[N, H, C]`` per input); ``b``'s
    row by row when few rows have one (GT's keys: eq. (19) reads their norms through a neighbour max).
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, graph: CSRGraph, with_norms: bool):  # type: ignore[override]
        ctx.graph = graph
        ctx.save_for_backward(a, b)
        s = _sddmm(graph, a, b)
        if not with_norms:
            return s
        return s, sq_norm_nograd(a), sq_norm_nograd(b)

    @staticmethod
    def backward(ctx, grad_s: Tensor, grad_a_sq: Tensor | None = None,  # type: ignore[override]
                 grad_b_sq: Tensor | None = None) -> tuple[Tensor | None, Tensor | None, None, None]:
        a, b = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = _spmm(graph.csr_ptr, graph.csr_col, grad_s, b, graph.shape)
            if grad_a_sq is not None:
                add_sq_norm_grad_(grad_a, a, grad_a_sq)
        if ctx.needs_input_grad[1]:
            grad_b = _spmm(graph.t_csr_ptr, graph.t_csr_col, gather_rows(grad_s, graph.t_perm), a,
                           (graph.num_src, graph.num_dst))
            if grad_b_sq is not None:
                add_sq_norm_grad_(grad_b, b, grad_b_sq, row_sparse=True)
        return grad_a, grad_b, None, None



# Scores under LipschitzNorm lie in [-α, α] (eq. (17)/(19) divide by a Cauchy-Schwarz bound of the raw
# score; GAT's LeakyReLU then maps them into [-α·|slope|, α]), so their softmax needs no per-row
# maximum: a constant shift by the bound b keeps every exponential in [e^{-2b}, 1]. Up to this b the
# 1e-16 guard in the denominator stays below 1e-16·e^{2b} < 1e-8 relative, so both forms agree to
# float rounding; above it the row maximum is used.
MAX_SHIFT_FREE_BOUND = 8.0


class _CSRSoftmax(torch.autograd.Function):
    """Softmax of ``[E, H]`` scores over each target's incoming edges (the CSR rows).

    Same formula and 1e-16 guard as ``torch_geometric.utils.softmax``:
    ``p_e = exp(s_e - m_i) / (Σ_{e' ∈ row i} exp(s_e' - m_i) + 1e-16)``, with ``m_i`` the row maximum,
    or the constant ``bound`` when the scores are known to lie in ``[-bound, bound]``. Why by hand:
    the row sums as ``scatter_add_`` and the per-edge gathers as 1-D ``index_select`` take about half
    the time of PyG's ``segment``/2-D gathers on CPU (PubMed-sized graph, one head), and the bounded
    form skips the segment max (the most expensive edge pass of the three).
    """

    @staticmethod
    def forward(ctx, scores: Tensor, graph: CSRGraph, bound: float | None) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        # Several heads: the 2-D scatter and gathers below are slow (a row-major ``[E, H]`` tensor gathered
        # and scattered row by row); one compiled pass per CSR row instead (4 heads on Fig. 5's
        # tree-depth-5 batches: forward + backward 5.5-6.8 → 3.9-4.3 ms). One head keeps the 1-D passes,
        # which are as fast.
        ctx.rows = scores.size(1) > 1 and kernels.available(scores)
        if ctx.rows:
            p = sparse_kernels.row_softmax(scores, graph.rowptr, bound)
            ctx.save_for_backward(p)
            return p
        row = graph.row
        if bound is None:
            shift = gather_rows(segment(scores, graph.rowptr, reduce="max"), row)
            p = scores.sub(shift).exp_()
        else:
            p = scores.sub(bound).exp_()
        denom = scatter_rows_sum(p, row, graph.num_dst).add_(1e-16)
        p = p.div_(gather_rows(denom, row))
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad_p: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (p,) = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        if ctx.rows:
            return sparse_kernels.row_softmax_backward(grad_p.contiguous(), p, graph.rowptr), None, None
        pg = p * grad_p
        # d softmax: p ⊙ (g − Σ_row p g)
        row_dot = scatter_rows_sum(pg, graph.row, graph.num_dst)
        return pg.addcmul_(p, gather_rows(row_dot, graph.row), value=-1.0), None, None


class _StackedCSR:
    """Index arrays of the ``[H·N_dst, N_src]`` CSR matrix that stacks the heads' matrices ``A_h`` (rows
    ``h·N_dst + i``; values: the heads-first ``[H, E]`` attention values, flat) and of its transpose
    ``[N_src, H·N_dst]`` (row ``j`` holds, head by head, the edges leaving ``j``; ``t_perm`` picks their
    values from the same flat array). Built once per graph and head count."""

    def __init__(self, graph: CSRGraph, heads: int) -> None:
        E, device = graph.num_edges, graph.row.device
        idx = torch.int32 if heads * max(E, graph.num_dst) < 2**31 - 1 else torch.long
        offsets = torch.arange(heads, dtype=torch.long, device=device).mul_(E)
        self.ptr = torch.cat([(graph.rowptr[:-1].unsqueeze(0) + offsets.unsqueeze(1)).reshape(-1),
                              offsets.new_full((1,), heads * E)]).to(idx)
        self.col = graph.col.repeat(heads).to(idx)
        self.pattern_values = torch.zeros(heads * E, device=device)
        # Transposed: row j has H·deg_j entries q = h·deg_j + o (o-th edge leaving j, in t_perm order),
        # columns h·N_dst + t_col ascending.
        deg = graph.t_ptr.diff()
        j = torch.repeat_interleave(torch.arange(graph.num_src, device=device), deg * heads)
        start = graph.t_ptr[:-1] * heads
        q = torch.arange(heads * E, device=device) - start[j]
        h, o = q.div(deg[j], rounding_mode="floor"), q.remainder(deg[j])
        tpos = graph.t_ptr[:-1][j] + o
        self.t_ptr = (graph.t_ptr * heads).to(idx)
        self.t_col = (graph.t_col[tpos] + h * graph.num_dst).to(idx)
        self.t_perm = h * E + graph.t_perm[tpos]


_STACKED: weakref.WeakKeyDictionary[CSRGraph, dict[int, _StackedCSR]] = weakref.WeakKeyDictionary()


def _stacked(graph: CSRGraph, heads: int) -> _StackedCSR:
    per_graph = _STACKED.setdefault(graph, {})
    if heads not in per_graph:
        with torch.inference_mode(False):
            per_graph[heads] = _StackedCSR(graph, heads)
    return per_graph[heads]


class _CSRSpMMShared(torch.autograd.Function):
    """``out[h] = A_h X`` for every head on one shared ``X`` as a single product with the stacked
    ``[H·N_dst, N_src]`` matrix; backward: ``∂X = Σ_h A_hᵀ ∂out_h`` (one product with the stacked
    transpose) and ``∂a_{e,h} = <∂out_{h, row_e}, x_{col_e}>`` (one SDDMM on the stacked pattern)."""

    @staticmethod
    def forward(ctx, values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        heads = values.size(1)
        st = _stacked(graph, heads)
        flat = _heads_first(values).view(-1)
        ctx.graph, ctx.stacked = graph, st
        ctx.save_for_backward(flat, x)
        out = _csr_mm(st.ptr, st.col, flat, x, (heads * graph.num_dst, graph.num_src))
        return out.view(heads, graph.num_dst, x.size(1))

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        flat, x = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        st: _StackedCSR = ctx.stacked
        heads = grad_out.size(0)
        grad = grad_out.reshape(heads * graph.num_dst, -1).contiguous()
        grad_values = grad_x = None
        if ctx.needs_input_grad[0]:
            pattern = _csr(st.ptr, st.col, st.pattern_values.to(x.dtype), (heads * graph.num_dst, graph.num_src))
            grad_values = torch.sparse.sampled_addmm(pattern, grad, x.t(), beta=0.0).values().view(heads, -1).t()
        if ctx.needs_input_grad[1]:
            grad_x = _csr_mm(st.t_ptr, st.t_col, flat.index_select(0, st.t_perm), grad,
                             (graph.num_src, heads * graph.num_dst))
        return grad_values, grad_x, None


class _CSRResidualEnergy(torch.autograd.Function):
    """``e_h = ‖A_h X − X‖²_F`` per head (square graph): the stacked product of :class:`_CSRSpMMShared`,
    the residual formed in its output buffer and reduced by one batched dot product, so no further
    ``[H, N, C]`` tensor is allocated; backward from the saved residual ``R_h``:
    ``∂X = Σ_h (A_hᵀ − I)(2 g_h R_h)``, ``∂a_{e,h} = 2 g_h <R_{h, row_e}, x_{col_e}>``."""

    @staticmethod
    def forward(ctx, values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        heads, n = values.size(1), graph.num_dst
        st = _stacked(graph, heads)
        flat = _heads_first(values).view(-1)
        r = _csr_mm(st.ptr, st.col, flat, x, (heads * n, graph.num_src)).view(heads, n, -1).sub_(x)
        flat_r = r.view(heads, 1, -1)
        ctx.graph, ctx.stacked = graph, st
        if any(ctx.needs_input_grad[:2]):
            ctx.save_for_backward(flat, x, r)
        return torch.bmm(flat_r, flat_r.transpose(1, 2)).view(heads)

    @staticmethod
    def backward(ctx, grad_e: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        flat, x, r = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        st: _StackedCSR = ctx.stacked
        heads, n = r.size(0), graph.num_dst
        grad = (r * (2 * grad_e).view(heads, 1, 1)).view(heads * n, -1)
        grad_values = grad_x = None
        if ctx.needs_input_grad[0]:
            pattern = _csr(st.ptr, st.col, st.pattern_values.to(x.dtype), (heads * n, graph.num_src))
            grad_values = torch.sparse.sampled_addmm(pattern, grad, x.t(), beta=0.0).values().view(heads, -1).t()
        if ctx.needs_input_grad[1]:
            grad_x = _csr_mm(st.t_ptr, st.t_col, flat.index_select(0, st.t_perm), grad, (graph.num_src, heads * n))
            grad_x.sub_(grad.view(heads, n, -1).sum(0))
        return grad_values, grad_x, None


def csr_spmm(values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:
    r"""Weighted neighbourhood sum :math:`\text{out}_{i,h} = \sum_e a_{e,h} x_{col_e,h}` over the rows.

    Args:
        values: ``[E, H]`` edge weights in ``graph``'s edge order (or ``[E]`` for one head).
        x: ``[N_src, H, C]`` (or ``[N_src, C]`` with 1-D ``values``).
    Returns:
        ``[N_dst, H, C]`` (or ``[N_dst, C]``).
    """
    if values.dim() == 1:
        return _CSRSpMM.apply(values.unsqueeze(1), x.unsqueeze(1), graph).squeeze(1)
    return _CSRSpMM.apply(values, x, graph)


def csr_spmm_bias_elu(values: Tensor, x: Tensor, graph: CSRGraph, bias: Tensor | None, alpha: float) -> Tensor:
    r""":math:`\mathrm{ELU}(\text{out} + b)` for :func:`csr_spmm`'s sum with the heads concatenated, ``[N_dst,
    H·C]``: a concatenating attention layer's aggregation (eq. (4)), its bias and the block's ELU.

    On CPU in float32 one compiled pass over the rows applies the bias and the ELU to each row while it is in
    cache (:func:`lipgnn.nn.fused.elementwise_kernels.spmm_bias_elu`), instead of writing the sum and reading it back;
    elsewhere the two operations.

    Args:
        values: ``[E, H]`` edge weights in ``graph``'s edge order.
        x: ``[N_src, H, C]``.
        bias: ``[H·C]`` or ``None``.
        alpha: the ELU's :math:`\alpha`.
    """
    tensors = (values, x) if bias is None else (values, x, bias)
    if x.dtype != torch.float32 or not kernels.available(*tensors) or (bias is not None and bias.dim() != 1):
        return bias_elu(csr_spmm(values, x, graph).reshape(graph.num_dst, -1), bias, alpha)
    return _CSRSpMMBiasELU.apply(values, x.contiguous(), bias, graph, float(alpha))


def csr_spmm_shared(values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:
    r"""Every head's weighted neighbourhood sum of one shared ``x``: :math:`\text{out}_{h,i} =
    \sum_e a_{e,h} x_{col_e}` (:math:`A_h X`), one sparse product for all heads.

    Args:
        values: ``[E, H]`` edge weights in ``graph``'s edge order.
        x: ``[N_src, C]``, the same for every head.
    Returns:
        ``[H, N_dst, C]`` (heads first).
    """
    return _CSRSpMMShared.apply(values, x, graph)


def csr_residual_energy(values: Tensor, x: Tensor, graph: CSRGraph) -> Tensor:
    r"""Per head :math:`\|A_h X - X\|_F^2` for the square graph's matrices :math:`A_h` (values ``[E, H]``,
    ``graph``'s edge order) and ``x`` ``[N, C]`` → ``[H]``; :func:`csr_spmm_shared` without keeping
    :math:`A_h X` (nonlocal message passing's Laplacian energy, Guan & He §4.1)."""
    if graph.num_src != graph.num_dst:
        raise ValueError("the residual A_h X - X needs a square graph (num_src == num_dst)")
    return _CSRResidualEnergy.apply(values, x, graph)


def csr_sddmm(a: Tensor, b: Tensor, graph: CSRGraph) -> Tensor:
    r"""Per-edge dot products :math:`s_{e,h} = \langle a_{row_e,h}, b_{col_e,h} \rangle` → ``[E, H]``."""
    return _CSRSDDMM.apply(a, b, graph, False)


def csr_sddmm_with_norms(a: Tensor, b: Tensor, graph: CSRGraph) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`csr_sddmm` plus the squared norms ``‖a‖², ‖b‖²`` per node and head (``[N, H]`` each)."""
    return _CSRSDDMM.apply(a, b, graph, True)


def csr_softmax(scores: Tensor, graph: CSRGraph, bound: float | None = None) -> Tensor:
    """Softmax of ``[E, H]`` scores over every target's incoming edges (eq. (3) per CSR row).

    ``bound``: a promise that every score lies in ``[-bound, bound]`` (LipschitzNorm's scores do: GT's
    with ``bound = α``, GAT's after LeakyReLU with ``α·max(1, |slope|)``); up to
    :data:`MAX_SHIFT_FREE_BOUND` it replaces the per-row maximum as the shift.
    """
    if bound is not None and not 0 < bound <= MAX_SHIFT_FREE_BOUND:
        bound = None
    return _CSRSoftmax.apply(scores, graph, bound)


# edge-sized elementwise op, and a 2-D ``index_select`` of ``[N, 1]`` rows copies row by row (about
# 4x slower than the same gather on the flat 1-D tensor). LipschitzNorm needs one neighbour maximum
# and one per-target rescaling of the scores, so the functions below do each with the fewest such
# passes, forward and backward, and keep everything else on per-node ``[N, H]`` tensors.


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` for ``[N, K]`` values; ``K == 1`` through the (much faster) 1-D gather."""
    if values.size(1) == 1:
        return values.reshape(-1).index_select(0, index).unsqueeze(1)
    return values.index_select(0, index)


def scatter_rows_sum(values: Tensor, index: Tensor, size: int) -> Tensor:
    """``out[n] = Σ_{e: index[e] = n} values[e]`` → ``[size, K]`` (``scatter_add_``: on CPU faster than
    ``index_add_`` and ``segment_reduce``, also for the sorted CSR rows)."""
    if values.size(1) == 1:
        return values.new_zeros(size).scatter_add_(0, index, values.reshape(-1)).unsqueeze(1)
    return values.new_zeros(size, values.size(1)).scatter_add_(0, index.unsqueeze(1).expand_as(values), values)


class _GATScaledScores(torch.autograd.Function):
    """GAT scores rescaled per target: ``(a_src[j] + a_dst[i]) · k_i`` per edge ``j → i`` (``[E, H]``)
    from per-node ``a_src``, ``a_dst``, ``k`` (``[N, H]``), with ``k = α / c`` of eq. (17), or the plain
    scores ``a_src[j] + a_dst[i]`` for ``k=None``. Two or three gathers forward (1-D for one head);
    backward a scatter per input (``∂a_src``, ``∂a_dst``, ``∂k``)."""

    @staticmethod
    def forward(ctx, a_src: Tensor, a_dst: Tensor, k: Tensor | None, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        ctx.compiled = kernels.available(a_src, a_dst, *([] if k is None else [k]))
        if ctx.compiled:
            # a_src / a_dst are strided views of the node terms: one contiguous copy each (N-sized)
            a_src, a_dst = a_src.contiguous(), a_dst.contiguous()
            ctx.save_for_backward(a_src, a_dst, k)
            return score_kernels.gat_edge_scores(a_src, a_dst, k, graph.row, graph.col)
        raw = gather_rows(a_src, graph.col).add_(gather_rows(a_dst, graph.row))
        if k is None:
            return raw
        k_edge = gather_rows(k, graph.row)
        ctx.save_for_backward(raw, k_edge)
        return raw * k_edge

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor | None, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        grad_k = None
        saved = ctx.saved_tensors  # read once (activation checkpointing allows one unpack)
        if ctx.compiled:
            a_src, a_dst, k = saved
            return (*score_kernels.gat_edge_scores_backward(grad, a_src, a_dst, k, graph.row, graph.col), None)
        if saved:
            raw, k_edge = saved
            grad_raw = grad * k_edge
            grad_k = scatter_rows_sum(grad * raw, graph.row, graph.num_dst)
        else:
            grad_raw = grad
        grad_src = scatter_rows_sum(grad_raw, graph.col, graph.num_src)
        grad_dst = scatter_rows_sum(grad_raw, graph.row, graph.num_dst)
        return grad_src, grad_dst, grad_k, None


class _RowScale(torch.autograd.Function):
    """``s_e · k_{row_e}``: per-edge scores ``[E, H]`` times a per-target factor ``[N_dst, H]``."""

    @staticmethod
    def forward(ctx, s: Tensor, k: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        ctx.compiled = kernels.available(s, k)
        if ctx.compiled:
            ctx.save_for_backward(s, k)
            return score_kernels.row_scale(s, k, graph.row)
        k_edge = gather_rows(k, graph.row)
        ctx.save_for_backward(s, k_edge)
        return s * k_edge

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        if ctx.compiled:
            s, k = ctx.saved_tensors
            return (*score_kernels.row_scale_backward(grad, s, k, graph.row), None)
        s, k_edge = ctx.saved_tensors
        return grad * k_edge, scatter_rows_sum(grad * s, graph.row, graph.num_dst), None


def gat_edge_scores(a_src: Tensor, a_dst: Tensor, k: Tensor | None, graph: CSRGraph) -> Tensor:
    """GAT's per-edge scores ``(a_src[j] + a_dst[i]) · k_i`` (``k=None``: without the factor), ``[E, H]``."""
    return _GATScaledScores.apply(a_src, a_dst, k, graph)


def row_scale(s: Tensor, k: Tensor, graph: CSRGraph) -> Tensor:
    """Per-edge scores ``s`` ``[E, H]`` times the per-target factor ``k`` ``[N_dst, H]``."""
    return _RowScale.apply(s, k, graph)
