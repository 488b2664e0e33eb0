"""The CSR form of a graph that the fused layers run on, built once per ``edge_index`` and cached."""

from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor
from torch_geometric.utils import add_self_loops as pyg_add_self_loops
from torch_geometric.utils import remove_self_loops

__all__ = ["CSRGraph", "clear_csr_cache", "get_csr_graph", "resolve_graph", "unit_edge_weights"]

# torch warns once per process that CSR tensors are "beta"; consume that warning here so that it
# never surfaces from inside a training step.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.sparse_csr_tensor(torch.zeros(2, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                            torch.zeros(0), (1, 1))


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
    handling), so per-edge features can be brought into the same order. ``node_order`` /
    ``edge_order`` are set only on a graph relabelled by :mod:`lipgnn.nn.fused.locality`.
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
    # Set on a graph relabelled for locality (lipgnn.nn.fused.locality): the caller's label of every
    # node and the caller's CSR position of every edge, which dropout decisions are drawn for.
    node_order: Tensor | None = None
    edge_order: Tensor | None = None

    @property
    def num_edges(self) -> int:
        return int(self.col.numel())

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_dst, self.num_src)

    @cached_property
    def max_degree(self) -> int:
        """The most incoming edges of any target (0 without edges): the size of per-row scratch buffers, counted
        once per graph rather than on every call that needs it."""
        return int(self.rowptr.diff().max()) if self.num_dst else 0

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
# key -> (weak reference to the edge_index tensor, its version counter or, for an inference tensor
# (which has none), a copy of its values, graph)
_CACHE: OrderedDict[tuple, tuple[weakref.ref, int | Tensor, CSRGraph]] = OrderedDict()


def _version(edge_index: Tensor) -> int | Tensor:
    """What detects an in-place change: the version counter, or a copy of an inference tensor's values
    (an ``E``-sized comparison per lookup, small beside a layer's work)."""
    return edge_index.clone() if edge_index.is_inference() else edge_index._version


def _unchanged(edge_index: Tensor, version: int | Tensor) -> bool:
    if isinstance(version, Tensor):
        return edge_index.is_inference() and torch.equal(edge_index, version)
    return not edge_index.is_inference() and edge_index._version == version


def get_csr_graph(edge_index: Tensor, num_nodes: int, add_self_loops: bool = True) -> CSRGraph:
    """The :class:`CSRGraph` of ``edge_index``, computed once and reused while the tensor lives.

    The cache is keyed by the tensor's identity and validated by a weak reference to it and by its
    in-place version counter (an inference tensor has none: its values are compared instead): a freed
    tensor whose address is reused, or an ``edge_index`` modified in place, is never served a stale graph.
    """
    key = (id(edge_index), int(num_nodes), bool(add_self_loops), edge_index.device)
    hit = _CACHE.get(key)
    if hit is not None:
        ref, version, graph = hit
        if ref() is edge_index and _unchanged(edge_index, version):
            _CACHE.move_to_end(key)
            return graph
        del _CACHE[key]
    # Built outside inference mode: a graph first met in an evaluation pass is reused by training,
    # whose backward saves its index tensors (inference tensors cannot be saved).
    with torch.inference_mode(False):
        graph = CSRGraph.from_edge_index(edge_index, num_nodes, add_self_loops)
    try:
        ref = weakref.ref(edge_index)
    except TypeError:  # pragma: no cover - tensors are weak-referenceable; be safe anyway
        return graph
    _CACHE[key] = (ref, _version(edge_index), graph)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return graph


def clear_csr_cache() -> None:
    """Forget every cached :class:`CSRGraph` (frees their index tensors)."""
    _CACHE.clear()


def resolve_graph(edge_index: Tensor | CSRGraph, num_nodes: int, self_loops: bool) -> CSRGraph:
    """The layer's graph: a prebuilt :class:`CSRGraph` (checked against the layer) or the cached one."""
    if isinstance(edge_index, CSRGraph):
        if edge_index.num_src != num_nodes or edge_index.self_loops != self_loops:
            raise ValueError(
                f"CSRGraph was built for {edge_index.num_src} nodes with self_loops={edge_index.self_loops}, "
                f"the layer needs {num_nodes} nodes with self_loops={self_loops}"
            )
        return edge_index
    return get_csr_graph(edge_index, num_nodes, self_loops)


# graph -> {dtype: [E, 1] ones}; dropped with the graph
_ONES: weakref.WeakKeyDictionary[CSRGraph, dict[torch.dtype, Tensor]] = weakref.WeakKeyDictionary()


def unit_edge_weights(graph: CSRGraph, dtype: torch.dtype) -> Tensor:
    """``[E, 1]`` ones: the values of ``graph``'s 0/1 CSR matrix (plain neighbour sums); cached per graph and dtype."""
    per_dtype = _ONES.setdefault(graph, {})
    ones = per_dtype.get(dtype)
    if ones is None:
        # Outside inference mode (as the graph itself): a later training forward saves it.
        with torch.inference_mode(False):
            ones = torch.ones(graph.num_edges, 1, dtype=dtype, device=graph.row.device)
        per_dtype[dtype] = ones
    return ones
