r"""GAT with LipschitzNorm: a drop-in subclass of :class:`torch_geometric.nn.GATConv`."""

# PyG's Inspector compares the type hints of overridden hooks with the parent's and silently falls
# back to a slow generic ``propagate`` when they differ, so hints stay in the parent's ``typing``
# spelling (``Optional``/``Union``/``Tuple``, no ``from __future__ import annotations``).
# ruff: noqa: UP006, UP007, UP035, UP045

from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GATConv
from torch_geometric.typing import (
    Adj,
    OptPairTensor,
    OptTensor,
    Size,
    SparseTensor,
    torch_sparse,
)
from torch_geometric.utils import add_self_loops, is_torch_sparse_tensor, remove_self_loops, softmax
from torch_geometric.utils.sparse import set_sparse_value

from lipgnn.errors import ConfigError
from lipgnn.nn.lipschitz import VARIANTS, gat_lipschitz_denominator
from lipgnn.nn.score_capture import ScoreCapture


class LipGATConv(ScoreCapture, GATConv):
    r"""GAT layer with LipschitzNorm (Dasoulas et al., ICML 2021, eq. 17; Corollary 1).

    Same constructor, forward signature, parameters and ``state_dict`` as
    :class:`torch_geometric.nn.GATConv`; with ``lipschitz_norm=False`` the output is GATConv's.
    With it on, the raw score of edge :math:`j \to i` in head :math:`h`,

    .. math::
        e_{ij} = \mathbf{a}_{dst}^{\top}\mathbf{W}x_i + \mathbf{a}_{src}^{\top}\mathbf{W}x_j
        \;\left(+\, \mathbf{a}_{e}^{\top}\mathbf{W}_e e_{ij}\right)
        = \mathbf{a}^\top X_{ij},\qquad
        X_{ij} = [\mathbf{W}x_i \,\|\, \mathbf{W}x_j \,(\|\, \mathbf{W}_e e_{ij})],

    is divided per target node and per head by eq. 17's
    :math:`\|Q\|_F\, \|X^\top\|_{(\infty,2)}`, taken neighbour-wise (self-loops included):

    .. math::
        g_{ij} = \frac{\alpha\, e_{ij}}{c_i},\qquad
        c_i = \|\mathbf{a}_h\| \max_{j \in \mathcal{N}(i)} \|X_{ij}\|
        = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j \in \mathcal{N}(i)}
        \left(\|\mathbf{W}x_j\|^2 + \|\mathbf{W}_e e_{ij}\|^2\right)},

    and the attention is

    .. math::
        \alpha_{ij} = \mathrm{softmax}_{j \in \mathcal{N}(i)}\big(\mathrm{LeakyReLU}(g_{ij})\big),

    followed by attention dropout, as in GATConv. So :math:`|g_{ij}| \le \alpha` (Theorem 3,
    condition (1)), attention weights are invariant to :math:`x \mapsto c\,x` for :math:`c > 0`, and
    each head's attention map on the projected inputs is Lipschitz with
    :math:`L_F \le e^{\alpha}\sqrt{m/n} + \alpha\sqrt{8}` (Theorem 3; Corollary 1 for
    :math:`\alpha = 1`). Dividing before LeakyReLU equals dividing after it (positive scale). Cost:
    :math:`O(hnd)` plus one scatter max over the edges; no dense matrix.

    ``variant="reference"`` reproduces the public code of the paper (gdasoulas/LipschitzNorm):

    .. math::
        c_{ij} = 4\, \|\mathbf{a}\|_F \sqrt{\max_{k \in \mathcal{N}(i)} \|\mathbf{W}x_k\|^2
        + \|\mathbf{W}x_j\|^2 \;(+\, \|\mathbf{W}_e e_{ij}\|^2)}.

    Differences from the paper's eq. 17: (1) the factor 4 (scores lie in
    :math:`[-\alpha/4, \alpha/4]`); (2) the *source* norm :math:`\|\mathbf{W}x_j\|` of each edge
    where eq. 17 has the target's :math:`\|\mathbf{W}x_i\|`, so the denominator varies along one
    target's edges; (3) :math:`\|\mathbf{a}\|_F` is one norm over the attention vectors of all heads.
    Their ``.view(-1, 1)`` on the per-node maxima, which mixes heads when ``heads > 1``, is *not*
    reproduced: the maxima are per head. Their code has no edge features; here the edge term joins
    the per-edge part. Their code has no :math:`\alpha` (it equals 1 there).

    Numerics: every norm is :math:`\sqrt{s + \epsilon^2}` and every denominator gets
    :math:`+\epsilon` (:math:`\epsilon = 10^{-12}`), so all-zero nodes or neighbourhoods (e.g. after
    attention dropout) give finite outputs and gradients.

    Args:
        in_channels, out_channels, heads, concat, negative_slope, dropout, add_self_loops, edge_dim,
            fill_value, bias, residual, **kwargs: as :class:`torch_geometric.nn.GATConv`.
        lipschitz_norm (bool): apply LipschitzNorm (default ``True``).
        alpha (float): score bound :math:`\alpha > 0` (default ``1.0``).
        variant (str): ``"paper"`` (eq. 17) or ``"reference"`` (authors' code), default ``"paper"``.

    Scores: :meth:`attention_scores` returns the per-edge logits that enter the softmax
    (normalised and after LeakyReLU), with the edge index they belong to (self-loops added).
    """

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: Optional[int] = None,
        fill_value: Union[float, Tensor, str] = "mean",
        bias: bool = True,
        residual: bool = False,
        *,
        lipschitz_norm: bool = True,
        alpha: float = 1.0,
        variant: str = "paper",
        **kwargs,
    ) -> None:
        if variant not in VARIANTS:
            raise ConfigError(f"LipGATConv variant={variant!r} is unknown; use one of {list(VARIANTS)}")
        if not alpha > 0:
            raise ConfigError(f"LipGATConv alpha={alpha} must be positive; use e.g. alpha=1.0")
        super().__init__(
            in_channels, out_channels, heads=heads, concat=concat, negative_slope=negative_slope,
            dropout=dropout, add_self_loops=add_self_loops, edge_dim=edge_dim, fill_value=fill_value,
            bias=bias, residual=residual, **kwargs,
        )
        self.lipschitz_norm = lipschitz_norm
        self.alpha = float(alpha)
        self.variant = variant

    def forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        size: Size = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Union[
        Tensor,
        Tuple[Tensor, Tuple[Tensor, Tensor]],
        Tuple[Tensor, SparseTensor],
    ]:
        r"""Same as :meth:`torch_geometric.nn.GATConv.forward`.

        Overridden (rather than wrapped) because GATConv projects ``x`` internally and its
        ``edge_update`` never sees the projected features, whose norms LipschitzNorm needs: this
        forward hands the projection ``x_proj = (W x_src, W x_dst)`` to the edge updater as well.
        """
        H, C = self.heads, self.out_channels
        res: Optional[Tensor] = None

        if isinstance(x, Tensor):
            assert x.dim() == 2, "Static graphs not supported in 'LipGATConv'"
            if self.res is not None:
                res = self.res(x)
            if self.lin is not None:
                x_src = x_dst = self.lin(x).view(-1, H, C)
            else:
                assert self.lin_src is not None and self.lin_dst is not None
                x_src = self.lin_src(x).view(-1, H, C)
                x_dst = self.lin_dst(x).view(-1, H, C)
        else:
            x_src, x_dst = x
            assert x_src.dim() == 2, "Static graphs not supported in 'LipGATConv'"
            if x_dst is not None and self.res is not None:
                res = self.res(x_dst)
            if self.lin is not None:
                x_src = self.lin(x_src).view(-1, H, C)
                if x_dst is not None:
                    x_dst = self.lin(x_dst).view(-1, H, C)
            else:
                assert self.lin_src is not None and self.lin_dst is not None
                x_src = self.lin_src(x_src).view(-1, H, C)
                if x_dst is not None:
                    x_dst = self.lin_dst(x_dst).view(-1, H, C)

        x_proj = (x_src, x_dst)
        alpha_src = (x_src * self.att_src).sum(dim=-1)
        alpha_dst = None if x_dst is None else (x_dst * self.att_dst).sum(-1)
        alpha = (alpha_src, alpha_dst)

        if self.add_self_loops:
            if isinstance(edge_index, Tensor):
                # Self-loops only for nodes that exist on both sides, as GATConv does.
                num_nodes = x_src.size(0)
                if x_dst is not None:
                    num_nodes = min(num_nodes, x_dst.size(0))
                num_nodes = min(size) if size is not None else num_nodes
                edge_index, edge_attr = remove_self_loops(edge_index, edge_attr)
                edge_index, edge_attr = add_self_loops(
                    edge_index, edge_attr, fill_value=self.fill_value, num_nodes=num_nodes
                )
            elif isinstance(edge_index, SparseTensor):
                if self.edge_dim is None:
                    edge_index = torch_sparse.set_diag(edge_index)
                else:
                    raise NotImplementedError(
                        "The usage of 'edge_attr' and 'add_self_loops' simultaneously is not "
                        "supported for 'edge_index' in a 'SparseTensor' form"
                    )

        # edge_updater_type: (alpha: OptPairTensor, edge_attr: OptTensor, x_proj: OptPairTensor)
        alpha = self.edge_updater(edge_index, alpha=alpha, edge_attr=edge_attr, x_proj=x_proj, size=size)

        # propagate_type: (x: OptPairTensor, alpha: Tensor)
        out = self.propagate(edge_index, x=x_proj, alpha=alpha, size=size)

        if self.concat:
            out = out.view(-1, self.heads * self.out_channels)
        else:
            out = out.mean(dim=1)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias

        if return_attention_weights:
            if isinstance(edge_index, Tensor):
                if is_torch_sparse_tensor(edge_index):
                    adj = set_sparse_value(edge_index, alpha)
                    return out, (adj, alpha)
                return out, (edge_index, alpha)
            elif isinstance(edge_index, SparseTensor):
                return out, edge_index.set_value(alpha, layout="coo")
        return out

    def edge_update(
        self,
        alpha_j: Tensor,
        alpha_i: OptTensor,
        edge_attr: OptTensor,
        index: Tensor,
        ptr: OptTensor,
        dim_size: Optional[int],
        x_proj: OptPairTensor,
        edge_index_j: Tensor,
    ) -> Tensor:
        # GATConv's pipeline (sum -> LeakyReLU -> softmax -> dropout) with the division inserted
        # before LeakyReLU.
        alpha = alpha_j if alpha_i is None else alpha_j + alpha_i
        if index.numel() == 0:
            return alpha
        edge_proj: Optional[Tensor] = None
        if edge_attr is not None and self.lin_edge is not None:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            edge_proj = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            alpha = alpha + (edge_proj * self.att_edge).sum(dim=-1)

        if self.lipschitz_norm:
            x_src, x_dst = x_proj
            denom = gat_lipschitz_denominator(
                x_src,
                x_dst if alpha_i is not None else None,
                self.att_src,
                self.att_dst,
                torch.stack([edge_index_j, index]),
                dim_size,
                edge_proj=edge_proj,
                att_edge=self.att_edge,
                variant=self.variant,
            )
            alpha = self.alpha * alpha / denom

        alpha = F.leaky_relu(alpha, self.negative_slope)
        self._keep(alpha)
        alpha = softmax(alpha, index, ptr, dim_size)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        return alpha

    def attention_scores(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Tensor,
        edge_attr: OptTensor = None,
        size: Size = None,
    ) -> Tuple[Tensor, Tensor]:
        r"""Per-edge logits that enter the softmax, ``[E, H]``, with the edge index they belong to.

        With LipschitzNorm these are :math:`\mathrm{LeakyReLU}(\alpha\, e_{ij} / c_i)` (paper) or
        :math:`\mathrm{LeakyReLU}(\alpha\, e_{ij} / c_{ij})` (reference); without it GATConv's
        :math:`\mathrm{LeakyReLU}(e_{ij})`. Runs one forward pass (gradients flow if enabled);
        ``edge_index`` in the result includes the self-loops the layer adds.
        """
        return self._capture_scores(lambda: self(x, edge_index, edge_attr, size=size, return_attention_weights=True))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads}, "
            f"lipschitz_norm={self.lipschitz_norm}, alpha={self.alpha}, variant={self.variant!r})"
        )
