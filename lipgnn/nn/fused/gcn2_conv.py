r"""``GCN2Conv`` on the CSR fast path (``model=gcnii``, ``model.impl=auto|fused`` on CPU).

GCNII's layer (Chen et al., ICML 2020, eq. (5)), as PyG's ``GCN2Conv`` computes it with shared weights:

.. math::
    X' = \big((1 - \alpha)\, \hat P X + \alpha X_0\big)\big((1 - \beta_l) I + \beta_l W\big), \qquad
    \hat P = \hat D^{-1/2} \hat A \hat D^{-1/2},\quad \beta_l = \log(\theta / l + 1),

with :math:`\hat A = A + I`. PyG forms :math:`\hat P X` edge by edge and recomputes the normalisation
(``gcn_norm``) in every layer and every forward; here :math:`\hat P` is the CSR matrix of
:class:`~lipgnn.nn.fused.gcn_conv.FusedGCNConv` (the same normalised weights, built once per graph) and the
product one sparse-matrix product. The initial residual and the identity mapping are PyG's own tensor
operations, in its order. The feature dropout in front of the layer is the compiled one (equal in distribution
to ``F.dropout``). Inputs the CSR path does not cover (edge weights, a sparse adjacency, ``normalize=False``,
``add_self_loops=False``, ``cached=True``) go to PyG's forward. A drop-in subclass: same constructor, parameters
and ``state_dict``; results equal PyG's within float rounding (``tests/test_fused_gcn2.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import GCN2Conv

from lipgnn.nn.fused.base import plain_csr_input, reference_forward
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.gcn_conv import gcn_edge_weights
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph
from lipgnn.nn.fused.sparse import csr_spmm

__all__ = ["FusedGCN2Conv"]


class FusedGCN2Conv(GCN2Conv):
    """:class:`torch_geometric.nn.GCN2Conv` with the propagation as one CSR product (module docstring)."""

    #: Feature dropout in front of this layer (:class:`lipgnn.models.blocks.GNNBlock`): the compiled dropout,
    #: equal in distribution to ``F.dropout`` and several times faster on CPU.
    feature_dropout = staticmethod(dropout)

    def _pyg_defaults(self) -> bool:
        """The options under which GCN2Conv's propagation is the cached normalised CSR product."""
        return bool(self.normalize and self.add_self_loops and not self.cached and self.flow == "source_to_target")

    def forward(self, x: Tensor, x_0: Tensor, edge_index: Tensor | CSRGraph,  # type: ignore[override]
                edge_weight: Tensor | None = None) -> Tensor:
        if not (self._pyg_defaults() and plain_csr_input(x, edge_index, edge_weight)):
            def pyg_forward(h: Tensor, edges: Tensor, weight: Tensor | None) -> Tensor:
                return GCN2Conv.forward(self, h, x_0, edges, weight)

            return reference_forward(pyg_forward, x, edge_index, edge_weight, "GCN2Conv")
        graph = resolve_graph(edge_index, x.size(0), True)
        h = csr_spmm(gcn_edge_weights(graph, x.dtype), x.unsqueeze(1), graph).squeeze(1)
        # PyG's GCN2Conv.forward from here on, operation for operation (its in-place scaling out of place: the
        # product's output is a view).
        h = h * (1 - self.alpha)
        x_0 = self.alpha * x_0[:h.size(0)]
        if self.weight2 is None:
            out = h.add_(x_0)
            return torch.addmm(out, out, self.weight1, beta=1. - self.beta, alpha=self.beta)
        out = torch.addmm(h, h, self.weight1, beta=1. - self.beta, alpha=self.beta)
        return out + torch.addmm(x_0, x_0, self.weight2, beta=1. - self.beta, alpha=self.beta)
