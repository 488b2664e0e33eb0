r"""Graph Transformer with LipschitzNorm: a drop-in subclass of
:class:`torch_geometric.nn.TransformerConv`."""

# PyG's Inspector compares the type hints of overridden hooks with the parent's and silently falls
# back to a slow generic ``propagate`` when they differ, so hints stay in the parent's ``typing``
# spelling (``Optional``/``Union``/``Tuple``, no ``from __future__ import annotations``).
# ruff: noqa: UP006, UP007, UP035, UP045

import math
from typing import Optional, Tuple, Union

import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import TransformerConv
from torch_geometric.typing import OptTensor, PairTensor
from torch_geometric.utils import softmax

from lipgnn.errors import ConfigError
from lipgnn.nn.lipschitz import VARIANTS, transformer_lipschitz_denominator
from lipgnn.nn.score_capture import ScoreCapture

SCORES: Tuple[str, ...] = ("dot", "l2")


class LipTransformerConv(ScoreCapture, TransformerConv):
    r"""Graph Transformer layer with LipschitzNorm (Dasoulas et al., ICML 2021, eq. 19; Corollary 2).

    Same constructor, forward signature, parameters and ``state_dict`` as
    :class:`torch_geometric.nn.TransformerConv`; with ``lipschitz_norm=False`` the output is
    TransformerConv's (scores :math:`q_i^\top k_j / \sqrt{d}`). With it on, per head, for the edges
    :math:`j \to i` entering target :math:`i`, with :math:`q_i = \mathbf{W}_3 x_i`,
    :math:`k_j = \mathbf{W}_4 x_j\, (+\, \mathbf{W}_6 e_{ij})` and
    :math:`v_j = \mathbf{W}_2 x_j\, (+\, \mathbf{W}_6 e_{ij})` (the edge embedding is added to keys
    and values as TransformerConv does, and the norms include it):

    .. math::
        u_i = \|q_i\|,\quad v_i = \max_{j \in \mathcal{N}(i)} \|k_j\|,\quad
        w_i = \max_{j \in \mathcal{N}(i)} \|v_j\|,

    .. math::
        \alpha_{ij} = \mathrm{softmax}_{j \in \mathcal{N}(i)}\left(
        \frac{\alpha\, q_i^{\top} k_j}{\max\{u_i v_i,\; u_i w_i,\; v_i w_i\}}\right).

    This is eq. 19 applied to the single-output attention of each target node (its query matrix
    is :math:`q_i`, so :math:`\|Q\|_F = \|q_i\|`), with maxima taken neighbour-wise, as §5 of the
    paper prescribes for graphs. Eq. 19 has no :math:`1/\sqrt{d}`, and none is applied here: the
    division already fixes the scale (:math:`|q_i^\top k_j| \le u_i v_i`, so scores lie in
    :math:`[-\alpha, \alpha]`), and a constant factor would only change :math:`\alpha`. With
    :math:`\alpha = 1` each head's attention map :math:`(Q\|K\|V) \mapsto V\,\mathrm{softmax}(g)^\top`
    is Lipschitz with :math:`L_F \le e^{\sqrt{3}}\sqrt{m/n} + 2\sqrt{6}` (Corollary 2), and the
    attention weights are invariant to scaling queries, keys and values by one :math:`c > 0`.

    ``variant="reference"`` reproduces the public code of the paper (gdasoulas/LipschitzNorm,
    ``quadratic_lipschitznorm.py``): the logits keep TransformerConv's :math:`1/\sqrt{d}` and are
    divided by :math:`\max\{u v_i, u w_i, v_i w_i\}` with :math:`u = \|Q\|_F` one value per head
    over the queries of *all* edges of the input graph (a node's query counts once per incoming
    edge), not :math:`\|q_i\|`; :math:`w_i` uses the values *without* the edge embedding (their
    code adds it to the values only after computing the norm); :math:`\alpha` multiplies the result
    (their code has none, i.e. :math:`\alpha = 1`).

    Numerics: every norm is :math:`\sqrt{s + \epsilon^2}` and the (quadratic) denominator gets
    :math:`+\epsilon^2` (:math:`\epsilon = 10^{-12}`; the authors add :math:`10^{-12}`, which would
    bias inputs with norms below :math:`10^{-6}`), so all-zero neighbourhoods give finite outputs
    and gradients while scale invariance holds down to tiny inputs.

    Args:
        in_channels, out_channels, heads, concat, beta, dropout, edge_dim, bias, root_weight,
            **kwargs: as :class:`torch_geometric.nn.TransformerConv`.
        lipschitz_norm (bool): apply LipschitzNorm (default ``True``).
        alpha (float): score bound :math:`\alpha > 0` (default ``1.0``).
        variant (str): ``"paper"`` (eq. 19) or ``"reference"`` (authors' code), default ``"paper"``.
        score (str): ``"dot"`` (default, the scores above) or ``"l2"``: Kim et al.'s L2 scores
            (eq. 10 on graphs), :math:`-\|q_i - k_j\|^2 / \sqrt{d}` over each node's neighbours
            (:math:`d` = ``out_channels``, the per-head width :math:`D/H`). Not combinable with
            LipschitzNorm, whose eq. 19 bounds dot-product scores.
        tie_qk (bool): share the query and key projections (``lin_key`` is ``lin_query``); with
            ``score="l2"`` this is what makes the attention Lipschitz (Kim et al., Lemma F.1 and
            Theorem 3.2). Default ``False``.

    Scores: :meth:`attention_scores` returns the per-edge logits that enter the softmax.

    With ``score="l2"`` on a complete graph with self-loops and ``tie_qk=True``, the attention weights
    are those of :class:`~lipgnn.nn.L2MultiheadAttention` with :math:`W^{Q,h}` the transposed rows of
    head :math:`h` of ``lin_query`` (tested); the query/key bias cancels in :math:`q_i - k_j` when tied.
    """

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        beta: bool = False,
        dropout: float = 0.0,
        edge_dim: Optional[int] = None,
        bias: bool = True,
        root_weight: bool = True,
        *,
        lipschitz_norm: bool = True,
        alpha: float = 1.0,
        variant: str = "paper",
        score: str = "dot",
        tie_qk: bool = False,
        **kwargs,
    ) -> None:
        if variant not in VARIANTS:
            raise ConfigError(
                f"LipTransformerConv variant={variant!r} is unknown; use one of {list(VARIANTS)}"
            )
        if score not in SCORES:
            raise ConfigError(f"LipTransformerConv score={score!r} is unknown; use one of {list(SCORES)}")
        if score == "l2" and lipschitz_norm:
            raise ConfigError("LipTransformerConv score='l2' with lipschitz_norm=True: LipschitzNorm (eq. 19) "
                              "bounds dot-product scores only; use norm=none with score=l2")
        if not alpha > 0:
            raise ConfigError(f"LipTransformerConv alpha={alpha} must be positive; use e.g. alpha=1.0")
        super().__init__(
            in_channels, out_channels, heads=heads, concat=concat, beta=beta, dropout=dropout,
            edge_dim=edge_dim, bias=bias, root_weight=root_weight, **kwargs,
        )
        self.lipschitz_norm = lipschitz_norm
        self.alpha = float(alpha)
        self.variant = variant
        self.score = score
        self.tie_qk = bool(tie_qk)
        if self.tie_qk:
            # One module under two names: state_dict keeps both keys, both hold the same tensors.
            self.lin_key = self.lin_query

    def message(self, query_i: Tensor, key_j: Tensor, value_j: Tensor,
                edge_attr: OptTensor, index: Tensor, ptr: OptTensor,
                size_i: Optional[int]) -> Tensor:
        raw_value_j = value_j
        if self.lin_edge is not None:
            assert edge_attr is not None
            edge_attr = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            key_j = key_j + edge_attr
        # As TransformerConv: an edge_attr given without edge_dim is still added to the values.
        if edge_attr is not None:
            value_j = value_j + edge_attr

        if self.score == "l2":
            # Kim et al. eq. 10 per edge; the difference form is exact where eq. 16's expansion cancels.
            alpha = -((query_i - key_j) ** 2).sum(dim=-1) / math.sqrt(self.out_channels)
            return self._attend(alpha, value_j, index, ptr, size_i)
        dot = (query_i * key_j).sum(dim=-1)
        if not self.lipschitz_norm:
            alpha = dot / math.sqrt(self.out_channels)
        elif self.variant == "paper":
            denom = transformer_lipschitz_denominator(query_i, key_j, value_j, index, size_i)
            alpha = self.alpha * dot / denom
        else:
            denom = transformer_lipschitz_denominator(
                query_i, key_j, raw_value_j, index, size_i, variant="reference"
            )
            alpha = self.alpha * (dot / math.sqrt(self.out_channels)) / denom
        return self._attend(alpha, value_j, index, ptr, size_i)

    def _attend(self, alpha: Tensor, value_j: Tensor, index: Tensor, ptr: OptTensor,
                size_i: Optional[int]) -> Tensor:
        self._keep(alpha)
        alpha = softmax(alpha, index, ptr, size_i)
        self._alpha = alpha
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        return value_j * alpha.view(-1, self.heads, 1)

    def attention_scores(
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Tensor,
        edge_attr: OptTensor = None,
    ) -> Tuple[Tensor, Tensor]:
        r"""Per-edge logits that enter the softmax, ``[E, H]``, with the edge index they belong to.

        With LipschitzNorm these are :math:`\alpha\, q_i^\top k_j / c_i` (paper) or
        :math:`\alpha\, q_i^\top k_j / (\sqrt{d}\, c_i)` (reference); without it TransformerConv's
        :math:`q_i^\top k_j / \sqrt{d}`. Runs one forward pass (gradients flow if enabled);
        TransformerConv adds no self-loops, so the edge index is ``edge_index`` itself.
        """
        return self._capture_scores(lambda: self(x, edge_index, edge_attr, return_attention_weights=True))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads}, "
            f"lipschitz_norm={self.lipschitz_norm}, alpha={self.alpha}, variant={self.variant!r}, "
            f"score={self.score!r}, tie_qk={self.tie_qk})"
        )
