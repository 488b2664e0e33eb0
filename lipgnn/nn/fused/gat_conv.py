r"""GAT with LipschitzNorm on the CSR fast path (``model.impl=fused``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parameter import is_lazy
from torch_geometric.nn.conv import MessagePassing

from lipgnn.nn.fused import gat_one_head, gat_small, kernels, score_kernels
from lipgnn.nn.fused.activation import bias_elu
from lipgnn.nn.fused.base import CSRHeads, fallback_reason, finish_heads
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph
from lipgnn.nn.fused.lipschitz_csr import gat_denominator_csr, gat_node_denominator_csr
from lipgnn.nn.fused.norms import add_sq_norm_grad_, row_sq_norm, sq_norm_nograd
from lipgnn.nn.fused.sparse import csr_softmax, csr_spmm, csr_spmm_bias_elu, gat_edge_scores
from lipgnn.nn.lip_gat_conv import LipGATConv
from lipgnn.nn.lipschitz import gat_lipschitz_denominator

__all__ = ["FusedLipGATConv"]


class _NodeScores(torch.autograd.Function):
    """GAT's per-node score terms ``[N, H, 2]`` (``a_src·Wx``, ``a_dst·Wx``) from the projection
    ``x`` ``[N, H, C]`` and the attention vectors ``att_src``, ``att_dst`` ``[H, C]``, and optionally
    ``‖Wx‖²`` ``[N, H]`` from the same pass (:func:`lipgnn.nn.fused.score_kernels.gat_node_terms`; eagerly, one
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
            both, sq = score_kernels.gat_node_terms(x, att_src, att_dst, with_norm)
        else:
            both = (x.reshape(x.size(0), -1) @ _block_att(att_src, att_dst)).view(x.size(0), x.size(1), 2)
            sq = sq_norm_nograd(x) if with_norm else None
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
            return (*score_kernels.gat_node_terms_backward(grad_x, x, att_src, att_dst, grad_both, grad_sq), None)
        H, C = att_src.shape
        flat = x.reshape(x.size(0), -1)
        g = grad_both.reshape(x.size(0), -1)
        grad_x.view(x.size(0), -1).addmm_(g, _block_att(att_src, att_dst).t())
        if grad_sq is not None:
            add_sq_norm_grad_(grad_x, x, grad_sq)
        # The diagonal blocks of the [H·C, 2H] gradient are the attention vectors' gradients.
        grad_att = torch.diagonal((flat.t() @ g).view(H, C, H, 2), dim1=0, dim2=2)  # [C, 2, H]
        return grad_x, grad_att[:, 0].t(), grad_att[:, 1].t(), None


def _block_att(att_src: Tensor, att_dst: Tensor) -> Tensor:
    """Block-diagonal ``[H·C, 2H]``: head ``h``'s ``(a_src, a_dst)`` as columns ``2h, 2h+1``."""
    return torch.block_diag(*[torch.stack([att_src[h], att_dst[h]], dim=-1) for h in range(att_src.size(0))])


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
    ``size``, ``return_attention_weights``) run the reference :class:`LipGATConv` forward. Callers that
    need the attention matrices themselves (nonlocal message passing) get them with the aggregation
    from :meth:`csr_heads`, on the CSR path.
    """

    # Feature dropout on this layer's input: deep models call ``conv.feature_dropout(x, p, training)``
    # where present (same distribution as ``F.dropout``, several times faster on CPU).
    feature_dropout = staticmethod(dropout)
    #: The layer runs on a relabelled :class:`CSRGraph` and draws its attention dropout in the caller's
    #: edge coordinates (``graph.edge_order``), so deep models may relabel for locality
    #: (:mod:`lipgnn.nn.fused.locality`).
    accepts_node_order = True
    #: PyG generates ``edge_updater`` per class from the type comments in its ``forward``, which this forward has
    #: not; without its own entry the class would inherit the one generated for GATConv (once a stock GATConv
    #: exists in the process), whose signature lacks LipGATConv's ``x_proj`` and breaks the reference fallback.
    #: The generic one reads the inspected ``edge_update`` instead.
    edge_updater = MessagePassing.edge_updater

    def graph_self_loops(self) -> bool:
        """Whether this layer's :class:`CSRGraph` carries one self-loop per node."""
        return bool(self.add_self_loops)
    #: ``forward`` takes ``activation=`` (deep models pass their block's activation, see :meth:`forward`).
    applies_activation = True

    def forward(  # type: ignore[override]
        self,
        x: Tensor | tuple[Tensor, Tensor | None],
        edge_index: Tensor | CSRGraph,
        edge_attr: Tensor | None = None,
        size: tuple[int, int] | None = None,
        return_attention_weights: bool | None = None,
        *,
        activation: nn.Module | None = None,
    ):
        """The layer's output, or ``activation`` of it. For an ELU (``torch.nn.ELU`` or
        :class:`lipgnn.nn.fused.ELU`, not in place) the activation is applied with the bias add in one
        pass each way (:func:`~lipgnn.nn.fused.activation.bias_elu`) instead of two; deep models pass
        it where nothing sits between the layer and its activation (:class:`lipgnn.models.blocks.GNNBlock`)."""
        if fallback_reason(x, edge_index, size, return_attention_weights) is not None:
            if isinstance(edge_index, CSRGraph):
                raise ValueError("a CSRGraph edge_index only works with a single node-feature tensor x")
            result = super().forward(x, edge_index, edge_attr, size, return_attention_weights)
            if activation is None:
                return result
            return (activation(result[0]), result[1]) if isinstance(result, tuple) else activation(result)
        fold = isinstance(activation, nn.ELU) and not activation.inplace
        out = self._forward_csr(x, edge_index, edge_attr, float(activation.alpha) if fold else None)
        return activation(out) if activation is not None and not fold else out

    def _forward_csr(self, x: Tensor, edge_index: Tensor | CSRGraph, edge_attr: Tensor | None,
                     elu_alpha: float | None) -> Tensor:
        """The CSR forward; with ``elu_alpha`` the bias add and an ELU in one pass."""
        assert isinstance(x, Tensor)
        if self._takes_one_operation(x, edge_attr):
            graph = resolve_graph(edge_index, x.size(0), self.graph_self_loops())
            if gat_one_head.applies(x, graph, self.heads, self.out_channels):
                return gat_one_head.one_head_gat(
                    x, self.lin.weight, *self._att_vectors(), self.bias, graph, self.negative_slope,
                    float(self.alpha) if self.lipschitz_norm else None,
                    attn_dropout=float(self.dropout) if self.training else 0.0, elu_alpha=elu_alpha)
            if gat_small.applies(x, graph, self.heads, self.out_channels):
                # float32 folds the ELU into the layer's row visits; float64 keeps bias_elu (torch's exact ELU)
                fold = elu_alpha is not None and x.dtype == torch.float32
                bias = self.bias if elu_alpha is None or fold else None
                out = gat_small.small_gat(x, self.lin.weight, *self._att_vectors(), bias, graph, self.concat,
                                          self.negative_slope, float(self.alpha) if self.lipschitz_norm else None,
                                          attn_dropout=float(self.dropout) if self.training else 0.0,
                                          elu_alpha=elu_alpha if fold else None)
                return out if elu_alpha is None or fold else bias_elu(out, self.bias, elu_alpha)
        res = self.res(x) if self.res is not None else None
        if elu_alpha is not None and res is None and (self.concat or self.heads == 1):
            # the aggregation, the bias and the ELU in one pass over the rows (eq. (4) with its activation)
            alpha, x_src, graph = self._attention(x, edge_index, edge_attr)
            return csr_spmm_bias_elu(alpha, x_src, graph, self.bias, elu_alpha)
        out = self._csr_heads(x, edge_index, edge_attr).heads

        out = finish_heads(out, self.concat)
        if res is not None:
            out = out + res
        if elu_alpha is not None:
            return bias_elu(out, self.bias, elu_alpha)
        if self.bias is not None:
            out = out + self.bias
        return out

    def _att_vectors(self) -> tuple[Tensor, Tensor]:
        """``a_src``, ``a_dst`` as ``[H, C]``: a squeeze, not ``[0]``, since a view's backward launches nothing
        where an index select's zero-fills and copies (two kernels each on CUDA)."""
        return self.att_src.squeeze(0), self.att_dst.squeeze(0)

    def _takes_one_operation(self, x: Tensor, edge_attr: Tensor | None) -> bool:
        """Whether this call is a layer that runs as one operation (:mod:`lipgnn.nn.fused.gat_small` on small
        graphs, :mod:`lipgnn.nn.fused.gat_one_head` with one head on large ones): plain GAT or GAT-Lip with eq. (17)
        (``variant="paper"``), without edge features or a residual projection (attention dropout included)."""
        lin = self.lin
        return ((not self.lipschitz_norm or self.variant == "paper") and self.res is None and lin is not None
                and lin.bias is None and (edge_attr is None or self.lin_edge is None)
                and x.dim() == 2 and not is_lazy(lin.weight)
                and lin.weight.dtype == x.dtype
                and self.att_src.dtype == x.dtype)

    def csr_heads(self, x: Tensor, edge_index: Tensor | CSRGraph, edge_attr: Tensor | None = None) -> CSRHeads | None:
        r"""The per-head aggregation :math:`\sum_j a_{ij,h} \mathbf{W}_h x_j` with the CSR graph and the
        attention weights :math:`a` (after attention dropout, as ``return_attention_weights`` gives
        them), for callers that need :math:`P_h` itself (nonlocal message passing's
        :math:`\|P_h X - X\|^2`) without the reference path that ``return_attention_weights`` takes;
        ``None`` for inputs the CSR path does not cover. Neither ``res`` nor the bias is included."""
        if fallback_reason(x, edge_index, None, None) is not None:
            return None
        return self._csr_heads(x, edge_index, edge_attr)

    def _csr_heads(self, x: Tensor, edge_index: Tensor | CSRGraph, edge_attr: Tensor | None) -> CSRHeads:
        alpha, x_src, graph = self._attention(x, edge_index, edge_attr)
        if graph.num_edges == 0:
            return CSRHeads(x_src.new_zeros(graph.num_dst, self.heads, self.out_channels), alpha, x_src, graph)
        return CSRHeads(csr_spmm(alpha, x_src, graph), alpha, x_src, graph)

    def _attention(self, x: Tensor, edge_index: Tensor | CSRGraph,
                   edge_attr: Tensor | None) -> tuple[Tensor, Tensor, CSRGraph]:
        """The attention weights ``[E, H]`` (after attention dropout), the projected sources ``[N, H, C]``
        they weigh and the CSR graph they are laid out on."""
        H, C = self.heads, self.out_channels
        graph = resolve_graph(edge_index, x.size(0), self.graph_self_loops())
        if self.lin is not None:
            x_src = x_dst = self.lin(x).view(-1, H, C)
        else:
            x_src = self.lin_src(x).view(-1, H, C)
            x_dst = self.lin_dst(x).view(-1, H, C)

        if graph.num_edges == 0:
            return x_src.new_zeros(0, H), x_src, graph
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
            score = gat_edge_scores(a_src, a_dst, self.alpha / c, graph)
            # c_i bounds |a·[Wx_i ‖ Wx_j]| (Cauchy-Schwarz), so |score| <= α before LeakyReLU.
            bound = self.alpha * max(1.0, abs(self.negative_slope))
        else:
            score = self._plain_or_edge_scores(a_src, a_dst, sq_src, sq_dst, x_src, x_dst, edge_proj, graph)
        score = F.leaky_relu(score, self.negative_slope)
        alpha = csr_softmax(score, graph, bound)
        alpha = dropout(alpha, self.dropout, self.training, rows=graph.edge_order)
        return alpha, x_src, graph

    def _plain_or_edge_scores(
        self, a_src: Tensor, a_dst: Tensor, sq_src: Tensor | None, sq_dst: Tensor | None, x_src: Tensor,
        x_dst: Tensor, edge_proj: Tensor | None, graph: CSRGraph,
    ) -> Tensor:
        """Scores ``[E, H]`` before LeakyReLU without LipschitzNorm, with edge features or with the
        reference variant (whose denominator varies along a target's edges)."""
        score = gat_edge_scores(a_src, a_dst, None, graph)  # [E, H]
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
        # unbind, not two selects: its backward is one stack, where each select's is a zero fill and a copy
        # (the same values; four fewer kernels a layer on CUDA).
        if not with_norms:
            x_pass, both = _NodeScores.apply(x_src, *self._att_vectors(), False)
            return x_pass, *both.unbind(-1), None, None
        x_pass, both, sq = _NodeScores.apply(x_src, *self._att_vectors(), True)
        return x_pass, *both.unbind(-1), sq, sq
