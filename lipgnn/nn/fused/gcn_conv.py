r"""``GCNConv`` on the CSR fast path (``model=gcn``, ``model.impl=auto|fused`` on CPU).

Kipf & Welling's propagation rule (ICLR 2017, eq. (2)), as PyG's ``GCNConv`` computes it:

.. math::
    X' = \hat D^{-1/2} \hat A \hat D^{-1/2} X \Theta + b, \qquad \hat A = A + I,\quad
    \hat D_{ii} = \sum_j \hat A_{ij},

i.e. :math:`x'_i = \sum_{j \in \mathcal{N}(i) \cup \{i\}} \frac{1}{\sqrt{\hat d_i \hat d_j}}\, \Theta x_j + b`
with :math:`\hat d` the in-degree counting the self-loop. PyG evaluates the sum edge by edge (a gather of
``[E, C]`` rows, a scale, a scatter back, and the same again backward) and recomputes the normalisation
(``gcn_norm``: self-loops, degrees) in every layer and every forward. Here the normalised weights are the
values of a CSR matrix built once per graph (cached with the :class:`~lipgnn.nn.fused.graph.CSRGraph`) and the
sum is one sparse-matrix product (:func:`~lipgnn.nn.fused.sparse.csr_spmm`, MKL on CPU): a 64-channel layer
on PubMed, forward + backward, took 13–22 ms against PyG's 68–77 ms (``docs/performance.md``).

Self-loops: ``gcn_norm`` adds the *remaining* self-loops, which without edge weights is exactly what the CSR
graph does (existing self-loops removed, one per node added), so the degrees and weights are the same; every
copy of a parallel edge counts, on both paths. Inputs the CSR path does not cover (edge weights, a sparse adjacency,
``normalize=False``, ``improved=True``, ``add_self_loops=False``, ``cached=True``) go to PyG's own forward.
The layer is a drop-in subclass: same constructor, parameters and ``state_dict``; results equal PyG's within
float rounding (``tests/test_fused_gcn.py``).
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv

from lipgnn.nn.fused.base import plain_csr_input, reference_forward
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph
from lipgnn.nn.fused.sparse import csr_spmm

__all__ = ["FusedGCNConv", "gcn_edge_weights"]

# graph -> {dtype: [E, 1] normalised weights}; dropped with the graph (the graph cache holds a few)
_WEIGHTS: weakref.WeakKeyDictionary[CSRGraph, dict[torch.dtype, Tensor]] = weakref.WeakKeyDictionary()


def gcn_edge_weights(graph: CSRGraph, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""``[E, 1]``: :math:`1/\sqrt{\hat d_i \hat d_j}` for every edge ``(j → i)`` of ``graph`` (which must carry
    its self-loops), in its CSR order; cached per graph and dtype."""
    per_dtype = _WEIGHTS.setdefault(graph, {})
    weights = per_dtype.get(dtype)
    if weights is None:
        # Outside inference mode, as the graph itself: weights first made under torch.inference_mode (an
        # evaluation, a diagnostic) would be inference tensors, which a later training forward cannot save.
        with torch.inference_mode(False):
            deg = graph.rowptr.diff().to(dtype)  # in-degree of each target, self-loop included
            inv_sqrt = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
            weights = (inv_sqrt[graph.row] * inv_sqrt[graph.col]).unsqueeze(1)
        per_dtype[dtype] = weights
    return weights


class FusedGCNConv(GCNConv):
    """:class:`torch_geometric.nn.GCNConv` with the propagation as one CSR product (module docstring)."""

    #: Feature dropout in front of this layer (:class:`lipgnn.models.blocks.GNNBlock`): the compiled dropout,
    #: equal in distribution to ``F.dropout`` and several times faster on CPU.
    feature_dropout = staticmethod(dropout)

    def _pyg_defaults(self) -> bool:
        """The options under which GCNConv's propagation is the cached normalised CSR product."""
        return bool(self.normalize and self.add_self_loops and not self.improved and not self.cached
                    and self.flow == "source_to_target")

    def forward(self, x: Tensor, edge_index: Tensor | CSRGraph,  # type: ignore[override]
                edge_weight: Tensor | None = None) -> Tensor:
        if not (self._pyg_defaults() and plain_csr_input(x, edge_index, edge_weight)):
            return reference_forward(super().forward, x, edge_index, edge_weight, "GCNConv")
        graph = resolve_graph(edge_index, x.size(0), True)
        h = self.lin(x)
        out = csr_spmm(gcn_edge_weights(graph, h.dtype), h.unsqueeze(1), graph).squeeze(1)
        return out if self.bias is None else out + self.bias
