r"""``lipschitz_lower`` of :func:`lipgnn.diagnostics.diagnose`: a lower bound on each message-passing layer's
Lipschitz constant, within a time budget.

For one call of a layer, :math:`\mathrm{Lip}_2(h \mapsto \mathrm{conv}(h)) \ge \|J_f(h)\|_2` where :math:`f`
restricts the layer to ``nodes`` output rows on their 2-hop subgraph (Frobenius norms; the suite's Jacobian
maximisation :func:`lipgnn.lipschitz.estimate.lower_bound_at` at the layer's actual input). The output rows
of those nodes depend only on that subgraph for one-hop layers whose normalisation reads degrees (GCN), so the
restricted Jacobian is a submatrix of the full one and its norm a lower bound of the full one's.

The power iterations cost a Jacobian-vector product each; on an expensive layer (PNA) they dominated
``diagnose``. :func:`lipschitz_lower_bounds` therefore works within ``budget_s`` seconds: it measures the
first and last layers first and then the others in call order, stops a layer's power iteration at the
deadline (every iterate is already a lower bound) and starts no layer after it, and says how many layers it
measured and how many it cut short.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import k_hop_subgraph

from lipgnn.diagnostics.calls import Call, first_tensor
from lipgnn.lipschitz.estimate import lower_bound_at, spectral_norm


def reference_twin(conv: nn.Module) -> nn.Module:
    """``conv`` itself, or for a layer of the suite's fused CSR path (:mod:`lipgnn.nn.fused`, whose compiled
    autograd functions torch.func cannot differentiate) the same layer as an instance of the PyG-path class it
    extends (tested equal to it), sharing its parameters and buffers."""
    if not type(conv).__module__.startswith("lipgnn.nn.fused"):
        return conv
    for cls in type(conv).__mro__[1:]:
        if not cls.__module__.startswith("lipgnn.nn.fused"):
            twin = cls.__new__(cls)
            twin.__dict__.update({k: v for k, v in conv.__dict__.items() if not inspect.ismethod(v)})
            # PyG generates propagate/edge_updater per class from its forward's source; the reference class may
            # hold its parent's (wrong signature): the generic ones read the instance's inspected hooks.
            twin.propagate = MessagePassing.propagate.__get__(twin)
            twin.edge_updater = MessagePassing.edge_updater.__get__(twin)
            return twin
    return conv


def restricted_call(call: Call, nodes: Tensor, num_nodes: int) -> Callable[[Tensor], Tensor] | None:
    """``z -> conv(z, <the call's other inputs on the 2-hop subgraph of nodes>)[nodes]``, or None where the
    call's inputs cannot be restricted (bipartite input, sparse adjacency, cached normalisation)."""
    if not call.args or not isinstance(call.args[0], Tensor) or call.args[0].dim() != 2:
        return None
    if getattr(call.module, "cached", False):
        return None
    edge_pos = [i for i, a in enumerate(call.args) if isinstance(a, Tensor) and not a.is_floating_point()
                and a.dim() == 2 and a.size(0) == 2]
    edge_key = [k for k, a in call.kwargs.items() if k == "edge_index" and isinstance(a, Tensor)]
    if len(edge_pos) + len(edge_key) != 1:
        return None
    edge_index = call.args[edge_pos[0]] if edge_pos else call.kwargs[edge_key[0]]
    if edge_index.layout != torch.strided:
        return None
    subset, sub_edges, mapping, edge_mask = k_hop_subgraph(nodes, 2, edge_index, relabel_nodes=True,
                                                           num_nodes=num_nodes)
    num_edges = edge_index.size(1)

    def restrict(value: Any) -> Any:
        if value is edge_index:
            return sub_edges
        if isinstance(value, Tensor) and value.dim() >= 1:
            if value.size(0) == num_nodes:
                return value[subset]
            if value.size(0) == num_edges:
                return value[edge_mask]
        return value

    rest = [restrict(a) for a in call.args[1:]]
    kwargs = {k: restrict(v) for k, v in call.kwargs.items()}
    kwargs.pop("activation", None)  # a fused layer's folded activation is the block's, not the layer's
    conv_forward = reference_twin(call.module).forward
    x_sub = call.args[0][subset]

    def f(z: Tensor) -> Tensor:
        return first_tensor(conv_forward(z, *rest, **kwargs))[mapping]  # type: ignore[index]

    f.x0 = x_sub  # type: ignore[attr-defined]
    return f


def order(n: int) -> list[int]:
    """The order in which layers are measured: the first, the last, then the others in call order."""
    return list(dict.fromkeys([0, n - 1, *range(1, n - 1)])) if n > 0 else []


def bounded_norm(f: Callable[[Tensor], Tensor], x: Tensor, *, power_iters: int, steps: int,
                 generator: torch.Generator, deadline: float, tol: float = 1e-6) -> tuple[float, bool]:
    r"""``(bound, complete)``: the largest :math:`\|J_f(x) v\|` over the power iterates :math:`v` (unit
    vectors, so each is a lower bound on :math:`\|J_f(x)\|_2`), stopping at convergence (``tol`` relative),
    after ``power_iters`` or at ``deadline`` (``complete`` False), then ``steps`` ascent steps of
    :func:`~lipgnn.lipschitz.estimate.lower_bound_at` if time remains. The start vector is drawn on the CPU
    from ``generator`` and moved to ``x``'s device."""
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    best = previous = 0.0
    for _ in range(max(1, power_iters)):
        sigma, v = spectral_norm(f, x, iters=1, v0=v)
        best = max(best, sigma)
        if abs(sigma - previous) <= tol * max(sigma, 1e-30):
            break
        previous = sigma
        if time.perf_counter() > deadline:
            return best, False
    if steps > 0:
        if time.perf_counter() > deadline:
            return best, False
        _, ascent = lower_bound_at(f, x, steps=steps, power_iters=1, generator=generator)
        best = max(best, ascent)
    return best, True


def lipschitz_lower_bounds(calls: list[Call], nodes: Tensor, num_nodes: int, *, steps: int, power_iters: int,
                           generator: torch.Generator, budget_s: float) -> tuple[list[float], dict[str, Any]]:
    """One lower bound per call (``nan`` where the call cannot be restricted, the estimate failed or the budget
    ran out before it started) and ``{"lipschitz_measured", "lipschitz_cut", "lipschitz_budget_s",
    "lipschitz_time_s"}`` (``cut``: layers whose iterations the budget stopped early)."""
    bounds = [math.nan] * len(calls)
    start = time.perf_counter()
    deadline = start + float(budget_s)
    measured = cut = 0
    for index in order(len(calls)):
        if time.perf_counter() > deadline:
            break
        f = restricted_call(calls[index], nodes, num_nodes)
        if f is None:
            continue
        try:
            bounds[index], complete = bounded_norm(f, f.x0, power_iters=power_iters,  # type: ignore[attr-defined]
                                                   steps=steps, generator=generator, deadline=deadline)
        except (RuntimeError, NotImplementedError, ValueError):  # an operation torch.func cannot differentiate
            continue
        measured += 1
        cut += not complete
    return bounds, {"lipschitz_measured": measured, "lipschitz_cut": cut, "lipschitz_budget_s": float(budget_s),
                    "lipschitz_time_s": round(time.perf_counter() - start, 3)}


__all__ = ["bounded_norm", "lipschitz_lower_bounds", "order", "reference_twin", "restricted_call"]
