r"""CSR fast path for the attention layers (``model.impl=fused``).

PyG's ``MessagePassing`` computes a GAT/GT layer edge by edge: it gathers ``x_j`` for every edge
(``index_select``, an ``[E, H, C]`` tensor), multiplies it by the attention weight and scatters it
back (``scatter_add_``); the backward pass repeats both gathers. On CPU those three ``E×C`` passes
are about 60 % of a deep stack's time. Here every ``E×C`` operation is a sparse-matrix product
instead, with the attention weights as the values of a CSR matrix whose rows are the target nodes:

.. math::
    \text{out}_{i,h} = \sum_{j \in \mathcal{N}(i)} a_{ij,h}\, x_{j,h}
                     = (A_h X_h)_i \qquad \text{(SpMM, eq. (4) of the paper, per head)}

with a hand-written backward (torch's own autograd for sparse values is very slow on CPU):

.. math::
    \frac{\partial L}{\partial X_h} = A_h^\top \frac{\partial L}{\partial \text{out}_h}, \qquad
    \frac{\partial L}{\partial a_{ij,h}} = \Big\langle \frac{\partial L}{\partial \text{out}_{i,h}},
    x_{j,h} \Big\rangle \quad \text{(SDDMM, ``torch.sparse.sampled_addmm``)}.

Everything else is per node (``[N, H, C]``) or per edge and head (``[E, H]`` scalars): the scores
``a_src[j] + a_dst[i]`` (GAT) or ``<q_i, k_j>`` (GT, itself an SDDMM), the LipschitzNorm
denominators (eq. (17)/(19)), the segment softmax over the CSR rows and the attention dropout.
:mod:`lipgnn.nn.lipschitz` defines the denominators; without edge features they depend only on
per-node norms and one neighbour maximum per target, and are computed here in that per-node form
(:func:`gat_denominator_csr`, :func:`transformer_denominator_csr`, built from the shared helpers and
tested equal to the shared functions, values and gradients); with edge features the layers call
the shared functions directly.

On CPU the per-node and per-row passes of LipschitzNorm and of GAT's scores run as compiled loops
(:mod:`lipgnn.nn.kernels`, numba); each has an eager twin here, used for CUDA tensors and tested
equal to it.

The graph is preprocessed once per ``edge_index`` (self-loops as ``GATConv`` adds them, edges sorted
by target then source, the CSR row pointer and the permutation to the transposed CSR) into a
:class:`CSRGraph`, cached by tensor identity so that the ``depth`` layers of a model and every
training step share it.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import add_self_loops as pyg_add_self_loops
from torch_geometric.utils import remove_self_loops, segment

from lipgnn.nn import kernels
from lipgnn.nn.lip_gat_conv import LipGATConv
from lipgnn.nn.lip_transformer_conv import LipTransformerConv
from lipgnn.nn.lipschitz import (
    EPS,
    REFERENCE_GAT_FACTOR,
    check_variant,
    gat_lipschitz_denominator,
    safe_sqrt,
    sq_norm,
    transformer_lipschitz_denominator,
)

__all__ = [
    "CSRGraph",
    "FusedLipGATConv",
    "FusedLipTransformerConv",
    "clear_csr_cache",
    "csr_sddmm",
    "csr_sddmm_with_norms",
    "csr_softmax",
    "csr_spmm",
    "gat_denominator_csr",
    "gat_node_denominator_csr",
    "get_csr_graph",
    "neighbour_max_csr",
    "row_sq_norm",
    "transformer_denominator_csr",
    "transformer_scale_csr",
    "with_sq_norm",
]

# torch warns once per process that CSR tensors are "beta"; consume that warning here so that it
# never surfaces from inside a training step.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.sparse_csr_tensor(torch.zeros(2, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                            torch.zeros(0), (1, 1))


# --------------------------------------------------------------------------------------------------
# Graph preprocessing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CSRGraph:
    r"""A graph in CSR form (rows = target nodes ``i``, columns = source nodes ``j``), built once.

    Edge ``e`` (after sorting by ``(i, j)``) goes from ``col[e]`` to ``row[e]``; ``rowptr`` delimits
    the incoming edges of every target. ``t_perm`` lists the edges sorted by source, so that
    ``(t_ptr, t_col, values[t_perm])`` is the CSR of the transposed matrix used in the backward pass.
    ``edge_index`` is ``[col; row]``, the sorted edges in PyG's layout. ``csr_*`` are int32 copies
    of the CSR indices when they fit (MKL's sparse kernels take 32-bit indices; int64 ones would be
    converted on every call). ``perm`` maps every sorted edge to its position in the edge list produced by PyG's
    ``remove_self_loops`` + ``add_self_loops`` (or in the raw ``edge_index`` without self-loop
    handling), so per-edge features can be brought into the same order.
    """

    num_src: int
    num_dst: int
    row: Tensor
    col: Tensor
    rowptr: Tensor
    t_perm: Tensor
    t_ptr: Tensor
    t_col: Tensor
    perm: Tensor
    self_loops: bool
    edge_index: Tensor
    csr_ptr: Tensor
    csr_col: Tensor
    t_csr_ptr: Tensor
    t_csr_col: Tensor
    num_nonempty: int    # targets with at least one incoming edge (counted once, on the host)

    @property
    def num_edges(self) -> int:
        return int(self.col.numel())

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_dst, self.num_src)

    @classmethod
    def from_edge_index(
        cls, edge_index: Tensor, num_nodes: int, add_self_loops: bool = True, num_dst: int | None = None
    ) -> CSRGraph:
        """Preprocess ``edge_index`` (``[2, E]``, row 0 = source, row 1 = target).

        With ``add_self_loops`` the self-loops are normalised exactly as ``GATConv`` does it
        (existing ones removed, one per node added), so results match the reference layer.
        """
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        num_src = int(num_nodes)
        num_dst = num_src if num_dst is None else int(num_dst)
        edge_index = edge_index.long()
        if edge_index.numel() and (int(edge_index[0].max()) >= num_src or int(edge_index[1].max()) >= num_dst
                                   or int(edge_index.min()) < 0):
            raise ValueError(f"edge_index has node ids outside [0, num_nodes={num_src}); pass the right num_nodes")
        if add_self_loops:
            if num_dst != num_src:
                raise ValueError("self-loops need a square graph (num_dst == num_src)")
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = pyg_add_self_loops(edge_index, num_nodes=num_src)
        src, dst = edge_index[0], edge_index[1]
        # Sorting by (target, source) makes each CSR row's column indices ascending (better locality
        # in the sparse products) and the order deterministic.
        perm = torch.argsort(dst * max(num_src, 1) + src, stable=True)
        row, col = dst[perm], src[perm]
        rowptr = _ptr(row, num_dst)
        t_perm = torch.argsort(col * max(num_dst, 1) + row, stable=True)
        t_ptr = _ptr(col[t_perm], num_src)
        t_col = row[t_perm]
        idx = torch.int32 if max(num_src, num_dst, row.numel()) < 2**31 - 1 else torch.long
        return cls(
            num_src, num_dst, row, col, rowptr, t_perm, t_ptr, t_col, perm, add_self_loops,
            torch.stack([col, row]), rowptr.to(idx), col.to(idx), t_ptr.to(idx), t_col.to(idx),
            int(torch.count_nonzero(rowptr.diff())),
        )

    def edge_values(self, edge_attr: Tensor, edge_index: Tensor, fill_value: float | Tensor | str) -> Tensor:
        """Per-edge features in this graph's edge order, with self-loop features filled like ``GATConv``."""
        if self.self_loops:
            ei, ea = remove_self_loops(edge_index, edge_attr)
            _, ea = pyg_add_self_loops(ei, ea, fill_value=fill_value, num_nodes=self.num_src)
        else:
            ea = edge_attr
        return ea.index_select(0, self.perm)


def _ptr(sorted_index: Tensor, size: int) -> Tensor:
    counts = torch.bincount(sorted_index, minlength=size)
    ptr = torch.zeros(size + 1, dtype=torch.long, device=sorted_index.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr


_CACHE_SIZE = 8
# key -> (weak reference to the edge_index tensor, its version counter, graph)
_CACHE: OrderedDict[tuple, tuple[weakref.ref, int, CSRGraph]] = OrderedDict()


def get_csr_graph(edge_index: Tensor, num_nodes: int, add_self_loops: bool = True) -> CSRGraph:
    """The :class:`CSRGraph` of ``edge_index``, computed once and reused while the tensor lives.

    The cache is keyed by the tensor's identity and validated by a weak reference to it and by its
    in-place version counter: a freed tensor whose address is reused, or an ``edge_index`` modified
    in place, is never served a stale graph.
    """
    key = (id(edge_index), int(num_nodes), bool(add_self_loops), edge_index.device)
    hit = _CACHE.get(key)
    if hit is not None:
        ref, version, graph = hit
        if ref() is edge_index and edge_index._version == version:
            _CACHE.move_to_end(key)
            return graph
        del _CACHE[key]
    graph = CSRGraph.from_edge_index(edge_index, num_nodes, add_self_loops)
    try:
        ref = weakref.ref(edge_index)
    except TypeError:  # pragma: no cover - tensors are weak-referenceable; be safe anyway
        return graph
    _CACHE[key] = (ref, edge_index._version, graph)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return graph


def clear_csr_cache() -> None:
    """Forget every cached :class:`CSRGraph` (frees their index tensors)."""
    _CACHE.clear()


# --------------------------------------------------------------------------------------------------
# Sparse kernels with hand-written backward passes
# --------------------------------------------------------------------------------------------------


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
    vals = _heads_first(values)
    out = x.new_empty(shape[0], heads, x.size(2))
    for h in range(heads):
        out[:, h] = _csr_mm(ptr, col, vals[h], x[:, h], shape)
    return out


def _sddmm(graph: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """``out[e, h] = <a[row_e, h], b[col_e, h]>`` for ``a [N_dst, H, C]``, ``b [N_src, H, C]``."""
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
        graph: CSRGraph = ctx.graph
        grad_out = grad_out.contiguous()
        grad_values = grad_x = None
        if ctx.needs_input_grad[0]:
            grad_values = _sddmm(graph, grad_out, x)
        if ctx.needs_input_grad[1]:
            grad_x = _spmm(graph.t_csr_ptr, graph.t_csr_col, _gather(values, graph.t_perm), grad_out,
                           (graph.num_src, graph.num_dst))
        return grad_values, grad_x, None


# Below this share of non-zero rows the gradient of ‖x‖² is added row by row (measured on CPU,
# PubMed-sized [N, 64]: a full in-place pass ~0.3-1 ms, the indexed one ~0.1 ms at 25 % of rows).
SPARSE_NORM_GRAD_SHARE = 0.5


def _add_sq_norm_grad_(grad_x: Tensor, x: Tensor, grad_sq: Tensor, row_sparse: bool = False) -> Tensor:
    """``grad_x += 2 grad_sq x`` in place (``[N, H, C]``, ``[N, H]``), the gradient of ``‖x‖²``.

    Why the row-sparse branch: eq. (19) uses the key and value norms only through neighbour maxima,
    so ``grad_sq`` is zero except on the nodes that are some target's maximising neighbour (about a
    quarter of PubMed's nodes); on CPU the full pass over ``[N, H, C]`` costs several times the
    indexed update of those rows. ``row_sparse`` says the caller expects that (counting the rows costs
    a pass of its own); GPUs always take the dense pass (no host sync to count the rows).
    """
    if grad_x.is_contiguous() and kernels.available(grad_x, x, grad_sq):
        return kernels.add_sq_norm_grad_(grad_x, x, grad_sq)  # skips zero rows itself
    term = 2 * grad_sq
    if row_sparse and not grad_x.is_cuda and grad_x.dim() == 3:
        rows = term.abs().sum(dim=1).nonzero().squeeze(1)
        if rows.numel() < SPARSE_NORM_GRAD_SHARE * grad_x.size(0):
            update = x.index_select(0, rows).mul_(term.index_select(0, rows).unsqueeze(-1))
            return grad_x.index_add_(0, rows, update)
    return grad_x.addcmul_(x, term.unsqueeze(-1))


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
        return s, _sq_norm(a), _sq_norm(b)

    @staticmethod
    def backward(ctx, grad_s: Tensor, grad_a_sq: Tensor | None = None,  # type: ignore[override]
                 grad_b_sq: Tensor | None = None) -> tuple[Tensor | None, Tensor | None, None, None]:
        a, b = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = _spmm(graph.csr_ptr, graph.csr_col, grad_s, b, graph.shape)
            if grad_a_sq is not None:
                _add_sq_norm_grad_(grad_a, a, grad_a_sq)
        if ctx.needs_input_grad[1]:
            grad_b = _spmm(graph.t_csr_ptr, graph.t_csr_col, _gather(grad_s, graph.t_perm), a,
                           (graph.num_src, graph.num_dst))
            if grad_b_sq is not None:
                _add_sq_norm_grad_(grad_b, b, grad_b_sq, row_sparse=True)
        return grad_a, grad_b, None, None


class _NodeScores(torch.autograd.Function):
    """GAT's per-node score terms ``[N, H, 2]`` (``a_src·Wx``, ``a_dst·Wx``) from the projection
    ``x`` ``[N, H, C]`` and the attention vectors ``att_src``, ``att_dst`` ``[H, C]``, and optionally
    ``‖Wx‖²`` ``[N, H]`` from the same pass (:func:`lipgnn.nn.kernels.gat_node_terms`; eagerly, one
    product with the block-diagonal ``[H·C, 2H]`` matrix of attention vectors and a norm pass).

    The projection itself is passed through as the first output, to be used downstream (the SpMM)
    instead of ``x``. Why: then the whole gradient of ``x`` arrives in this backward, which adds the
    score and norm terms in place to the SpMM's gradient buffer instead of allocating them and
    letting autograd sum the two ``[N, H, C]`` gradients.
    """

    @staticmethod
    def forward(ctx, x: Tensor, att_src: Tensor, att_dst: Tensor, with_norm: bool):  # type: ignore[override]
        ctx.save_for_backward(x, att_src, att_dst)
        ctx.compiled = kernels.available(x, att_src, att_dst)
        if ctx.compiled:
            both, sq = kernels.gat_node_terms(x, att_src, att_dst, with_norm)
        else:
            both = (x.reshape(x.size(0), -1) @ _block_att(att_src, att_dst)).view(x.size(0), x.size(1), 2)
            sq = _sq_norm(x) if with_norm else None
        if not with_norm:
            return x.view_as(x), both
        return x.view_as(x), both, sq

    @staticmethod
    def backward(ctx, grad_pass: Tensor, grad_both: Tensor, grad_sq: Tensor | None = None):  # type: ignore[override]
        x, att_src, att_dst = ctx.saved_tensors
        # grad_pass is the gradient of the pass-through, which in FusedLipGATConv feeds only the
        # SpMM (and, with edge features, the shared denominator): a fresh buffer from the SpMM's
        # backward or autograd's sum, which nothing else reads, so it is accumulated in place.
        grad_x = grad_pass if grad_pass.is_contiguous() else grad_pass.contiguous()
        if ctx.compiled:
            return (*kernels.gat_node_terms_backward(grad_x, x, att_src, att_dst, grad_both, grad_sq), None)
        H, C = att_src.shape
        flat = x.reshape(x.size(0), -1)
        g = grad_both.reshape(x.size(0), -1)
        grad_x.view(x.size(0), -1).addmm_(g, _block_att(att_src, att_dst).t())
        if grad_sq is not None:
            _add_sq_norm_grad_(grad_x, x, grad_sq)
        # The diagonal blocks of the [H·C, 2H] gradient are the attention vectors' gradients.
        grad_att = torch.diagonal((flat.t() @ g).view(H, C, H, 2), dim1=0, dim2=2)  # [C, 2, H]
        return grad_x, grad_att[:, 0].t(), grad_att[:, 1].t(), None


def _block_att(att_src: Tensor, att_dst: Tensor) -> Tensor:
    """Block-diagonal ``[H·C, 2H]``: head ``h``'s ``(a_src, a_dst)`` as columns ``2h, 2h+1``."""
    return torch.block_diag(*[torch.stack([att_src[h], att_dst[h]], dim=-1) for h in range(att_src.size(0))])


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
        row = graph.row
        if bound is None:
            shift = _gather(segment(scores, graph.rowptr, reduce="max"), row)
            p = scores.sub(shift).exp_()
        else:
            p = scores.sub(bound).exp_()
        denom = _scatter_sum(p, row, graph.num_dst).add_(1e-16)
        p = p.div_(_gather(denom, row))
        ctx.graph = graph
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad_p: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (p,) = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        pg = p * grad_p
        # d softmax: p ⊙ (g − Σ_row p g)
        row_dot = _scatter_sum(pg, graph.row, graph.num_dst)
        return pg.addcmul_(p, _gather(row_dot, graph.row), value=-1.0), None, None


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


# --------------------------------------------------------------------------------------------------
# LipschitzNorm denominators per node
# --------------------------------------------------------------------------------------------------
#
# lipgnn.nn.lipschitz is the definition of eq. (17)/(19): its functions take per-edge inputs and
# compute neighbour maxima with a scatter, about 20 edge-sized operations forward and backward. For
# graphs without edge features every quantity there is a function of per-node norms and of one
# neighbour maximum per target, so on the sorted CSR graph the same values come from per-node
# tensors, one gather and a segment max (edges of a target are contiguous). The functions below
# restate the shared formulas in that form, with the shared helpers (safe_sqrt, EPS, the reference
# factor); tests/test_fused.py checks them against the shared functions, values and gradients.
# With edge features the layers call the shared functions directly. Since eq. (17) (paper variant)
# and eq. (19) give one denominator per target node, the layers divide by it per node and apply the
# factor α/c_i in the pass that gathers the scores per edge (:class:`_GATScaledScores`,
# :class:`_RowScale`) instead of building an [E, H] denominator. Why: on a PubMed-sized graph
# (1 thread, fused layer ~40 ms) the shared GAT denominator cost ~14 ms forward+backward per layer,
# the first per-node version ~7 ms, this one ~2-3 ms (GT: ~12 ms, of which ~5 ms are the three
# [N, C] norm passes that eq. (19) needs in any form).


def _sq_norm(x: Tensor) -> Tensor:
    """``‖x‖²`` over the last dim (no autograd; the functions below define the gradient)."""
    if x.dim() == 3 and kernels.available(x):
        return kernels.sq_norm(x)
    return torch.linalg.vector_norm(x, dim=-1).square_()


class _RowSqNorm(torch.autograd.Function):
    """``‖x‖²`` over the last dim: one read forward, one fused ``2 g x`` backward (autograd's
    ``(x * x).sum(-1)`` stores and re-reads more)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return _sq_norm(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return x * (2 * grad).unsqueeze(-1)


# Why the helpers below: on CPU an edge-sized gather, scatter or segment reduction costs 5-20 times an
# edge-sized elementwise op, and a 2-D ``index_select`` of ``[N, 1]`` rows copies row by row (about
# 4x slower than the same gather on the flat 1-D tensor). LipschitzNorm needs one neighbour maximum
# and one per-target rescaling of the scores, so the functions below do each with the fewest such
# passes, forward and backward, and keep everything else on per-node ``[N, H]`` tensors.


def _gather(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` for ``[N, K]`` values; ``K == 1`` through the (much faster) 1-D gather."""
    if values.size(1) == 1:
        return values.reshape(-1).index_select(0, index).unsqueeze(1)
    return values.index_select(0, index)


def _scatter_sum(values: Tensor, index: Tensor, size: int) -> Tensor:
    """``out[n] = Σ_{e: index[e] = n} values[e]`` → ``[size, K]`` (``scatter_add_``: on CPU faster than
    ``index_add_`` and ``segment_reduce``, also for the sorted CSR rows)."""
    if values.size(1) == 1:
        return values.new_zeros(size).scatter_add_(0, index, values.reshape(-1)).unsqueeze(1)
    return values.new_zeros(size, values.size(1)).scatter_add_(0, index.unsqueeze(1).expand_as(values), values)


class _NeighbourMax(torch.autograd.Function):
    """``m_i = max_{j ∈ N(i)} s_j`` for per-node values ``s >= 0`` (``[N_src, K]`` → ``[N_dst, K]``,
    0 for targets without edges): the gather + scatter max of the shared functions in one
    function. Backward sends ``∂L/∂m_i`` to the maximising edges, split evenly between tied ones
    (as the shared functions' scatter max does), and sums them per source node."""

    @staticmethod
    def forward(ctx, s: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        if kernels.available(s):
            m, arg, count = kernels.neighbour_max(s, graph.rowptr, graph.col, graph.num_dst)
            ctx.compiled = True
            ctx.save_for_backward(s, m, arg, count)
            return m
        ctx.compiled = False
        s_edge = _gather(s, graph.col)
        # The inputs are norms (>= 0), so initial=0 gives the empty rows their 0 directly.
        m = torch.segment_reduce(s_edge, "max", offsets=graph.rowptr, initial=0.0)
        ctx.save_for_backward(s_edge, m)
        return m

    @staticmethod
    def backward(ctx, grad_m: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        if ctx.compiled:
            s, m, arg, count = ctx.saved_tensors
            return kernels.neighbour_max_backward(grad_m, s, m, arg, count, graph.rowptr, graph.col), None
        s_edge, m = ctx.saved_tensors
        # 1 on the maximising edges, else 0: m_i - s_e >= 0, so 1 - sign(m_i - s_e) is that indicator
        # (float arithmetic; the boolean eq/where/nonzero kernels are several times slower on CPU).
        is_max = torch.sign(_gather(m, graph.row) - s_edge).neg_().add_(1)
        # Ties (several maximising edges in a row, e.g. a duplicated edge) share the gradient evenly.
        # Every non-empty row has at least one maximising edge, so if the indicator sums to the number
        # of non-empty rows there is no tie and the per-row count (one more scatter) is skipped; the
        # check reads the sum on the host, so on GPUs (no host sync) the count is always taken.
        if is_max.is_cuda or int(is_max.sum()) != graph.num_nonempty * is_max.size(1):
            ties = _scatter_sum(is_max, graph.row, graph.num_dst).clamp_(min=1)
            grad_m = grad_m / ties
        grad_edge = is_max.mul_(_gather(grad_m, graph.row))
        return _scatter_sum(grad_edge, graph.col, graph.num_src), None


class _MaxOfProducts(torch.autograd.Function):
    """``max{u v, u w, v w}`` (eq. (19)) on per-node ``[N, H]`` tensors (``u`` may be ``[1, H]``), equal to
    ``torch.maximum(torch.maximum(u * v, u * w), v * w)`` in value and gradient, ties included
    (torch's ``maximum`` gives each of two equal arguments half the gradient). Why: autograd's
    ``maximum`` backward runs boolean kernels (eq, where, masked_fill), several times slower on CPU
    than the float arithmetic below."""

    @staticmethod
    def forward(ctx, u: Tensor, v: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        uv, uw = u * v, u * w
        t = torch.maximum(uv, uw)
        vw = v * w
        ctx.save_for_backward(u, v, w, uv, uw, t, vw)
        return torch.maximum(t, vw)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        u, v, w, uv, uw, t, vw = ctx.saved_tensors
        # Share of max(x, y)'s gradient that goes to x: 1 if x > y, 1/2 if x == y, 0 if x < y.
        to_t = torch.sign(t - vw).mul_(0.5).add_(0.5)
        to_uv = torch.sign(uv - uw).mul_(0.5).add_(0.5)
        g_t = grad * to_t
        g_uv = g_t * to_uv
        g_uw = g_t - g_uv
        g_vw = grad - g_t
        grad_u = (g_uv * v + g_uw * w).sum_to_size(u.shape)
        grad_v = g_uv * u + g_vw * w
        grad_w = g_uw * u + g_vw * v
        return grad_u, grad_v, grad_w


def neighbour_max_csr(s: Tensor, graph: CSRGraph) -> Tensor:
    """Per-target maximum of the non-negative per-node values ``s`` (``[N_src, K]``) over the sources
    of its incoming edges, ``[N_dst, K]`` (0 for targets without edges)."""
    return _NeighbourMax.apply(s, graph)


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
            return kernels.gat_edge_scores(a_src, a_dst, k, graph.row, graph.col)
        raw = _gather(a_src, graph.col).add_(_gather(a_dst, graph.row))
        if k is None:
            return raw
        k_edge = _gather(k, graph.row)
        ctx.save_for_backward(raw, k_edge)
        return raw * k_edge

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor | None, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        grad_k = None
        saved = ctx.saved_tensors  # read once (activation checkpointing allows one unpack)
        if ctx.compiled:
            a_src, a_dst, k = saved
            return (*kernels.gat_edge_scores_backward(grad, a_src, a_dst, k, graph.row, graph.col), None)
        if saved:
            raw, k_edge = saved
            grad_raw = grad * k_edge
            grad_k = _scatter_sum(grad * raw, graph.row, graph.num_dst)
        else:
            grad_raw = grad
        grad_src = _scatter_sum(grad_raw, graph.col, graph.num_src)
        grad_dst = _scatter_sum(grad_raw, graph.row, graph.num_dst)
        return grad_src, grad_dst, grad_k, None


class _RowScale(torch.autograd.Function):
    """``s_e · k_{row_e}``: per-edge scores ``[E, H]`` times a per-target factor ``[N_dst, H]``."""

    @staticmethod
    def forward(ctx, s: Tensor, k: Tensor, graph: CSRGraph) -> Tensor:  # type: ignore[override]
        ctx.graph = graph
        ctx.compiled = kernels.available(s, k)
        if ctx.compiled:
            ctx.save_for_backward(s, k)
            return kernels.row_scale(s, k, graph.row)
        k_edge = _gather(k, graph.row)
        ctx.save_for_backward(s, k_edge)
        return s * k_edge

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:  # type: ignore[override]
        graph: CSRGraph = ctx.graph
        if ctx.compiled:
            s, k = ctx.saved_tensors
            return (*kernels.row_scale_backward(grad, s, k, graph.row), None)
        s, k_edge = ctx.saved_tensors
        return grad * k_edge, _scatter_sum(grad * s, graph.row, graph.num_dst), None


class _WithSqNorm(torch.autograd.Function):
    """``(x, ‖x‖²)``: ``x`` passed through with its squared norm over the last dim. Why: when ``x`` also
    feeds another op (GT's values feed the SpMM), a separate :class:`_RowSqNorm` makes autograd
    allocate ``2 g x`` and add it to the SpMM's gradient, two extra ``[N, H, C]`` passes and an
    allocation; here the whole gradient of ``x`` arrives in one backward, which adds ``2 g x`` to it
    in place (one fused pass)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.save_for_backward(x)
        return x.view_as(x), _sq_norm(x)

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_sq: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        # Neither gradient is None (autograd materialises unused outputs' gradients as zeros).
        # grad_x is the SpMM backward's own fresh buffer (nothing else holds it): add in place.
        return _add_sq_norm_grad_(grad_x if grad_x.is_contiguous() else grad_x.contiguous(), x, grad_sq, True)


def with_sq_norm(x: Tensor) -> tuple[Tensor, Tensor]:
    """A view of ``x`` to use downstream instead of ``x``, and ``‖x‖²`` over the last dimension; the
    gradients of both reach ``x`` in one fused backward.

    Contract: the view may only feed operations whose backward returns a fresh gradient buffer (such
    as :func:`csr_spmm`), because that buffer is updated in place; an op that hands one gradient
    tensor to several inputs (``view + y``) would see the update in ``y``'s gradient too."""
    return _WithSqNorm.apply(x)


def row_sq_norm(x: Tensor) -> Tensor:
    """Squared Euclidean norm over the last dimension (same value as ``lipschitz.sq_norm``)."""
    return _RowSqNorm.apply(x)


def _att_sq_norm(*atts: Tensor | None) -> Tensor:
    """Per-head squared norm of the concatenated ``[1, H, C]`` attention vectors, ``[H]``."""
    return sum(sq_norm(a[0]) for a in atts if a is not None)  # type: ignore[return-value]


def gat_denominator_csr(
    sq_src: Tensor, sq_dst: Tensor | None, att_src: Tensor, att_dst: Tensor | None, graph: CSRGraph,
    variant: str = "paper", eps: float = EPS,
) -> Tensor:
    r"""Eq. (17) denominators ``[E, H]`` in ``graph``'s edge order from the squared projection norms
    ``sq_src = ‖Wx_j‖²``, ``sq_dst = ‖Wx_i‖²`` (``[N, H]``; ``sq_dst=None`` without a target term):
    equal to ``lipschitz.gat_lipschitz_denominator(x_src, x_dst, att_src, att_dst, graph.edge_index)``
    without edge features.

    paper: :math:`c_i = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j \in \mathcal{N}(i)}
    \|\mathbf{W}x_j\|^2}` per target, gathered per edge; reference:
    :math:`c_{ij} = 4 \|\mathbf{a}\|_F \sqrt{\max_{k \in \mathcal{N}(i)} \|\mathbf{W}x_k\|^2 +
    \|\mathbf{W}x_j\|^2}`.
    """
    check_variant(variant)
    if variant == "paper":
        return _gather(gat_node_denominator_csr(sq_src, sq_dst, att_src, att_dst, graph, eps), graph.row)
    nb_max = neighbour_max_csr(sq_src, graph)  # [N_dst, H]
    att_sq = _att_sq_norm(att_src, att_dst if sq_dst is not None else None)
    q = safe_sqrt(att_sq.sum(), eps)
    per_edge = _gather(nb_max, graph.row) + _gather(sq_src, graph.col)  # max_k ‖W x_k‖² + ‖W x_j‖²
    return REFERENCE_GAT_FACTOR * q * safe_sqrt(per_edge, eps) + eps


def gat_node_denominator_csr(
    sq_src: Tensor, sq_dst: Tensor | None, att_src: Tensor, att_dst: Tensor | None, graph: CSRGraph,
    eps: float = EPS,
) -> Tensor:
    r"""Eq. (17) (``variant="paper"``) per *target node*, ``[N_dst, H]``:
    :math:`c_i = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j} \|\mathbf{W}x_j\|^2} + \epsilon`
    (:func:`gat_denominator_csr` gathers it per edge)."""
    nb_max = neighbour_max_csr(sq_src, graph)  # [N_dst, H]
    att_sq = _att_sq_norm(att_src, att_dst if sq_dst is not None else None)
    per_node = nb_max if sq_dst is None else nb_max + sq_dst
    return safe_sqrt(att_sq, eps) * safe_sqrt(per_node, eps) + eps


def transformer_denominator_csr(
    q_sq: Tensor, k_sq: Tensor, v_sq: Tensor, graph: CSRGraph, variant: str = "paper", eps: float = EPS
) -> Tensor:
    r"""Eq. (19) denominators per *target node* ``[N_dst, H]`` (gather with ``graph.row``) from the
    squared norms of queries, keys and values (``[N, H]`` each): equal to
    ``lipschitz.transformer_lipschitz_denominator(query[row], key[col], value[col], row)``.

    :math:`v_i = \max_{j} \|k_j\|`, :math:`w_i = \max_j \|v_j\|`, :math:`u_i = \|q_i\|` (paper) or
    :math:`u = \|Q\|_F` over the per-edge queries, i.e. :math:`\sqrt{\sum_i \deg(i) \|q_i\|^2}`
    (reference); :math:`c_i = \max\{u v_i, u w_i, v_i w_i\} + \epsilon^2` (the shared function's
    guard), and 1 for targets without in-edges (they have no scores).
    """
    check_variant(variant)
    # max_j √(s_j + ε²) = √(max_j s_j + ε²) (√ is increasing; same gradient, ties included): the
    # square roots are taken after the neighbour maxima, on the targets. Empty rows differ (0 vs ε)
    # but get c = 1 below. Two [N, H] maxima rather than one over [N, 2H]: with one head each is 1-D.
    v_i = safe_sqrt(neighbour_max_csr(k_sq, graph), eps)
    w_i = safe_sqrt(neighbour_max_csr(v_sq, graph), eps)
    if variant == "paper":
        u = safe_sqrt(q_sq, eps)
    else:
        degree = (graph.rowptr[1:] - graph.rowptr[:-1]).to(q_sq.dtype).unsqueeze(-1)
        u = safe_sqrt((q_sq * degree).sum(dim=0), eps).unsqueeze(0)
    c = _MaxOfProducts.apply(u, v_i, w_i) + eps * eps
    # A target without in-edges has v = w = 0, so c = ε² there: never used forward, but α / c's
    # gradient α / c² would overflow float32 (0 · inf = NaN). Give those rows c = 1.
    no_edges = (graph.rowptr[1:] == graph.rowptr[:-1]).unsqueeze(-1)
    return torch.where(no_edges, torch.ones_like(c), c)


class _Eq19Scale(torch.autograd.Function):
    """Eq. (19)'s ``α / c_i`` (paper variant) in one compiled per-node pass and its hand-written
    backward (:func:`lipgnn.nn.kernels.eq19_scale`); equal in value and gradient to ``α`` divided by
    :func:`transformer_denominator_csr`, which takes about 25 small per-node operations for it."""

    @staticmethod
    def forward(ctx, q_sq: Tensor, k_max: Tensor, v_max: Tensor, graph: CSRGraph, alpha: float,  # type: ignore[override]
                eps: float) -> Tensor:
        ctx.graph, ctx.alpha, ctx.eps = graph, alpha, eps
        scale, uvw = kernels.eq19_scale(q_sq, k_max, v_max, graph.rowptr, alpha, eps)
        ctx.save_for_backward(uvw)
        return scale

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (uvw,) = ctx.saved_tensors
        grads = kernels.eq19_scale_backward(grad, uvw, ctx.graph.rowptr, ctx.alpha, ctx.eps)
        return (*grads, None, None, None)


class _NeighbourMaxPair(torch.autograd.Function):
    """:func:`neighbour_max_csr` of two inputs (GT's key and value norms) in one compiled loop over
    the rows (CPU only; the eager path takes the two maxima separately)."""

    @staticmethod
    def forward(ctx, s1: Tensor, s2: Tensor, graph: CSRGraph) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.graph = graph
        (m1, a1, c1), (m2, a2, c2) = kernels.neighbour_max_pair(s1, s2, graph.rowptr, graph.col, graph.num_dst)
        ctx.save_for_backward(s1, m1, a1, c1, s2, m2, a2, c2)
        return m1, m2

    @staticmethod
    def backward(ctx, g1: Tensor, g2: Tensor):  # type: ignore[override]
        s1, m1, a1, c1, s2, m2, a2, c2 = ctx.saved_tensors
        graph: CSRGraph = ctx.graph
        return (kernels.neighbour_max_backward(g1, s1, m1, a1, c1, graph.rowptr, graph.col),
                kernels.neighbour_max_backward(g2, s2, m2, a2, c2, graph.rowptr, graph.col), None)


def transformer_scale_csr(
    q_sq: Tensor, k_sq: Tensor, v_sq: Tensor, graph: CSRGraph, alpha: float, channels: int,
    variant: str = "paper", eps: float = EPS,
) -> Tensor:
    r"""The per-target factor that multiplies GT's dot products :math:`q_i^\top k_j` under
    LipschitzNorm, ``[N_dst, H]``: :math:`\alpha / c_i` (paper) or :math:`\alpha / (c_i \sqrt{d})`
    (reference, ``d = channels``), with :math:`c_i` of eq. (19) (:func:`transformer_denominator_csr`)."""
    if variant == "paper" and kernels.available(q_sq, k_sq, v_sq):
        k_max, v_max = _NeighbourMaxPair.apply(k_sq, v_sq, graph)
        return _Eq19Scale.apply(q_sq, k_max, v_max, graph, alpha, eps)
    c = transformer_denominator_csr(q_sq, k_sq, v_sq, graph, variant, eps)
    return alpha / c if variant == "paper" else alpha / (c * math.sqrt(channels))


# --------------------------------------------------------------------------------------------------
# Fused layer forwards (shared by the Lip subclasses below)
# --------------------------------------------------------------------------------------------------


def _finish_heads(out: Tensor, concat: bool) -> Tensor:
    return out.reshape(out.size(0), -1) if concat else out.mean(dim=1)


def _fallback_reason(x: object, edge_index: object, size: object, return_attention_weights: object) -> str | None:
    """Why an input cannot take the CSR path (``None`` if it can); those calls use the reference path."""
    if not isinstance(x, Tensor):
        return "bipartite (x_src, x_dst) input"
    if isinstance(edge_index, CSRGraph):
        return None
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        return "sparse adjacency input"
    if size is not None:
        return "explicit size"
    if return_attention_weights is not None:
        return "return_attention_weights"
    return None


def _resolve_graph(edge_index: Tensor | CSRGraph, num_nodes: int, self_loops: bool) -> CSRGraph:
    if isinstance(edge_index, CSRGraph):
        if edge_index.num_src != num_nodes or edge_index.self_loops != self_loops:
            raise ValueError(
                f"CSRGraph was built for {edge_index.num_src} nodes with self_loops={edge_index.self_loops}, "
                f"the layer needs {num_nodes} nodes with self_loops={self_loops}"
            )
        return edge_index
    return get_csr_graph(edge_index, num_nodes, self_loops)


class FusedLipGATConv(LipGATConv):
    r""":class:`~lipgnn.nn.LipGATConv` computed on a cached CSR graph (``model.impl=fused``).

    Same constructor, parameters, ``state_dict`` and results as the reference layer (equal within
    float rounding, tested to 1e-5 for values and gradients), i.e. GAT's

    .. math::
        x_i' = \Big\Vert_{h} \sum_{j \in \mathcal{N}(i) \cup \{i\}} a_{ij,h}\, \mathbf{W}_h x_j,
        \qquad a_{ij,h} = \mathrm{softmax}_j\big(\mathrm{LeakyReLU}(\alpha\, e_{ij,h} / c_{ij,h})\big),

    with :math:`e_{ij,h} = \mathbf{a}_{src,h}^\top \mathbf{W}_h x_j + \mathbf{a}_{dst,h}^\top
    \mathbf{W}_h x_i` and :math:`c` LipschitzNorm's denominator (eq. 17: :func:`gat_denominator_csr`,
    or :func:`~lipgnn.nn.lipschitz.gat_lipschitz_denominator` with edge features; without
    LipschitzNorm :math:`c = \alpha = 1`). The per-node terms (both score halves and
    :math:`\|\mathbf{W}x\|^2`) come from one pass over the projection, the scores are gathered per
    edge, the softmax runs over CSR rows
    (:func:`csr_softmax`) and the weighted sum is one SpMM per head (:func:`csr_spmm`), so no
    ``[E, H, C]`` tensor is formed unless edge features are used.

    ``edge_index`` may also be a prebuilt :class:`CSRGraph` (``add_self_loops`` must match).
    Inputs the CSR path does not cover (bipartite ``(x_src, x_dst)``, sparse adjacency, explicit
    ``size``, ``return_attention_weights``) run the reference :class:`LipGATConv` forward.
    """

    def forward(  # type: ignore[override]
        self,
        x: Tensor | tuple[Tensor, Tensor | None],
        edge_index: Tensor | CSRGraph,
        edge_attr: Tensor | None = None,
        size: tuple[int, int] | None = None,
        return_attention_weights: bool | None = None,
    ):
        if _fallback_reason(x, edge_index, size, return_attention_weights) is not None:
            if isinstance(edge_index, CSRGraph):
                raise ValueError("a CSRGraph edge_index only works with a single node-feature tensor x")
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        assert isinstance(x, Tensor)
        H, C = self.heads, self.out_channels
        graph = _resolve_graph(edge_index, x.size(0), self.add_self_loops)
        res = self.res(x) if self.res is not None else None
        if self.lin is not None:
            x_src = x_dst = self.lin(x).view(-1, H, C)
        else:
            x_src = self.lin_src(x).view(-1, H, C)
            x_dst = self.lin_dst(x).view(-1, H, C)

        if graph.num_edges == 0:
            out = x_src.new_zeros(graph.num_dst, H, C)
        else:
            edge_proj = None
            if edge_attr is not None and self.lin_edge is not None:
                if isinstance(edge_index, CSRGraph):
                    raise ValueError("edge_attr needs the edge_index tensor, not a CSRGraph")
                ea = graph.edge_values(edge_attr, edge_index, self.fill_value)
                if ea.dim() == 1:
                    ea = ea.view(-1, 1)
                edge_proj = self.lin_edge(ea).view(-1, H, C)
            # The squared norms ‖Wx‖² of eq. (17) come with the score terms (same pass over Wx)
            # unless edge features send the layer to the shared per-edge function.
            need_sq = self.lipschitz_norm and edge_proj is None
            shared = x_dst is x_src
            x_src, a_src, a_dst, sq_src, sq_dst = self._node_terms(x_src, x_dst, need_sq)
            if shared:
                x_dst = x_src  # every later use goes through the pass-through (one gradient buffer)
            bound = None
            if need_sq and self.variant == "paper":
                # Eq. (17)'s c_i is one value per target, so α / c_i is computed per node and applied
                # in the same pass that gathers the score terms per edge (no [E, H] denominator).
                c = gat_node_denominator_csr(sq_src, sq_dst, self.att_src, self.att_dst, graph)
                score = _GATScaledScores.apply(a_src, a_dst, self.alpha / c, graph)
                # c_i bounds |a·[Wx_i ‖ Wx_j]| (Cauchy-Schwarz), so |score| <= α before LeakyReLU.
                bound = self.alpha * max(1.0, abs(self.negative_slope))
            else:
                score = self._plain_or_edge_scores(a_src, a_dst, sq_src, sq_dst, x_src, x_dst, edge_proj, graph)
            score = F.leaky_relu(score, self.negative_slope)
            alpha = csr_softmax(score, graph, bound)
            alpha = F.dropout(alpha, p=self.dropout, training=self.training)
            out = csr_spmm(alpha, x_src, graph)

        out = _finish_heads(out, self.concat)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias
        return out

    def _plain_or_edge_scores(
        self, a_src: Tensor, a_dst: Tensor, sq_src: Tensor | None, sq_dst: Tensor | None, x_src: Tensor,
        x_dst: Tensor, edge_proj: Tensor | None, graph: CSRGraph,
    ) -> Tensor:
        """Scores ``[E, H]`` before LeakyReLU without LipschitzNorm, with edge features or with the
        reference variant (whose denominator varies along a target's edges)."""
        score = _GATScaledScores.apply(a_src, a_dst, None, graph)  # [E, H]
        if edge_proj is not None:
            score = score + (edge_proj * self.att_edge).sum(-1)
        if not self.lipschitz_norm:
            return score
        if edge_proj is None:
            denom = gat_denominator_csr(sq_src, sq_dst, self.att_src, self.att_dst, graph, self.variant)
        else:
            denom = gat_lipschitz_denominator(
                x_src, x_dst, self.att_src, self.att_dst, graph.edge_index, graph.num_dst,
                edge_proj=edge_proj, att_edge=self.att_edge, variant=self.variant,
            )
        return self.alpha * score / denom

    def _node_terms(
        self, x_src: Tensor, x_dst: Tensor, with_norms: bool
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """The projection to use downstream (a pass-through of ``x_src`` for a shared projection, see
        :class:`_NodeScores`), ``a_src·Wx_j``, ``a_dst·Wx_i`` (``[N, H]``) and, if asked,
        ``‖Wx_j‖²``, ``‖Wx_i‖²``."""
        if x_dst is not x_src:  # separate lin_src / lin_dst projections
            a_src, a_dst = (x_src * self.att_src).sum(-1), (x_dst * self.att_dst).sum(-1)
            if not with_norms:
                return x_src, a_src, a_dst, None, None
            return x_src, a_src, a_dst, row_sq_norm(x_src), row_sq_norm(x_dst)
        if not with_norms:
            x_pass, both = _NodeScores.apply(x_src, self.att_src[0], self.att_dst[0], False)
            return x_pass, both[..., 0], both[..., 1], None, None
        x_pass, both, sq = _NodeScores.apply(x_src, self.att_src[0], self.att_dst[0], True)
        return x_pass, both[..., 0], both[..., 1], sq, sq


class FusedLipTransformerConv(LipTransformerConv):
    r""":class:`~lipgnn.nn.LipTransformerConv` computed on a cached CSR graph (``model.impl=fused``).

    Same constructor, parameters, ``state_dict`` and results as the reference layer (equal within
    float rounding, tested to 1e-5 for values and gradients): per head,

    .. math::
        x_i' = \mathbf{W}_1 x_i + \sum_{j \in \mathcal{N}(i)} a_{ij}\, v_j,\qquad
        a_{ij} = \mathrm{softmax}_j\big(q_i^\top k_j / c_{ij}\big),

    with :math:`c = \sqrt{d}` without LipschitzNorm and eq. (19)'s
    :math:`\max\{u v, u w, v w\}/\alpha` with it (times :math:`\sqrt{d}` for
    ``variant="reference"``), from :func:`transformer_denominator_csr` (or
    :func:`~lipgnn.nn.lipschitz.transformer_lipschitz_denominator` with edge features).
    The dot products :math:`q_i^\top k_j` are one SDDMM per head (:func:`csr_sddmm`), the weighted
    sum one SpMM (:func:`csr_spmm`); eq. (19) only needs the norms :math:`\|q_i\|, \|k_j\|,
    \|v_j\|`, so they are computed per node and gathered per edge as scalars. Edge features
    (``edge_dim``) are supported with per-edge tensors for their terms. Inputs the CSR path does not
    cover (bipartite input, sparse adjacency, ``return_attention_weights``, ``edge_attr`` without
    ``edge_dim``) run the reference :class:`LipTransformerConv` forward.
    """

    def forward(  # type: ignore[override]
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Tensor | CSRGraph,
        edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None,
    ):
        reason = _fallback_reason(x, edge_index, None, return_attention_weights)
        if reason is None and edge_attr is not None and self.lin_edge is None:
            reason = "edge_attr without edge_dim"
        if reason is not None:
            if isinstance(edge_index, CSRGraph):
                raise ValueError(f"a CSRGraph edge_index cannot be used with {reason}")
            return super().forward(x, edge_index, edge_attr, return_attention_weights)
        assert isinstance(x, Tensor)
        H, C = self.heads, self.out_channels
        graph = _resolve_graph(edge_index, x.size(0), False)
        query = self.lin_query(x).view(-1, H, C)
        key = self.lin_key(x).view(-1, H, C)
        value = self.lin_value(x).view(-1, H, C)

        if graph.num_edges == 0:
            out = value.new_zeros(graph.num_dst, H, C)
        else:
            edge_proj = None
            if edge_attr is not None:
                if isinstance(edge_index, CSRGraph):
                    raise ValueError("edge_attr needs the edge_index tensor, not a CSRGraph")
                edge_proj = self.lin_edge(graph.edge_values(edge_attr, edge_index, 0.0)).view(-1, H, C)
            sq_norms = None
            if self.lipschitz_norm and edge_proj is None:
                # Eq. (19) needs ‖q‖², ‖k‖²: the SDDMM computes them from the same inputs.
                dot, q_sq, k_sq = csr_sddmm_with_norms(query, key, graph)
                value, v_sq = with_sq_norm(value)
                sq_norms = (q_sq, k_sq, v_sq)
            else:
                dot = csr_sddmm(query, key, graph)  # [E, H]
            if edge_proj is not None:
                dot = dot + (query.index_select(0, graph.row) * edge_proj).sum(-1)
            if not self.lipschitz_norm:
                score = dot / math.sqrt(C)
            elif sq_norms is not None:
                # Eq. (19)'s c_i is one value per target: scale the dot products by a per-node factor
                # in one gather (the reference variant also has the 1/√d of the plain scores).
                scale = transformer_scale_csr(*sq_norms, graph, self.alpha, C, self.variant)  # [N_dst, H]
                score = _RowScale.apply(dot, scale, graph)
            else:
                assert edge_proj is not None  # the per-node branch above covers the rest
                denom = self._edge_lip_denominator(query, key, value, edge_proj, graph)
                if self.variant == "paper":
                    score = self.alpha * dot / denom
                else:
                    score = self.alpha * (dot / math.sqrt(C)) / denom
            # Eq. (19)'s c_i bounds |q_i·k_j| by Cauchy-Schwarz: u v_i >= ‖q_i‖‖k_j‖ with u = ‖q_i‖
            # (paper) or u = ‖Q‖_F >= ‖q_i‖ (reference, whose extra 1/√d only shrinks the score), so
            # the per-node scores lie in [-α, α].
            alpha = csr_softmax(score, graph, self.alpha if sq_norms is not None else None)
            alpha = F.dropout(alpha, p=self.dropout, training=self.training)
            out = csr_spmm(alpha, value, graph)
            if edge_proj is not None:
                # TransformerConv adds the edge embedding to the values: Σ_j a_ij e_ij per target.
                out = out + segment(alpha.unsqueeze(-1) * edge_proj, graph.rowptr, reduce="sum")

        out = _finish_heads(out, self.concat)
        if self.root_weight:
            x_r = self.lin_skip(x)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        return out

    def _edge_lip_denominator(
        self, query: Tensor, key: Tensor, value: Tensor, edge_proj: Tensor, graph: CSRGraph
    ) -> Tensor:
        """Eq. (19) denominators per edge ``[E, H]`` with edge features (without them the forward uses
        the per-node :func:`transformer_denominator_csr`): the edge embeddings enter the key (and, for
        the paper variant, value) norms per edge."""
        row, col = graph.row, graph.col
        raw_value = value.index_select(0, col)
        return transformer_lipschitz_denominator(
            query.index_select(0, row), key.index_select(0, col) + edge_proj,
            raw_value + edge_proj if self.variant == "paper" else raw_value, row, graph.num_dst,
            variant=self.variant,
        )
