r"""Per-layer Lipschitz estimates and bounds of a :class:`~lipgnn.models.deep.DeepGNN` on its graph.

For each block :math:`l` the map is the block's conv on the fixed graph, :math:`h \mapsto
\mathrm{conv}_l(h, \mathcal{E})` (eval mode: dropout is the identity, and the block's activation and
normalisation are left out: ELU and ReLU are 1-Lipschitz). Norms are Frobenius (the spectral norm of the
``ND x ND`` Jacobian), LipschitzNorm's setting.

* ``at_input``: :math:`\|J(H_l)\|_2` at the layer's actual input :math:`H_l` on the dataset (power
  iteration, :func:`~lipgnn.lipschitz.estimate.spectral_norm`);
* ``estimate``: the larger of that and a short gradient ascent of :math:`\|J(X)\|_2` from :math:`H_l`
  (:func:`~lipgnn.lipschitz.estimate.maximise_jacobian_norm`), a lower bound on :math:`\mathrm{Lip}_2`;
* ``bound``: LipschitzNorm's upper bound (:func:`~lipgnn.nn.lipschitz_bounds.graph_layer_bound`;
  ``inf`` where none holds).

The whole network's estimate is :math:`\|J(X_0)\|_2` of the block stack at the encoder output
:math:`X_0`; its bound is the product of the per-layer bounds (Lemma 2.1 of Kim et al.).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from lipgnn.lipschitz.estimate import lower_bound_at, spectral_norm
from lipgnn.nn.lipschitz_bounds import graph_layer_bound


def _conv_fn(block: torch.nn.Module, edge_index: Tensor, edge_attr: Tensor | None,
             x_0: Tensor) -> Callable[[Tensor], Tensor]:
    conv = block.conv
    if block.call == "attention":
        return lambda z: conv(z, edge_index, edge_attr)
    if block.call == "initial":
        return lambda z: conv(z, x_0, edge_index)
    return lambda z: conv(z, edge_index)


def layer_inputs(model: torch.nn.Module, x: Tensor, edge_index: Tensor,
                 edge_attr: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
    """``(x_0, [H_0, ..., H_{L-1}])``: the encoder output and each block's input, eval mode, no grad."""
    model.eval()
    if not getattr(model, "uses_edge_attr", False):
        edge_attr = None
    with torch.no_grad():
        h = x_0 = model.encode(x)
        inputs = []
        for block in model.blocks:
            inputs.append(h)
            h = block(h, edge_index, edge_attr, x_0)
    return x_0, inputs


def estimate_layers(model: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None, *,
                    steps: int = 5, power_iters: int = 30, seed: int = 0) -> dict[str, Any]:
    """Per-layer ``at_input`` / ``estimate`` / ``bound`` and the whole network's, as a plain dict (``steps``
    ascent steps per layer, ``power_iters`` power iterations per spectral norm)."""
    gen = torch.Generator().manual_seed(seed)
    x_0, inputs = layer_inputs(model, x, edge_index, edge_attr)
    edge_attr = edge_attr if getattr(model, "uses_edge_attr", False) else None
    n = x_0.size(0)
    layers = []
    for idx, (block, h) in enumerate(zip(model.blocks, inputs, strict=True)):
        f = _conv_fn(block, edge_index, edge_attr, x_0)
        at_input, best = lower_bound_at(f, h, steps=steps, power_iters=power_iters, generator=gen)
        bound = graph_layer_bound(block.conv, edge_index, n) if block.call == "attention" else math.inf
        layers.append({"layer": idx, "at_input": at_input, "estimate": best, "bound": bound})

    def network(z: Tensor) -> Tensor:
        h = z
        for block in model.blocks:
            h = block(h, edge_index, edge_attr, x_0)
        return h

    whole, _ = spectral_norm(network, x_0, iters=power_iters, generator=gen)
    return {
        "layers": layers,
        "network_estimate": whole,
        "product_estimate": math.prod(r["estimate"] for r in layers),
        "product_bound": math.prod(r["bound"] for r in layers),
    }


def format_report(title: str, result: dict[str, Any]) -> str:
    """A plain-text table of :func:`estimate_layers`' result."""
    lines = [title, f"{'layer':>5}  {'at input':>12}  {'estimate':>12}  {'bound':>12}  {'bound/estimate':>14}"]
    for r in result["layers"]:
        ratio = r["bound"] / r["estimate"] if r["estimate"] > 0 else math.inf
        lines.append(f"{r['layer']:>5}  {r['at_input']:>12.4g}  {r['estimate']:>12.4g}  {r['bound']:>12.4g}  "
                     f"{ratio:>14.4g}")
    lines.append(f"network: estimate {result['network_estimate']:.4g}, product of layer estimates "
                 f"{result['product_estimate']:.4g}, product of bounds {result['product_bound']:.4g}")
    return "\n".join(lines)
