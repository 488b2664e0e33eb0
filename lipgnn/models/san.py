r"""The self-attention GNN (SAN) of Guan & He (§3.1, Fig. 3), with Pre-LN, Post-LN or no LayerNorm.

Attention of head :math:`i` (Table 1; softmax over the neighbours of a node plus itself):

.. math::
    e_{jk} = \frac{1}{\sqrt{d}}\, K_i X(j) \cdot Q_i X(k), \qquad
    (P_i)_{jk} = \frac{\exp e_{jk}}{\exp e_{jj} + \sum_{l \in \mathcal{N}_j} \exp e_{jl}},

message passing (§3.1) and, with ``model.nonlocal``, nonlocal message passing (§4.1):

.. math::
    \mathrm{MP}(X) = (P_1 X V_1 \,\|\, \dots \,\|\, P_h X V_h)\, W, \qquad
    \mathrm{NonlocalMP}(X) = \big(\tfrac{1}{n}\|P_1 X - X\|^2 P_1 X V_1 \,\|\, \dots\big)\, W,

hidden block (``model.layer_norm``):

.. math::
    \text{post:}\;& Y = \mathrm{LN}(X + \mathrm{MP}(X)),\quad X' = \mathrm{LN}(Y + \mathrm{FFN}(Y)) \\
    \text{pre:}\;& Y = X + \mathrm{MP}(\mathrm{LN}(X)),\quad X' = Y + \mathrm{FFN}(\mathrm{LN}(Y)) \\
    \text{none:}\;& Y = X + \mathrm{MP}(X),\quad X' = Y + \mathrm{FFN}(Y)

with :math:`\mathrm{FFN}(Y) = \sigma(Y A_1 + a_1) A_2 + a_2`. The encoder is dropout + MLP, the decoder
a linear map (an MLP without activation).

The scores, softmax and :math:`P_i X V_i` are the suite's graph-transformer layer
(:class:`~lipgnn.nn.LipTransformerConv`, or its CSR twin with ``model.impl=fused``) built with
``root_weight=False`` and ``bias=False``, on the graph with self-loops added once per forward by
:class:`~lipgnn.models.deep.DeepGNN`. With ``model.impl=fused`` (and no LipschitzNorm, edge features or
attention dropout in training) the block computes :math:`Q, K, V` in one GEMM and all heads'
attention, :math:`P_h X V_h` and the nonlocal energies in one operation
(:func:`lipgnn.nn.fused.san.san_attention`), with the same parameters and results. Its
:math:`1/\sqrt{d}` uses the per-head width :math:`d = \text{hidden}/h`. ``norm=lip`` turns that layer's
LipschitzNorm on: SAN-Lip, eq. (19) of Dasoulas et al. on SAN's dot-product scores.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.models.blocks import LN_PLACEMENTS
from lipgnn.models.nonlocal_mp import NonlocalScale
from lipgnn.nn.fused import FusedLipTransformerConv
from lipgnn.nn.fused.graph import CSRGraph, resolve_graph
from lipgnn.nn.fused.san import qkv_projection, san_attention


class SANBlock(nn.Module):
    r"""One hidden layer of the SAN (module docstring): attention sublayer + FFN sublayer, each with a
    residual connection and a per-node LayerNorm placed by ``placement``.

    Args:
        conv: a graph-transformer conv (``root_weight=False``, ``concat=True``) computing
            :math:`(P_1 X V_1 \| \dots \| P_h X V_h)`.
        hidden: model width :math:`d_{\text{model}}`.
        ffn_hidden: width of the FFN's hidden layer.
        placement: ``none`` | ``pre`` | ``post``.
        activation: the FFN's activation class (``None``: linear FFN).
        nonlocal_mp: scales each head's aggregation by its Laplacian energy (§4.1) when given.
    """

    has_attention = True

    def __init__(
        self,
        conv: nn.Module,
        hidden: int,
        ffn_hidden: int,
        placement: str = "post",
        activation: type[nn.Module] | None = nn.ReLU,
        nonlocal_mp: NonlocalScale | None = None,
    ) -> None:
        super().__init__()
        if placement not in LN_PLACEMENTS:
            raise ValueError(f"placement must be one of {LN_PLACEMENTS}, got {placement!r}")
        self.conv = conv
        self.nonlocal_mp = nonlocal_mp
        self.out_proj = nn.Linear(hidden, hidden)  # W
        layers: list[nn.Module] = [nn.Linear(hidden, ffn_hidden)]
        if activation is not None:
            layers.append(activation())
        layers.append(nn.Linear(ffn_hidden, hidden))
        self.ffn = nn.Sequential(*layers)
        self.placement = placement
        if placement != "none":
            self.norm1 = nn.LayerNorm(hidden)
            self.norm2 = nn.LayerNorm(hidden)

    @property
    def accepts_node_order(self) -> bool:
        """Whether the block may run on a graph relabelled for locality (:mod:`lipgnn.nn.fused.locality`):
        a fused conv, which draws its attention dropout in the caller's edge coordinates. Everything else in
        the block (LayerNorm, FFN, the output projection, the residuals) acts on each node's row alone, and
        the nonlocal energies are sums over all nodes (the fused block's, or ``csr_heads``' on the conv
        path)."""
        return getattr(self.conv, "accepts_node_order", False)

    def fused_path(self, x: Tensor, edge_attr: Tensor | None) -> bool:
        """Whether :meth:`forward` runs the fused block (:mod:`lipgnn.nn.fused.san`): a
        ``model.impl=fused`` conv with plain dot-product scores (no LipschitzNorm, edge features or
        attention dropout in training); otherwise the conv's own forward."""
        conv = self.conv
        if not isinstance(conv, FusedLipTransformerConv) or edge_attr is not None or x.dim() != 2:
            return False
        if conv.lipschitz_norm or conv._score_kind() != "dot" or conv.lin_edge is not None or conv.root_weight:
            return False
        return conv.concat and not (self.training and conv.dropout > 0)

    def _fused_message_passing(self, x: Tensor, graph: CSRGraph) -> Tensor:
        """:meth:`message_passing` through :func:`~lipgnn.nn.fused.san.san_attention`: one QKV GEMM, one
        attention operation for all heads (and the nonlocal energies), one output GEMM."""
        conv = self.conv
        heads, width = conv.heads, conv.out_channels
        qkv = qkv_projection(x, conv.lin_query, conv.lin_key, conv.lin_value)
        nonlocal_mp = self.nonlocal_mp
        use_x = nonlocal_mp is not None and nonlocal_mp.source == "x"
        out, energy = san_attention(qkv, graph, heads, width, x if use_x else None)
        if nonlocal_mp is not None:
            agg = out.view(x.size(0), heads, width)
            if use_x:
                factor = energy / x.size(0)
            else:  # P_h X V_h - X V_h on the values (a value bias cancels: rows of P_h sum to 1)
                value = qkv[:, 2 * heads * width:].reshape(x.size(0), heads, width)
                factor = (agg - value).pow(2).sum(dim=(0, 2)) / x.size(0)
            out = nonlocal_mp.scale_heads(agg, factor)
        return F.linear(out, self.out_proj.weight, self.out_proj.bias)

    def message_passing(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        """:math:`\\mathrm{MP}(X)` or, with ``nonlocal_mp``, :math:`\\mathrm{NonlocalMP}(X)`."""
        if self.nonlocal_mp is not None:
            heads = self.nonlocal_mp(self.conv, x, edge_index, edge_attr)
        else:
            heads = self.conv(x, edge_index, edge_attr)
        return self.out_proj(heads)

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None, x_0: Tensor | None = None
    ) -> Tensor:
        if self.fused_path(x, edge_attr):
            graph = resolve_graph(edge_index, x.size(0), False)

            def mp(h: Tensor) -> Tensor:
                return self._fused_message_passing(h, graph)
        else:
            def mp(h: Tensor) -> Tensor:
                return self.message_passing(h, edge_index, edge_attr)
        if self.placement == "post":
            y = self.norm1(x + mp(x))
            return self.norm2(y + self.ffn(y))
        if self.placement == "pre":
            y = x + mp(self.norm1(x))
            return y + self.ffn(self.norm2(y))
        y = x + mp(x)
        return y + self.ffn(y)

    def extra_repr(self) -> str:
        return f"placement={self.placement}"


__all__ = ["SANBlock"]
