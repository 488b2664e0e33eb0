r"""``GatedGraphConv`` on the CSR fast path (``model=ggnn``, ``model.impl=auto|fused`` on CPU).

Li et al.'s gated graph network (ICLR 2016, eqs. (1)–(6)) as PyG's ``GatedGraphConv`` computes it, for
:math:`L` = ``num_layers`` steps with :math:`h^{(0)} = x \,\Vert\, 0`:

.. math::
    m_i^{(l+1)} = \sum_{j \in \mathcal{N}(i)} \Theta^{(l)} h_j^{(l)}, \qquad
    h_i^{(l+1)} = \mathrm{GRU}\big(m_i^{(l+1)}, h_i^{(l)}\big).

PyG sums the messages edge by edge (a gather of ``[E, C]`` rows and a scatter back, and the same again
backward). Here the sum is one product with the graph's 0/1 CSR matrix (:func:`~lipgnn.nn.fused.sparse.csr_spmm`,
MKL on CPU; no self-loops are added, as PyG adds none) and the GRU is :func:`lipgnn.nn.fused.gru.gru_cell`
(one compiled loop each way around the gate GEMMs). Every copy of a parallel edge counts, on both paths.
Inputs the CSR path does not cover (edge weights, a sparse adjacency, an aggregation other than ``add``,
``flow="target_to_source"``) go to PyG's own forward. The layer is a drop-in subclass: same constructor,
parameters and ``state_dict``; results equal PyG's within float rounding (``tests/test_fused_ggnn.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import GatedGraphConv

from lipgnn.nn.fused.base import plain_csr_input, reference_forward
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph, unit_edge_weights
from lipgnn.nn.fused.gru import gru_cell
from lipgnn.nn.fused.sparse import csr_spmm

__all__ = ["FusedGatedGraphConv"]

class FusedGatedGraphConv(GatedGraphConv):
    """:class:`torch_geometric.nn.GatedGraphConv` with the message sum as one CSR product and a compiled GRU
    cell (module docstring)."""

    #: Feature dropout in front of this layer (:class:`lipgnn.models.blocks.GNNBlock`): the compiled dropout,
    #: equal in distribution to ``F.dropout`` and several times faster on CPU.
    feature_dropout = staticmethod(dropout)

    def forward(self, x: Tensor, edge_index: Tensor | CSRGraph,  # type: ignore[override]
                edge_weight: Tensor | None = None) -> Tensor:
        if not (self.aggr == "add" and self.flow == "source_to_target"
                and plain_csr_input(x, edge_index, edge_weight)):
            return reference_forward(super().forward, x, edge_index, edge_weight, "GatedGraphConv")
        if x.size(-1) > self.out_channels:
            raise ValueError("The number of input channels is not allowed to be larger than the number of "
                             "output channels")
        if x.size(-1) < self.out_channels:
            x = torch.cat([x, x.new_zeros(x.size(0), self.out_channels - x.size(-1))], dim=1)
        graph = resolve_graph(edge_index, x.size(0), False)
        ones = unit_edge_weights(graph, x.dtype)
        for i in range(self.num_layers):
            m = csr_spmm(ones, (x @ self.weight[i]).unsqueeze(1), graph).squeeze(1)
            x = gru_cell(m, x, self.rnn)
        return x
