r"""The message-passing calls of any PyG model, found by hooks, and what is measured on each of them.

Shared by :func:`lipgnn.diagnostics.diagnose` (one forward pass) and :class:`lipgnn.diagnostics.Monitor`
(the same quantities over training). Every :class:`torch_geometric.nn.conv.MessagePassing` module that runs
in the model's forward pass gives one call, in call order (a layer called twice gives two, ``name#k``).
The rows of :func:`measure` are layer 0 (the input features ``data.x``) and then one per call, with the
quantities of :mod:`lipgnn.diagnostics.measures`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import HeteroData
from torch_geometric.nn.conv import MessagePassing

from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.measures import (
    feature_norm,
    group_distance_ratio,
    group_ratio,
    mean_average_distance,
    rayleigh_quotient,
)
from lipgnn.errors import ConfigError, ModelError
from lipgnn.models.grad_norms import attention_parameters

Forward = Callable[[nn.Module, Any], Any]
#: The quantities measured per row, in table order (after ``layer``, ``depth``, ``kind``).
QUANTITIES: tuple[str, ...] = ("dirichlet", "laplacian", "rayleigh", "feature_norm", "mad", "group_distance_ratio",
                               "group_ratio")
#: Optional arguments of a model's forward that :func:`default_forward` fills from the data when present.
DATA_ARGUMENTS: tuple[str, ...] = ("edge_attr", "batch")


def default_forward(model: nn.Module, data: Any) -> Any:
    """``model(data.x, data.edge_index, **extra)``, the call of PyG's models (``GCN``, ``GIN``, ...) and the
    suite's. ``extra`` holds what the data has and the model's forward names: ``batch`` (a batch of graphs),
    and ``edge_attr`` where the model uses edge features, i.e. its forward requires ``edge_attr`` or one of its
    message-passing layers was built with an ``edge_dim`` (PyG's ``GAT`` names ``edge_attr`` in its forward
    but fails on it without ``edge_dim``)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    extra = {name: getattr(data, name) for name in DATA_ARGUMENTS
             if name in params and getattr(data, name, None) is not None}
    if "edge_attr" in extra and params["edge_attr"].default is not inspect.Parameter.empty and not any(
            getattr(m, "edge_dim", None) is not None for m in model.modules() if isinstance(m, MessagePassing)):
        del extra["edge_attr"]
    return model(data.x, data.edge_index, **extra)


def check_data(data: Any) -> None:
    """One line for data :func:`diagnose` cannot measure: ``HeteroData``, or no ``x`` / ``edge_index``."""
    if isinstance(data, HeteroData):
        raise ConfigError("diagnose measures homogeneous graphs, not HeteroData: pass data.to_homogeneous() with "
                          "a model over it (e.g. torch_geometric.nn.to_hetero's input model), or one node type's "
                          "Data(x=..., edge_index=...)")
    missing = [k for k in ("x", "edge_index") if not isinstance(getattr(data, k, None), Tensor)]
    if missing:
        raise ConfigError(f"diagnose needs a torch_geometric Data with x and edge_index; {type(data).__name__} has "
                          f"no {' or '.join(missing)}")


def node_labels(data: Any, labels: Tensor | None) -> Tensor | None:
    """``labels`` per node: as given when there is one per node; a graph's label for each of its nodes when
    there is one per graph (``data.batch``, or one graph); ``ConfigError`` in one line otherwise."""
    if labels is None:
        return None
    n = int(data.num_nodes)
    if labels.dim() == 2 and labels.size(1) == 1:
        labels = labels.view(-1)
    if labels.dim() != 1 or labels.is_floating_point():
        raise ConfigError(f"labels of shape {tuple(labels.shape)} ({labels.dtype}) are not class indices; pass a 1-D "
                          "integer tensor with one class per node or per graph (multi-label targets: pick one)")
    if labels.numel() == n:
        return labels
    batch = getattr(data, "batch", None)
    graphs = int(batch.max()) + 1 if isinstance(batch, Tensor) and batch.numel() else 1
    if labels.numel() == graphs:
        return labels[batch] if isinstance(batch, Tensor) and batch.numel() else labels.expand(n)
    raise ConfigError(f"labels has {labels.numel()} entries for {n} nodes and {graphs} graph(s); pass one label per "
                      "node, or per graph with data.batch")


@dataclass
class Call:
    """One message-passing call: the module's path (``name#k`` for repeated calls), the module, its inputs
    and its output (the first tensor it returned, detached)."""

    name: str
    module: MessagePassing
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Tensor | None


def first_tensor(out: Any) -> Tensor | None:
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
        return out[0]
    return None


def kind_of(module: nn.Module) -> str:
    """The layer's class, and for an attention layer whether its scores are LipschitzNorm'd:
    ``LipGATConv [LipschitzNorm a=1]``, ``GATConv [plain attention]``, ``GCNConv``."""
    name = type(module).__name__
    if getattr(module, "lipschitz_norm", False) is True:
        return f"{name} [LipschitzNorm a={float(getattr(module, 'alpha', 1.0)):g}]"
    try:
        attention_parameters(module)
    except TypeError:
        return name
    return f"{name} [plain attention]"


def _forward_failed(exc: Exception, model: nn.Module, running: list[str], done: list[Call]) -> ModelError:
    where = (f"in layer {running[-1]}" if running else
             f"after layer {done[-1].name}" if done else "before its first message-passing layer")
    return ModelError(f"{type(model).__name__}'s forward pass failed {where} (call {len(done) + len(running)}): "
                      f"{one_line(exc)}")


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (``Type`` alone for an empty message)."""
    message = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def trace_message_passing(model: nn.Module, data: Any, forward: Forward = default_forward) -> list[Call]:
    """Every ``MessagePassing`` call of one eval-mode, no-gradient forward pass, in call order, with its inputs
    and output (detached). The model's training flag is restored. A failing forward pass is a
    :class:`~lipgnn.errors.ModelError` naming the layer call (the original exception chained)."""
    names = {id(m): n for n, m in model.named_modules()}
    calls: list[Call] = []
    running: list[str] = []
    handles = []

    def name_of(module: nn.Module) -> str:
        return names.get(id(module), type(module).__name__) or "(model)"

    def before(module: nn.Module, args: tuple[Any, ...]) -> None:
        running.append(f"{name_of(module)} ({type(module).__name__})")

    def after(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        running.pop()
        tensor = first_tensor(out)
        calls.append(Call(name_of(module), module, args, dict(kwargs),  # type: ignore[arg-type]
                          None if tensor is None else tensor.detach()))

    for module in model.modules():
        if isinstance(module, MessagePassing):
            handles.append(module.register_forward_pre_hook(before))
            handles.append(module.register_forward_hook(after, with_kwargs=True))
    if not handles:
        raise ConfigError(f"{type(model).__name__} contains no torch_geometric MessagePassing layer; diagnose "
                          "measures the message-passing layers of a PyG model (GCNConv, GATConv, ...)")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            forward(model, data)
    except Exception as exc:  # the user's model: one line naming the call, the traceback chained
        raise _forward_failed(exc, model, running, calls) from exc
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if not calls:
        raise ConfigError(f"none of {type(model).__name__}'s MessagePassing layers ran in its forward pass; "
                          "pass forward=<callable(model, data)> if the model is called differently")
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    seen: dict[str, int] = {}
    for call in calls:
        if counts[call.name] > 1:
            seen[call.name] = seen.get(call.name, 0) + 1
            call.name = f"{call.name}#{seen[call.name]}"
    return calls


def measure_features(h: Tensor | None, graph: GraphMeasure, y: Tensor | None,
                     mad_rows: Tensor | None) -> dict[str, float]:
    """:data:`QUANTITIES` of one layer's output (``nan`` where ``h`` is not ``[n, d]`` floats on the graph);
    MAD and the group ratios average over the nodes ``mad_rows`` (all when ``None``)."""
    usable = (h is not None and h.dim() == 2 and h.size(0) == graph.num_nodes and h.is_floating_point()
              and bool(torch.isfinite(h).all()))
    if not usable:
        return dict.fromkeys(QUANTITIES, math.nan)
    assert h is not None
    return {"dirichlet": graph.energy(h, 1, normalise="entries"), "laplacian": graph.energy(h, 2, normalise="entries"),
            "rayleigh": rayleigh_quotient(graph, h), "feature_norm": feature_norm(h),
            "mad": mean_average_distance(h, mad_rows),
            "group_distance_ratio": group_distance_ratio(h, y, mad_rows) if y is not None else math.nan,
            "group_ratio": group_ratio(h, y, mad_rows) if y is not None else math.nan}


def measure(calls: list[Call], x: Tensor | None, graph: GraphMeasure, y: Tensor | None,
            mad_rows: Tensor | None) -> list[dict[str, Any]]:
    """Layer 0 (the input features ``x``; ``nan`` for ``None``) and one row per call: ``layer``, ``depth``,
    ``kind`` and :data:`QUANTITIES`."""
    rows = [{"layer": "input", "depth": 0, "kind": "input features", **measure_features(x, graph, y, mad_rows)}]
    for depth, call in enumerate(calls, start=1):
        rows.append({"layer": call.name, "depth": depth, "kind": kind_of(call.module),
                     **measure_features(call.output, graph, y, mad_rows)})
    return rows


__all__ = ["DATA_ARGUMENTS", "QUANTITIES", "Call", "Forward", "check_data", "default_forward", "first_tensor",
           "kind_of", "measure", "measure_features", "node_labels", "one_line", "trace_message_passing"]
