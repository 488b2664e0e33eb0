r"""GATv2 with LipschitzNorm: a drop-in subclass of :class:`torch_geometric.nn.GATv2Conv`."""

# PyG's Inspector compares the type hints of overridden hooks with the parent's and silently falls
# back to a slow generic ``propagate`` when they differ, so hints stay in the parent's ``typing``
# spelling (``Optional``), no ``from __future__ import annotations``.
# ruff: noqa: UP006, UP007, UP035, UP045

from typing import Optional

import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GATv2Conv
from torch_geometric.typing import OptTensor
from torch_geometric.utils import softmax

from lipgnn.errors import ConfigError
from lipgnn.nn.lipschitz import gatv2_lipschitz_denominator
from lipgnn.nn.score_capture import ScoreCapture


class LipGATv2Conv(ScoreCapture, GATv2Conv):
    r"""GATv2 layer (Brody et al., ICLR 2022) with LipschitzNorm for a Lipschitz score function
    (Dasoulas et al., ICML 2021, eq. 15 and Theorem 3; the bound is derived in docs/reference.md,
    "LipschitzNorm for GATv2").

    Same constructor, forward signature, parameters and ``state_dict`` as
    :class:`torch_geometric.nn.GATv2Conv`; with ``lipschitz_norm=False`` the output is GATv2Conv's.
    With it on, the score of edge :math:`j \to i` in head :math:`h`,

    .. math::
        \tilde g_{ij} = \mathbf{a}_h^\top \mathrm{LeakyReLU}\big(\mathbf{W}_r x_i + \mathbf{W}_l x_j
        \,(+\, \mathbf{W}_e e_{ij})\big),

    is divided per target node and per head by

    .. math::
        c_i = \sqrt{k}\, \|\mathbf{a}_h\| \max_{j \in \mathcal{N}(i)} \|X_{ij}\|, \qquad
        X_{ij} = [\mathbf{W}_r x_i \,\|\, \mathbf{W}_l x_j \,(\|\, \mathbf{W}_e e_{ij})],

    (:math:`k` = 2, or 3 with edge features; self-loops included), and the attention is
    :math:`\alpha_{ij} = \mathrm{softmax}_{j}(\alpha\, \tilde g_{ij} / c_i)`, then attention dropout.
    So :math:`|g_{ij}| \le \alpha`, the attention weights are invariant to :math:`x \mapsto s\,x` for
    :math:`s > 0` when the projections have no bias, and each head's attention map on the columns
    :math:`X_{ij}` is Lipschitz with :math:`L_F \le e^{\alpha}\sqrt{1/n_i} + \alpha\sqrt{8}`
    (:math:`n_i = |\mathcal{N}(i)|`). Needs :math:`|\text{negative\_slope}| \le 1` (LeakyReLU then is
    1-Lipschitz).

    Args:
        in_channels, out_channels, heads, concat, negative_slope, dropout, add_self_loops, edge_dim,
            fill_value, bias, share_weights, residual, **kwargs: as :class:`torch_geometric.nn.GATv2Conv`.
        lipschitz_norm (bool): apply LipschitzNorm (default ``True``).
        alpha (float): score bound :math:`\alpha > 0` (default ``1.0``).
    """

    def __init__(self, *args, lipschitz_norm: bool = True, alpha: float = 1.0, **kwargs) -> None:
        if not alpha > 0:
            raise ConfigError(f"LipGATv2Conv alpha={alpha} must be positive; use e.g. alpha=1.0")
        super().__init__(*args, **kwargs)
        if lipschitz_norm and abs(self.negative_slope) > 1:
            raise ConfigError(f"LipGATv2Conv negative_slope={self.negative_slope}: the bound needs a 1-Lipschitz "
                              "LeakyReLU, i.e. |negative_slope| <= 1")
        self.lipschitz_norm = lipschitz_norm
        self.alpha = float(alpha)

    def edge_update(self, x_j: Tensor, x_i: Tensor, edge_attr: OptTensor,
                    index: Tensor, ptr: OptTensor,
                    dim_size: Optional[int]) -> Tensor:
        # GATv2Conv's pipeline (sum -> LeakyReLU -> dot with a -> softmax -> dropout) with the division
        # inserted before the softmax.
        x = x_i + x_j
        edge_proj: Optional[Tensor] = None
        if edge_attr is not None:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            assert self.lin_edge is not None
            edge_proj = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            x = x + edge_proj
        x = F.leaky_relu(x, self.negative_slope)
        alpha = (x * self.att).sum(dim=-1)
        if self.lipschitz_norm:
            denom = gatv2_lipschitz_denominator(x_i, x_j, self.att, index, dim_size, edge_proj=edge_proj)
            alpha = self.alpha * alpha / denom
        self._keep(alpha)
        alpha = softmax(alpha, index, ptr, dim_size)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        return alpha

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads}, "
                f"lipschitz_norm={self.lipschitz_norm}, alpha={self.alpha})")


__all__ = ["LipGATv2Conv"]
