r"""The pieces a :class:`~lipgnn.models.deep.DeepGNN` is assembled from.

Block order (the authors' ``models/deepgat.py`` / ``models/deepgt.py`` in gdasoulas/LipschitzNorm,
summarised in docs/reference.md), for layer :math:`l = 0, \dots, L-1`:

.. math::
    h &= \mathrm{Dropout}_p(x_l) \\
    h &= \mathrm{Conv}_l(h, \mathcal{E}\,[, e]) \qquad
        \text{(attention scores normalised by eq. (17) GAT / eq. (19) GT when norm=lip)} \\
    h &= \mathrm{LayerNorm}(h) \qquad \text{(norm=layernorm: the authors' GT order, before the activation)} \\
    h &= \sigma(h) \qquad \text{(ELU for gat/gt, ReLU for gcn/gin/gcnii; GGNN has none;
        skipped on the last layer except for GCNII)} \\
    h &= \mathrm{PairNorm}(h) \qquad \text{(norm=pairnorm: after the activation, the authors' order)} \\
    x_{l+1} &= h + x_l \qquad \text{(residual=true, Table 3's "-res"; otherwise } x_{l+1} = h\text{)}

``model.layer_norm`` wraps that sublayer :math:`f` (dropout → conv → [norm] → activation → [PairNorm])
in a residual connection with a per-node ``torch.nn.LayerNorm`` (Guan & He §3.1, Xiong et al. 2020):

.. math::
    \text{pre:}\quad x_{l+1} = x_l + f(\mathrm{LN}(x_l)), \qquad
    \text{post:}\quad x_{l+1} = \mathrm{LN}(x_l + f(x_l)),

and ``none`` keeps the block above unchanged. Post is the TREES benchmark's block (Alon & Yahav:
conv → activation → + x → LayerNorm). The residual is part of pre/post, so ``residual`` is not added
a second time there.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.nn.fused.sparse_input import SparseInputLinear

#: How a block calls its conv: ``plain`` conv(x, edge_index) (GCN, GIN, GGNN), ``attention``
#: conv(x, edge_index, edge_attr) (GAT, GT), ``initial`` conv(x, x_0, edge_index) (GCNII's GCN2Conv).
CONV_CALLS = ("plain", "attention", "initial")

#: ``model.layer_norm``: where a block's per-node LayerNorm sits relative to its residual connection.
LN_PLACEMENTS = ("none", "pre", "post")


class EmbeddingSum(nn.Module):
    r"""Input encoder for token-id features (TREES' key + value embedding).

    .. math::
        h_i = \sum_{k=1}^{K} E_k[x_{i,k}], \qquad E_k \in \mathbb{R}^{|V_k| \times d}

    Args:
        vocab_sizes: :math:`|V_k|`, one per column of the long input ``x`` of shape ``[N, K]``.
        embedding_dim: :math:`d`, the model's hidden width.
    """

    def __init__(self, vocab_sizes: Sequence[int], embedding_dim: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(int(v), embedding_dim) for v in vocab_sizes)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 2 or x.size(1) != len(self.embeddings):
            raise ValueError(
                f"EmbeddingSum expects long x of shape [N, {len(self.embeddings)}], got {tuple(x.shape)}"
            )
        out = self.embeddings[0](x[:, 0])
        for k in range(1, len(self.embeddings)):
            out = out + self.embeddings[k](x[:, k])
        return out


class DroppedInputMLP(nn.Sequential):
    r"""An MLP encoder behind dropout on its input features, ``Sequential(Dropout_p, Linear, ...)`` (SAN's, Guan &
    He §3.1):

    .. math:: h = \mathrm{MLP}(\mathrm{Dropout}_p(X))

    The same modules, order and ``state_dict`` as the plain ``nn.Sequential``. When the first linear layer is a
    :class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear`, the dropout and that layer run as its
    :meth:`~lipgnn.nn.fused.sparse_input.SparseInputLinear.dropped` (the dropout drawn on the stored entries of
    sparse features, equal in distribution), so the features keep their CSR copy from step to step.
    """

    def forward(self, x: Tensor) -> Tensor:
        if len(self) < 2 or not isinstance(self[0], nn.Dropout) or not isinstance(self[1], SparseInputLinear):
            return super().forward(x)
        h = self[1].dropped(x, self[0].p, self.training)
        for layer in list(self)[2:]:
            h = layer(h)
        return h


class GNNBlock(nn.Module):
    r"""One message-passing layer of a deep GNN, in the authors' order (see the module docstring).

    .. math::
        x_{l+1} = \mathrm{PN}\big(\sigma(\mathrm{LN}(\mathrm{Conv}(\mathrm{Dropout}_p(x_l))))\big)
                  \;[+\, x_l]

    where every bracketed piece is optional (``None`` → identity).

    Args:
        conv: the message-passing layer.
        call: how ``conv`` is called, one of :data:`CONV_CALLS`.
        dropout: feature-dropout probability :math:`p` applied to the block input.
        layer_norm: optional normalisation between conv and activation (PyG ``LayerNorm``).
        act: optional activation module.
        pair_norm: optional normalisation after the activation (PyG ``PairNorm``).
        residual: add the block input :math:`x_l` after the last normalisation (``placement=none``).
        placement: ``model.layer_norm``, one of :data:`LN_PLACEMENTS` (pre: :math:`x + f(\mathrm{LN}(x))`,
            post: :math:`\mathrm{LN}(x + f(x))`).
        block_norm: the per-node LayerNorm used by ``placement`` pre/post (required there).
        nonlocal_mp: a :class:`~lipgnn.models.nonlocal_mp.NonlocalScale` that runs the (attention)
            conv with each head's aggregation scaled by its Laplacian energy (Guan & He §4.1).
    """

    def __init__(
        self,
        conv: nn.Module,
        call: str,
        dropout: float = 0.0,
        layer_norm: nn.Module | None = None,
        act: nn.Module | None = None,
        pair_norm: nn.Module | None = None,
        residual: bool = False,
        placement: str = "none",
        block_norm: nn.Module | None = None,
        nonlocal_mp: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if call not in CONV_CALLS:
            raise ValueError(f"call must be one of {CONV_CALLS}, got {call!r}")
        if placement not in LN_PLACEMENTS:
            raise ValueError(f"placement must be one of {LN_PLACEMENTS}, got {placement!r}")
        if (placement == "none") != (block_norm is None):
            raise ValueError("block_norm is required for placement pre/post and unused for placement none")
        self.conv = conv
        self.call = call
        self.dropout = float(dropout)
        self.layer_norm = layer_norm
        self.act = act
        self.pair_norm = pair_norm
        self.residual = bool(residual)
        self.placement = placement
        # Registered only when used, so placement=none keeps today's state-dict keys.
        if block_norm is not None:
            self.block_norm = block_norm
        if nonlocal_mp is not None and call != "attention":
            raise ValueError("nonlocal message passing needs an attention conv")
        self.nonlocal_mp = nonlocal_mp  # holds no parameters: state-dict keys are unchanged

    @property
    def has_attention(self) -> bool:
        return self.call == "attention"

    @property
    def accepts_node_order(self) -> bool:
        """Whether the block may run on a graph relabelled for locality (:mod:`lipgnn.nn.fused.locality`):
        a fused attention conv that draws its dropouts in the caller's coordinates. A nonlocal factor is
        no obstacle: it takes the fused conv's per-head CSR path (``csr_heads``, which reads the relabelled
        graph and draws the same masks), and its energies are sums over all nodes."""
        return self.has_attention and getattr(self.conv, "accepts_node_order", False)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        x_0: Tensor | None = None,
    ) -> Tensor:
        h = self.block_norm(x) if self.placement == "pre" else x
        # A conv may bring its own dropout for its input (the fused layers do: same distribution, faster).
        order = getattr(edge_index, "node_order", None)
        if order is None:
            h = getattr(self.conv, "feature_dropout", F.dropout)(h, self.dropout, self.training)
        else:  # a graph relabelled for locality: decide each row as the caller's row it is
            h = self.conv.feature_dropout(h, self.dropout, self.training, rows=order)
        act = self.act
        if self.call == "attention":
            if self.nonlocal_mp is None and self.layer_norm is None and getattr(self.conv, "applies_activation", False):
                # the fused layers apply the activation with their bias in one pass (same function)
                h, act = self.conv(h, edge_index, edge_attr, activation=act), None
            elif self.nonlocal_mp is None:
                h = self.conv(h, edge_index, edge_attr)
            else:
                h = self.nonlocal_mp(self.conv, h, edge_index, edge_attr)
        elif self.call == "initial":
            if x_0 is None:
                raise ValueError("a GCNII block needs the initial representation x_0")
            h = self.conv(h, x_0, edge_index)
        else:
            h = self.conv(h, edge_index)
        if self.layer_norm is not None:
            h = self.layer_norm(h)
        if act is not None:
            h = act(h)
        if self.pair_norm is not None:
            h = self.pair_norm(h)
        if self.placement == "pre":
            return x + h
        if self.placement == "post":
            return self.block_norm(x + h)
        if self.residual:
            h = h + x
        return h

    def extra_repr(self) -> str:
        return f"call={self.call}, dropout={self.dropout}, residual={self.residual}, placement={self.placement}"


__all__ = ["CONV_CALLS", "LN_PLACEMENTS", "EmbeddingSum", "GNNBlock"]
