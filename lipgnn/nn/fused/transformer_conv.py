r"""Graph Transformer with LipschitzNorm on the CSR fast path (``model.impl=fused``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch_geometric.utils import segment

from lipgnn.nn.fused.base import CSRHeads, fallback_reason, finish_heads
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph
from lipgnn.nn.fused.lipschitz_csr import transformer_scale_csr
from lipgnn.nn.fused.norms import row_sq_norm, with_sq_norm
from lipgnn.nn.fused.sparse import csr_sddmm, csr_sddmm_with_norms, csr_softmax, csr_spmm, gather_rows, row_scale
from lipgnn.nn.lip_transformer_conv import LipTransformerConv
from lipgnn.nn.lipschitz import transformer_lipschitz_denominator

__all__ = ["FusedLipTransformerConv"]


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
    ``edge_dim``, a score other than ``"dot"`` combined with LipschitzNorm or edge features) run the
    reference :class:`LipTransformerConv` forward. Callers that need the attention matrices themselves
    (nonlocal message passing) get them with the aggregation from :meth:`csr_heads`, on the CSR path.

    Scores: :meth:`_attention_logits` is the one place the logits are formed from the SDDMM's dot products.
    Besides the dot product it computes the L2 score of Kim et al. without LipschitzNorm,
    :math:`-\|q_i - k_j\|^2 / \sqrt{d}` (``score="l2"`` on the reference layer): since
    :math:`-\|q_i\|^2` is the same for all edges of a target it cancels in the softmax, leaving the
    per-source term :math:`(2 q_i^\top k_j - \|k_j\|^2) / \sqrt{d}`.
    """

    # Feature dropout on this layer's input: deep models call ``conv.feature_dropout(x, p, training)``
    # where present (same distribution as ``F.dropout``, several times faster on CPU).
    feature_dropout = staticmethod(dropout)
    #: The layer runs on a relabelled :class:`CSRGraph` and draws its attention dropout in the caller's
    #: edge coordinates (``graph.edge_order``), so deep models may relabel for locality
    #: (:mod:`lipgnn.nn.fused.locality`).
    accepts_node_order = True

    def graph_self_loops(self) -> bool:
        """Whether this layer's :class:`CSRGraph` carries one self-loop per node."""
        return False

    def forward(  # type: ignore[override]
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Tensor | CSRGraph,
        edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None,
    ):
        reason = self._csr_fallback_reason(x, edge_index, edge_attr, return_attention_weights)
        if reason is not None:
            if isinstance(edge_index, CSRGraph):
                raise ValueError(f"a CSRGraph edge_index cannot be used with {reason}")
            return super().forward(x, edge_index, edge_attr, return_attention_weights)
        assert isinstance(x, Tensor)
        out = self._csr_heads(x, edge_index, edge_attr).heads
        out = finish_heads(out, self.concat)
        if self.root_weight:
            x_r = self.lin_skip(x)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        return out

    def _csr_fallback_reason(
        self, x: object, edge_index: object, edge_attr: Tensor | None, return_attention_weights: object
    ) -> str | None:
        """Why this input takes the reference path (``None``: the CSR path covers it)."""
        reason = fallback_reason(x, edge_index, None, return_attention_weights)
        if reason is None and edge_attr is not None and self.lin_edge is None:
            reason = "edge_attr without edge_dim"
        if reason is None and self._score_kind() != "dot" and (self.lipschitz_norm or edge_attr is not None):
            reason = f"score={self._score_kind()!r} with LipschitzNorm or edge features"
        return reason

    def csr_heads(self, x: Tensor, edge_index: Tensor | CSRGraph, edge_attr: Tensor | None = None) -> CSRHeads | None:
        r"""The per-head aggregation :math:`\sum_j a_{ij,h} v_{j,h}` with the CSR graph and the attention
        weights :math:`a` (before attention dropout, as ``return_attention_weights`` gives them), for
        callers that need :math:`P_h` itself (nonlocal message passing's :math:`\|P_h X - X\|^2`)
        without the reference path that ``return_attention_weights`` takes; ``None`` for inputs the
        CSR path does not cover. The root term ``lin_skip(x)`` is not included."""
        if self._csr_fallback_reason(x, edge_index, edge_attr, None) is not None:
            return None
        return self._csr_heads(x, edge_index, edge_attr)

    def _csr_heads(self, x: Tensor, edge_index: Tensor | CSRGraph, edge_attr: Tensor | None) -> CSRHeads:
        H, C = self.heads, self.out_channels
        graph = resolve_graph(edge_index, x.size(0), self.graph_self_loops())
        query = self.lin_query(x).view(-1, H, C)
        key = self.lin_key(x).view(-1, H, C)
        value = self.lin_value(x).view(-1, H, C)

        if graph.num_edges == 0:
            return CSRHeads(value.new_zeros(graph.num_dst, H, C), value.new_zeros(0, H), value, graph)
        edge_proj = None
        if edge_attr is not None:
            if isinstance(edge_index, CSRGraph):
                raise ValueError("edge_attr needs the edge_index tensor, not a CSRGraph")
            edge_proj = self.lin_edge(graph.edge_values(edge_attr, edge_index, 0.0)).view(-1, H, C)
        score, value, bound = self._attention_logits(query, key, value, edge_proj, graph)
        weights = csr_softmax(score, graph, bound)
        alpha = dropout(weights, self.dropout, self.training, rows=graph.edge_order)
        out = csr_spmm(alpha, value, graph)
        if edge_proj is not None:
            # TransformerConv adds the edge embedding to the values: Σ_j a_ij e_ij per target.
            out = out + segment(alpha.unsqueeze(-1) * edge_proj, graph.rowptr, reduce="sum")
        return CSRHeads(out, weights, value, graph)

    def _score_kind(self) -> str:
        """``"dot"`` or ``"l2"``: the reference layer's ``score`` option (``"dot"`` where it has none)."""
        return getattr(self, "score", "dot")

    def _attention_logits(
        self, query: Tensor, key: Tensor, value: Tensor, edge_proj: Tensor | None, graph: CSRGraph
    ) -> tuple[Tensor, Tensor, float | None]:
        """The softmax's input ``[E, H]``, the values to use downstream (a pass-through of ``value`` when
        eq. (19) reads its norms) and a bound ``b`` with every score in ``[-b, b]`` (``None``: unknown).

        A score that adds a per-source term to the dot product (as the L2 score does) gathers it per
        edge here, after the SDDMM; a per-target term cancels in the softmax and is left out.
        """
        C = self.out_channels
        if self.lipschitz_norm and edge_proj is None:
            # Eq. (19) needs ‖q‖², ‖k‖²: the SDDMM computes them from the same inputs.
            dot, q_sq, k_sq = csr_sddmm_with_norms(query, key, graph)
            value, v_sq = with_sq_norm(value)
            # Eq. (19)'s c_i is one value per target: scale the dot products by a per-node factor in one
            # gather (the reference variant also has the 1/√d of the plain scores).
            scale = transformer_scale_csr(q_sq, k_sq, v_sq, graph, self.alpha, C, self.variant)  # [N_dst, H]
            # c_i bounds |q_i·k_j| by Cauchy-Schwarz: u v_i >= ‖q_i‖‖k_j‖ with u = ‖q_i‖ (paper) or
            # u = ‖Q‖_F >= ‖q_i‖ (reference, whose extra 1/√d only shrinks the score): |score| <= α.
            return row_scale(dot, scale, graph), value, self.alpha
        dot = csr_sddmm(query, key, graph)  # [E, H]
        if edge_proj is not None:
            dot = dot + (query.index_select(0, graph.row) * edge_proj).sum(-1)
        if not self.lipschitz_norm:
            if self._score_kind() == "l2":
                # -‖q_i - k_j‖² = 2 q_i·k_j - ‖k_j‖² - ‖q_i‖², the last term constant per target.
                return (2 * dot - gather_rows(row_sq_norm(key), graph.col)) / math.sqrt(C), value, None
            return dot / math.sqrt(C), value, None
        assert edge_proj is not None  # the per-node branch above covers the rest
        denom = self._edge_lip_denominator(query, key, value, edge_proj, graph)
        if self.variant == "paper":
            return self.alpha * dot / denom, value, None
        return self.alpha * (dot / math.sqrt(C)) / denom, value, None

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
