r"""``GINConv`` on the CSR fast path (``model=gin``, ``model.impl=auto|fused`` on CPU).

Xu et al.'s graph isomorphism network (ICLR 2019, eq. (4.1)) as PyG's ``GINConv`` computes it:

.. math::
    x_i' = h_\Theta\Big((1 + \epsilon)\, x_i + \sum_{j \in \mathcal{N}(i)} x_j\Big).

PyG sums the neighbours edge by edge (a gather of ``[E, C]`` rows and a scatter back, and the same again
backward); here the sum is one product with the graph's 0/1 CSR matrix (:func:`~lipgnn.nn.fused.sparse.csr_spmm`,
MKL on CPU; no self-loops are added, as PyG adds none; parallel edges counted), and :math:`h_\Theta` is the
layer's own ``nn``. Bipartite input, an explicit ``size`` and a sparse adjacency go to PyG's forward. A drop-in
subclass: same constructor, parameters and ``state_dict``; results equal PyG's within float rounding
(``tests/test_fused_gin.py``).
"""

from __future__ import annotations

from torch import Tensor
from torch_geometric.nn import GINConv

from lipgnn.nn.fused.base import plain_csr_input, reference_forward
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph, unit_edge_weights
from lipgnn.nn.fused.sparse import csr_spmm

__all__ = ["FusedGINConv"]


class FusedGINConv(GINConv):
    """:class:`torch_geometric.nn.GINConv` with the neighbour sum as one CSR product (module docstring)."""

    #: Feature dropout in front of this layer (:class:`lipgnn.models.blocks.GNNBlock`): the compiled dropout,
    #: equal in distribution to ``F.dropout`` and several times faster on CPU.
    feature_dropout = staticmethod(dropout)

    def forward(self, x: Tensor, edge_index: Tensor | CSRGraph,  # type: ignore[override]
                size: tuple[int, int] | None = None) -> Tensor:
        if size is not None or self.flow != "source_to_target" or not plain_csr_input(x, edge_index, None):
            return reference_forward(super().forward, x, edge_index, size, "GINConv")
        graph = resolve_graph(edge_index, x.size(0), False)
        out = csr_spmm(unit_edge_weights(graph, x.dtype), x.unsqueeze(1), graph).squeeze(1)
        return self.nn(out + (1 + self.eps) * x)
