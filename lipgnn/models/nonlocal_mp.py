r"""Nonlocal message passing (Guan & He §4.1): every attention head's aggregation scaled by its own
Laplacian energy.

.. math::
    \mathrm{NonlocalMP}(X) = \Big(\tfrac{1}{n}\|P_1 X - X\|^2\, P_1 X V_1 \,\Big\|\, \dots \,\Big\|\,
    \tfrac{1}{n}\|P_h X - X\|^2\, P_h X V_h\Big) W

:math:`P_i` is head :math:`i`'s row-stochastic attention matrix (softmax over a node's neighbours),
:math:`\|\cdot\|` the Frobenius norm over all :math:`n` nodes. The factor is the discrete analogue of
the nonlocal diffusion :math:`\partial_t X = (\int |\Delta_\mu X|^2 d\mu)\, \Delta_\mu X` of Theorem 4.1,
whose energy decays algebraically (:math:`\sim 1/t`) instead of exponentially.

It applies to any attention conv of the suite whose output is ``root + concat_h(P_h X V_h)``:
SAN (no root), GAT (root = bias) and GT (root = the skip projection ``lin_skip(x)``); only the
aggregation is scaled, the root term is left as it is. Two choices the paper leaves open are options:

* ``source="x"`` (default, the paper's formula): :math:`\|P_h X - X\|` on the block input :math:`X`
  (width ``hidden``), computed from the attention weights; ``source="xv"``:
  :math:`\|P_h X V_h - X V_h\|` on the projected values (cheaper: both terms exist already).
* ``grad=True`` (default): the factor is part of the graph and passes gradients, as the formula
  reads; ``grad=False`` detaches it (a per-head scalar gain that only rescales).

The fused CSR layers (``model.impl=fused``) hand over their per-head aggregation, attention weights
and CSR graph (``csr_heads``), and :math:`P_h X` for all heads is one sparse
product (:func:`head_laplacian_energy_csr`); PyG's layers are asked for ``return_attention_weights``.
"""

from __future__ import annotations

from torch import Tensor, nn

from lipgnn.nn.fused import CSRGraph
from lipgnn.nn.fused.sparse import csr_residual_energy

NONLOCAL_SOURCES = ("x", "xv")


def head_laplacian_energy(x: Tensor, alpha: Tensor, edge_index: Tensor) -> Tensor:
    r"""Per-head :math:`\tfrac{1}{n}\|P_h X - X\|^2` for ``x`` ``[n, d]``, attention weights ``alpha``
    ``[E, H]`` on the edges ``edge_index`` (``[2, E]``, messages ``source → target``, rows of
    :math:`P_h` = targets). Returns ``[H]``."""
    n = x.size(0)
    src, dst = edge_index[0], edge_index[1]
    messages = x.index_select(0, src).unsqueeze(1) * alpha.unsqueeze(-1)  # [E, H, d]
    px = x.new_zeros(n, alpha.size(1), x.size(1)).index_add_(0, dst, messages)  # P_h X, [n, H, d]
    return (px - x.unsqueeze(1)).pow(2).sum(dim=(0, 2)) / n


def head_laplacian_energy_csr(x: Tensor, alpha: Tensor, graph: CSRGraph) -> Tensor:
    r"""Per-head :math:`\tfrac{1}{n}\|P_h X - X\|^2` (:func:`head_laplacian_energy`) with :math:`P_h` the
    CSR matrix of ``alpha`` (``[E, H]``, ``graph``'s edge order): :math:`P_h X` for all heads is one
    sparse product on the shared ``x`` ``[n, d]`` (:func:`~lipgnn.nn.fused.sparse.csr_residual_energy`;
    no ``[E, H, d]`` messages), differentiable in ``x`` and ``alpha``.
    Returns ``[H]``."""
    n, heads = x.size(0), alpha.size(1)
    if graph.num_edges == 0:
        return x.pow(2).sum().div(n).expand(heads)
    return csr_residual_energy(alpha, x, graph) / n


class NonlocalScale(nn.Module):
    r"""Runs an attention conv and scales each head's aggregation by its Laplacian energy (module
    docstring; Guan & He §4.1, NonlocalMP).

    Args:
        source: ``"x"`` (the paper's :math:`\|P_h X - X\|^2`) or ``"xv"`` (:math:`\|P_h X V_h - X V_h\|^2`).
        grad: let gradients flow through the factor (``False`` detaches it).
    """

    def __init__(self, source: str = "x", grad: bool = True) -> None:
        super().__init__()
        if source not in NONLOCAL_SOURCES:
            raise ValueError(f"source must be one of {NONLOCAL_SOURCES}, got {source!r}")
        self.source = source
        self.grad = bool(grad)
        #: The last forward's factors ``[H]`` (detached), for diagnostics.
        self.last_factor: Tensor | None = None

    @staticmethod
    def _root(conv: nn.Module, x: Tensor) -> Tensor | float:
        """The conv's non-aggregated term: ``lin_skip(x)`` (TransformerConv with a root weight: GT) or the
        bias (GATConv), else 0 (SAN)."""
        if hasattr(conv, "lin_value"):
            return conv.lin_skip(x) if getattr(conv, "root_weight", False) else 0.0
        return conv.bias if conv.bias is not None else 0.0

    @staticmethod
    def _root_and_values(conv: nn.Module, x: Tensor) -> tuple[Tensor | float, Tensor]:
        """The conv's non-aggregated term and its per-node values ``X V`` (``[n, H·C]``)."""
        if hasattr(conv, "lin_value"):  # TransformerConv (GT, SAN): out = concat P_h X V_h (+ lin_skip x)
            return NonlocalScale._root(conv, x), conv.lin_value(x)
        # GATConv: out = concat P_h X W_h + bias
        return NonlocalScale._root(conv, x), conv.lin(x)

    def forward(self, conv: nn.Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        if not getattr(conv, "concat", True):
            raise ValueError("nonlocal message passing scales each head; it needs head_aggregation=concat")
        if getattr(conv, "res", None) is not None or getattr(conv, "lin_beta", None) is not None:
            raise ValueError("nonlocal message passing supports convs without residual/beta terms")
        heads = conv.heads
        parts = conv.csr_heads(x, edge_index, edge_attr) if hasattr(conv, "csr_heads") else None
        if parts is not None:
            # Fused CSR layer: its aggregation and attention weights, without the reference path.
            root = self._root(conv, x)
            agg = parts.heads  # P_h X V_h, [n, H, C]
            if self.source == "x":
                factor = head_laplacian_energy_csr(x, parts.alpha, parts.graph)
            else:
                factor = (agg - parts.value).pow(2).sum(dim=(0, 2)) / x.size(0)
        elif self.source == "x":
            root = self._root(conv, x)
            out, (used_index, alpha) = conv(x, edge_index, edge_attr, return_attention_weights=True)
            agg = (out - root).view(x.size(0), heads, -1)  # P_h X V_h, [n, H, C]
            factor = head_laplacian_energy(x, alpha, used_index)
        else:
            root, values = self._root_and_values(conv, x)
            out = conv(x, edge_index, edge_attr)
            agg = (out - root).view(x.size(0), heads, -1)
            # P_h (X V_h + b) - (X V_h + b) = P_h X V_h - X V_h: a value bias cancels (rows of P sum to 1).
            factor = (agg - values.view_as(agg)).pow(2).sum(dim=(0, 2)) / x.size(0)
        return root + self.scale_heads(agg, factor)

    def scale_heads(self, agg: Tensor, factor: Tensor) -> Tensor:
        r"""``agg`` ``[n, H, C]`` (the heads' :math:`P_h X V_h`) times ``factor`` ``[H]``
        (:math:`\tfrac{1}{n}\|P_h X - X\|^2`, detached unless ``grad``), heads concatenated to ``[n, H·C]``;
        records the factor in :attr:`last_factor`. The fused SAN block, which computes ``agg`` and the
        energies itself (:func:`lipgnn.nn.fused.san.san_attention`), enters here."""
        if not self.grad:
            factor = factor.detach()
        self.last_factor = factor.detach()
        return (agg * factor.view(1, -1, 1)).reshape(agg.size(0), -1)

    def extra_repr(self) -> str:
        return f"source={self.source}, grad={self.grad}"


__all__ = ["NONLOCAL_SOURCES", "NonlocalScale", "head_laplacian_energy", "head_laplacian_energy_csr"]
