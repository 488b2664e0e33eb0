r"""``lipschitz_norm(conv, alpha=...)``: LipschitzNorm on a PyG attention layer someone already built.

=================  ======================================  ============================================
given layer        returned layer                          score normalisation
=================  ======================================  ============================================
``GATConv``        :class:`~lipgnn.nn.LipGATConv`          eq. 17 (Corollary 1)
``TransformerConv`` :class:`~lipgnn.nn.LipTransformerConv` eq. 19 (Corollary 2)
``GATv2Conv``      :class:`~lipgnn.nn.LipGATv2Conv`        eq. 15 with GATv2's Lipschitz score
                                                           (docs/reference.md, "LipschitzNorm for GATv2")
=================  ======================================  ============================================

The returned layer is a new module of a subclass of the given class (``isinstance`` still holds), built
with the same constructor arguments and loaded with the given layer's ``state_dict`` (same keys, same
tensors copied), on the same device and dtype and in the same train/eval mode; the given layer is left
unchanged, and so is the global random state (a model built with and without it gets the same weights).
``impl="auto"`` takes the fused CSR twin (:mod:`lipgnn.nn.fused`, tested equal) for GAT and Transformer
layers on CPU, where it exists; GATv2 and every layer wrapped on another device run PyG's path. A layer wrapped
on CPU and then moved (``.to("cuda")``) keeps the fused class, whose every compiled-loop decision reads the
device of its inputs (:func:`lipgnn.nn.fused.kernels.available`): off the CPU it falls back to the eager
PyTorch twins, the path ``scripts/cuda_check.sh`` tests equal to PyG's on the GPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

from lipgnn.errors import ConfigError
from lipgnn.nn.lip_gat_conv import LipGATConv
from lipgnn.nn.lip_gatv2_conv import LipGATv2Conv
from lipgnn.nn.lip_transformer_conv import LipTransformerConv

#: The stock classes :func:`lipschitz_norm` can bound (and their LipschitzNorm subclasses).
SUPPORTED: tuple[type[nn.Module], ...] = (GATConv, GATv2Conv, TransformerConv)
IMPLS: tuple[str, ...] = ("auto", "pyg", "fused")


def _base_class(conv: nn.Module) -> type[nn.Module]:
    """The stock class of ``conv``: itself for a stock layer, the parent of a LipschitzNorm subclass; a
    user's own subclass (whose forward may differ) is refused."""
    lip_parents = {LipGATConv: GATConv, LipGATv2Conv: GATv2Conv, LipTransformerConv: TransformerConv}
    for cls in type(conv).__mro__:
        if cls in lip_parents:
            return lip_parents[cls]
        if cls in SUPPORTED and cls is type(conv):
            return cls
    names = ", ".join(c.__name__ for c in SUPPORTED)
    raise ConfigError(f"lipschitz_norm cannot bound {type(conv).__name__}: supported layers are {names} "
                      "(PyG's classes or lipgnn's LipschitzNorm versions of them)")


def _message_passing_kwargs(conv: nn.Module) -> dict[str, Any]:
    return {"aggr": conv.aggr, "flow": conv.flow}


def _gat_args(conv: Any) -> dict[str, Any]:
    """The constructor arguments GATConv and GATv2Conv share, read back from a built layer."""
    return {"in_channels": conv.in_channels, "out_channels": conv.out_channels, "heads": conv.heads,
            "concat": conv.concat, "negative_slope": conv.negative_slope, "dropout": conv.dropout,
            "add_self_loops": conv.add_self_loops, "edge_dim": conv.edge_dim, "fill_value": conv.fill_value,
            "bias": conv.bias is not None, "residual": bool(conv.residual)}


def _transformer_args(conv: Any) -> dict[str, Any]:
    if getattr(conv, "score", "dot") != "dot" or getattr(conv, "tie_qk", False):
        raise ConfigError("lipschitz_norm bounds dot-product scores; this TransformerConv uses "
                          f"score={conv.score!r}, tie_qk={conv.tie_qk}: build it with score='dot', tie_qk=False")
    return {"in_channels": conv.in_channels, "out_channels": conv.out_channels, "heads": conv.heads,
            "concat": conv.concat, "beta": conv.beta, "dropout": conv.dropout, "edge_dim": conv.edge_dim,
            "bias": conv.lin_key.bias is not None, "root_weight": conv.root_weight}


def _target_class(base: type[nn.Module], impl: str, device: torch.device) -> type[nn.Module]:
    if impl not in IMPLS:
        raise ConfigError(f"lipschitz_norm impl={impl!r} is unknown; choose one of: {', '.join(IMPLS)}")
    if base is GATv2Conv:
        if impl == "fused":
            raise ConfigError("lipschitz_norm impl='fused' has no GATv2Conv twin; use impl='auto' or 'pyg'")
        return LipGATv2Conv
    fused = impl == "fused" or (impl == "auto" and device.type == "cpu")
    if not fused:
        return LipGATConv if base is GATConv else LipTransformerConv
    from lipgnn.nn.fused import FusedLipGATConv, FusedLipTransformerConv

    return FusedLipGATConv if base is GATConv else FusedLipTransformerConv


def lipschitz_norm(conv: nn.Module, alpha: float = 1.0, *, variant: str = "paper", impl: str = "auto") -> nn.Module:
    r"""``conv`` with LipschitzNorm applied to its attention scores (module docstring: which bound per class).

    Args:
        conv: a ``GATConv``, ``GATv2Conv`` or ``TransformerConv`` (stock, or already LipschitzNorm'd: then
            rebuilt with the new ``alpha``).
        alpha: score bound :math:`\alpha > 0`: normalised scores lie in :math:`[-\alpha, \alpha]`.
        variant: ``"paper"`` (eq. 17/19) or ``"reference"`` (the authors' code) for GAT and Transformer;
            GATv2 has one formula and accepts ``"paper"`` only.
        impl: ``"auto"`` (fused on CPU where a fused twin exists), ``"pyg"`` or ``"fused"``.

    Returns:
        a new layer, ``isinstance`` of ``conv``'s stock class, with the same ``state_dict``.

    Raises:
        ConfigError: an unsupported class (one line naming the supported ones), a bad ``alpha``, ``variant``
            or ``impl``.
    """
    base = _base_class(conv)
    if not float(alpha) > 0:
        raise ConfigError(f"lipschitz_norm alpha={alpha} must be positive; use e.g. alpha=1.0")
    first = next(iter(conv.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    cls = _target_class(base, impl, device)
    lip: dict[str, Any] = {"lipschitz_norm": True, "alpha": float(alpha)}
    if base is GATv2Conv:
        if variant != "paper":
            raise ConfigError(f"lipschitz_norm variant={variant!r} exists for GATConv/TransformerConv only; "
                              "GATv2Conv has one bound (variant='paper')")
        args = {**_gat_args(conv), "share_weights": conv.share_weights}
    else:
        args = _gat_args(conv) if base is GATConv else _transformer_args(conv)
        lip["variant"] = variant
    # The new layer's own initialisation is overwritten by the state_dict: draw it on a forked generator so that
    # wrapping leaves the caller's random numbers (the next layers' initialisation) as they were.
    with torch.random.fork_rng(devices=[]):
        wrapped = cls(**args, **lip, **_message_passing_kwargs(conv))
    wrapped.load_state_dict(conv.state_dict())
    if first is not None:
        wrapped.to(device=device, dtype=first.dtype)
    return wrapped.train(conv.training)


__all__ = ["IMPLS", "SUPPORTED", "lipschitz_norm"]
