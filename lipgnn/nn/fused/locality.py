r"""Locality order: a deep fused stack runs on its graph relabelled in reverse Cuthill–McKee order, with
every dropout decision drawn in the caller's coordinates, so the run itself does not change.

With :math:`\pi` the reverse Cuthill–McKee order (``order[k]`` is the caller's label of node ``k``) and
:math:`P` its permutation matrix, a deep model's blocks :math:`B` are computed as

.. math::
    B(X, A) = P^\top B'(P X,\; P A P^\top),

where :math:`B'` is :math:`B` with every dropout mask read in the caller's coordinates: feature dropout
decides row ``k``'s elements as the caller's row ``order[k]`` (``CSRGraph.node_order``), attention dropout
decides edge ``e`` as the caller's CSR edge ``edge_order[e]`` (:func:`lipgnn.nn.fused.dropout.dropout`'s
``rows``). Every other part of a GAT/GT/SAN block (projections, LipschitzNorm's per-target maxima, the
row softmax, the aggregation, ELU, LayerNorm, PairNorm's means, the FFN) is equivariant to :math:`P`, and
the nonlocal factor's energies :math:`\|P_h X - X\|^2` are invariant to it, so the identity holds in
training too: same masks, same outputs and gradients, up to the order of the floating-point sums
(``tests/test_locality.py``). A run's records and id are unchanged.

Why: the sparse products gather the rows of each target's neighbours. In PubMed's own order those rows
lie far apart (mean :math:`|i - j|` over edges 6526; 3392 in RCM order), so the products wait on memory;
relabelled, a 30-layer step ran 8-14 % faster and a whole training run 1.20x (docs/performance.md).
``dataset.reorder=rcm`` (:mod:`lipgnn.data.reorder`) gets the same locality by relabelling the data, which
draws different masks and so is a different run; this module keeps the run and moves only memory.

Used by :class:`lipgnn.models.deep.DeepGNN` when every block says it supports it (fused GAT/GT convs and
SAN blocks, nonlocal or not; no edge features), the compiled CPU kernels run (on other devices the masks
come from ``F.dropout``, which cannot be read in other coordinates) and the graph has at least
:data:`MIN_NODES` nodes, or :data:`MIN_NODES_DEEP` for a stack of :data:`DEEP_STACK` blocks or more.
Forward hooks on a block (layer tracing) turn it off, since a hook would see rows in the relabelled order.
"""

from __future__ import annotations

import dataclasses
import weakref

import torch
from torch import Tensor, nn

from lipgnn.nn.fused import kernels
from lipgnn.nn.fused.graph import CSRGraph, get_csr_graph

__all__ = ["DEEP_STACK", "MIN_NODES", "MIN_NODES_DEEP", "Relabelled", "relabel", "stack_graph"]

#: The relabelling costs a permutation of the input and of the output per forward, and pays back in every
#: layer's gathers: a stack relabels from MIN_NODES nodes, or from MIN_NODES_DEEP nodes when it has at least
#: DEEP_STACK blocks. Training steps on Cora (2,708 nodes, hidden 64, dropouts on), relabelled against the
#: caller's order in alternating rounds: GAT 30 layers 10.4 % faster (15 of 16 rounds), GAT-Lip 30 layers
#: 5.5 % (14 of 16), GAT-Lip 8 layers 3.0 % (15 of 20), but GAT 2 layers 4.1 % slower (faster in 9 of 30);
#: a 256-layer SAN 6.0 % faster; PubMed (19,717 nodes) GAT-Lip 2 layers 2.1 % faster (13 of 20)
#: (docs/performance.md, "The 256-layer SAN step").
MIN_NODES = 8192
MIN_NODES_DEEP = 2048
DEEP_STACK = 8


@dataclasses.dataclass(frozen=True, eq=False)
class Relabelled:
    """A graph relabelled for locality: ``graph`` (``node_order`` and ``edge_order`` set) and ``inverse``,
    the new label of every caller's node (``inverse[order[k]] = k``)."""

    graph: CSRGraph
    inverse: Tensor


_CACHE: weakref.WeakKeyDictionary[CSRGraph, Relabelled] = weakref.WeakKeyDictionary()


def rcm_order(graph: CSRGraph) -> Tensor:
    """The reverse Cuthill–McKee order of ``graph``'s symmetrised pattern (scipy's, as ``dataset.reorder``)."""
    from lipgnn.data.reorder import rcm_order as order_of

    return order_of(graph.edge_index.cpu(), graph.num_src).to(graph.row.device)


def relabel(graph: CSRGraph, order: Tensor) -> Relabelled:
    """``graph`` with node ``order[k]`` renamed ``k``: the CSR of :math:`P A P^\\top` with ``node_order =
    order`` and ``edge_order`` the position in ``graph``'s CSR of every edge of the new one."""
    if graph.num_src != graph.num_dst:
        raise ValueError("relabelling needs a square graph (num_dst == num_src)")
    if order.numel() != graph.num_src:
        raise ValueError(f"order has {order.numel()} entries for {graph.num_src} nodes")
    with torch.inference_mode(False):
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        # graph.edge_index lists the edges in graph's CSR order, self-loops already normalised, so the
        # new graph's perm (sorted edge -> position in that list) is exactly the edge map; the stable
        # sort keeps parallel edges in their original relative order.
        new = CSRGraph.from_edge_index(inverse[graph.edge_index], graph.num_src, add_self_loops=False)
        new = dataclasses.replace(new, self_loops=graph.self_loops, perm=graph.perm[new.perm],
                                  node_order=order, edge_order=new.perm)
    return Relabelled(new, inverse)


def _hooked(blocks: nn.ModuleList) -> bool:
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for block in blocks for m in block.modules())


def stack_graph(blocks: nn.ModuleList, edge_index: Tensor, h: Tensor) -> Relabelled | None:
    """The relabelled graph for running ``blocks`` on ``h`` (``[N, F]``) and ``edge_index``, or ``None``
    where the stack runs in the caller's order (see the module docstring for when)."""
    num_nodes = h.size(0)
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        return None
    if len(blocks) == 0 or not all(getattr(block, "accepts_node_order", False) for block in blocks):
        return None
    if num_nodes < (MIN_NODES_DEEP if len(blocks) >= DEEP_STACK else MIN_NODES):
        return None
    if not kernels.available(h) or _hooked(blocks):
        return None
    loops = {block.conv.graph_self_loops() for block in blocks}
    if len(loops) != 1:
        return None
    graph = get_csr_graph(edge_index, num_nodes, loops.pop())
    relabelled = _CACHE.get(graph)
    if relabelled is None:
        relabelled = _CACHE[graph] = relabel(graph, rcm_order(graph))
    return relabelled
