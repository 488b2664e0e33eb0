r"""Per-layer representations of any :class:`~lipgnn.models.deep.DeepGNN`, by forward hooks.

:math:`X^0` is the input of the first block (the encoder's output), :math:`X^k` the output of block
:math:`k` (:math:`k = 1, \dots, L`); :math:`X^L` is the final hidden layer, before the decoder. The model
runs in eval mode (dropout off) and without gradients; its training flag is restored afterwards.
The energies of the trace are Guan & He's :math:`\mathcal{E}_m(X^k)` (§2), see :mod:`lipgnn.diagnostics.energy`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lipgnn.diagnostics.energy import GraphMeasure


def _blocks(model: nn.Module) -> nn.ModuleList:
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise TypeError(f"{type(model).__name__} has no non-empty `blocks` ModuleList; expected a DeepGNN")
    return blocks


@torch.no_grad()
def trace_layers(model: nn.Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> list[Tensor]:
    r""":math:`[X^0, X^1, \dots, X^L]` of one eval-mode forward pass (detached, on the model's device)."""
    blocks = _blocks(model)
    outputs: list[Tensor] = []

    def keep_input(module: nn.Module, args: tuple[Any, ...]) -> None:
        outputs.append(args[0].detach())

    def keep_output(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        outputs.append((out[0] if isinstance(out, tuple) else out).detach())

    handles = [blocks[0].register_forward_pre_hook(keep_input)]
    handles += [block.register_forward_hook(keep_output) for block in blocks]
    was_training = model.training
    model.eval()
    try:
        model(x, edge_index, edge_attr)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if len(outputs) != len(blocks) + 1:
        raise RuntimeError(f"traced {len(outputs)} representations for {len(blocks)} blocks; "
                           "a block ran more or less than once per forward pass")
    return outputs


def layer_energies(model: nn.Module, data: Any, m: int = 2, *, normalise: str | None = None,
                   graph: GraphMeasure | None = None) -> list[float]:
    r""":math:`[\mathcal{E}_m(X^0), \dots, \mathcal{E}_m(X^L)]` (Guan & He §2) on ``data`` (a PyG ``Data``
    with ``x`` and ``edge_index``; ``edge_attr`` is passed on when present). ``graph`` reuses a measure
    built for ``data.edge_index``."""
    layers = trace_layers(model, data.x, data.edge_index, getattr(data, "edge_attr", None))
    graph = graph or GraphMeasure(data.edge_index, int(data.num_nodes))
    return [graph.energy(h, m, normalise=normalise) for h in layers]


__all__ = ["layer_energies", "trace_layers"]
