r"""``diagnose(model, data)``: per-layer over-smoothing and Lipschitz diagnostics of any PyG network.

Every :class:`torch_geometric.nn.conv.MessagePassing` module that runs in ``model``'s forward pass is found
by forward hooks, in call order (a layer called twice gives two rows); ``model`` needs no particular
structure. For the output :math:`H` of each call (``[n, d]``, eval mode, no gradients) on the graph of
``data``:

* ``dirichlet``: Guan & He's :math:`\mathcal{E}_1(H) = \frac{1}{n d} \sum_i \sum_{j \sim i} |H_j - H_i|^2`
  (§2, :math:`\omega = 1`, :math:`\mu = \deg + 1`, averaged per entry: ``normalise="entries"`` of
  :mod:`lipgnn.diagnostics.energy`, so widths compare);
* ``laplacian``: :math:`\mathcal{E}_2(H) = \frac{1}{n d} \sum_i |\Delta_\mu H(i)|^2 \mu_i` (§2, per entry);
* ``mad``: the mean average distance of Chen et al. (*Measuring and Relieving the Over-smoothing Problem for
  Graph Neural Networks*, AAAI 2020), with the global mask (every pair of nodes):
  :math:`D_{ij} = 1 - \cos(H_i, H_j)`, :math:`\bar D_i = \sum_j D_{ij} / \#\{j : D_{ij} > 0\}`,
  :math:`\mathrm{MAD} = \frac{1}{n} \sum_i \bar D_i` (rows :math:`i` on at most ``mad_nodes`` nodes drawn
  once, all columns);
* ``group_distance_ratio`` (``labels`` given): PyG's ``DiffGroupNorm.group_distance_ratio`` (Zhou et al.
  2020), mean inter-class over mean intra-class distance;
* ``attn_grad_norm`` (``train_steps > 0``, attention layers): the largest norm of the gradient of the layer's
  attention parameters (:func:`lipgnn.models.grad_norms.attention_parameters`, the quantity of the
  LipschitzNorm paper's Fig. 2) over ``train_steps`` Adam steps of cross-entropy on the labelled nodes;
  the diagnostics above are measured before those steps, on the model as given, which is restored after;
* ``lipschitz_lower``: a lower bound on the layer's Lipschitz constant
  :math:`\mathrm{Lip}_2(h \mapsto \mathrm{conv}(h))` (Frobenius norms) from
  :func:`lipgnn.lipschitz.estimate.lower_bound_at` (the suite's Jacobian maximisation) at the layer's
  actual input, restricted to ``lipschitz_nodes`` output nodes on their 2-hop subgraph: the output rows of
  those nodes depend only on it for one-hop layers whose normalisation reads degrees (GCN), so the
  restricted Jacobian is a submatrix of the full one and its norm a lower bound of the full one's.

Cost on one CPU thread: dominated by MAD (:math:`O(m n d)`, ``m = mad_nodes``) and the Lipschitz power
iterations on the small subgraphs; ``train_steps=0`` skips the gradient columns.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import DiffGroupNorm
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import k_hop_subgraph

from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.errors import ConfigError
from lipgnn.lipschitz.estimate import lower_bound_at
from lipgnn.models.grad_norms import attention_parameters

COLUMNS: tuple[str, ...] = ("layer", "kind", "dirichlet", "laplacian", "mad", "group_distance_ratio",
                            "attn_grad_norm", "lipschitz_lower")
#: Cosine distances below this count as 0 in MAD (rounding of 1 - cos(h, h) in float64).
ZERO_DISTANCE = 1e-12

Forward = Callable[[nn.Module, Any], Any]


def default_forward(model: nn.Module, data: Any) -> Any:
    """``model(data.x, data.edge_index)``, the call of PyG's models (``GCN``, ``GAT``, ...) and the suite's."""
    return model(data.x, data.edge_index)


@dataclass
class _Call:
    name: str
    module: MessagePassing
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Tensor | None


def _first_tensor(out: Any) -> Tensor | None:
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
        return out[0]
    return None


def trace_message_passing(model: nn.Module, data: Any, forward: Forward = default_forward) -> list[_Call]:
    """Every ``MessagePassing`` call of one eval-mode, no-gradient forward pass, in call order, with its inputs
    and output (detached). The model's training flag is restored."""
    names = {id(m): n for n, m in model.named_modules()}
    calls: list[_Call] = []
    handles = []

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        tensor = _first_tensor(out)
        calls.append(_Call(names.get(id(module), type(module).__name__) or "(model)", module,  # type: ignore[arg-type]
                           args, dict(kwargs), None if tensor is None else tensor.detach()))

    for module in model.modules():
        if isinstance(module, MessagePassing):
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
    if not handles:
        raise ConfigError(f"{type(model).__name__} contains no torch_geometric MessagePassing layer; diagnose "
                          "measures the message-passing layers of a PyG model (GCNConv, GATConv, ...)")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            forward(model, data)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if not calls:
        raise ConfigError(f"none of {type(model).__name__}'s MessagePassing layers ran in its forward pass; "
                          "pass forward=<callable(model, data)> if the model is called differently")
    # Layers called more than once get one row per call: name#k.
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    seen: dict[str, int] = {}
    for call in calls:
        if counts[call.name] > 1:
            seen[call.name] = seen.get(call.name, 0) + 1
            call.name = f"{call.name}#{seen[call.name]}"
    return calls


def mean_average_distance(h: Tensor, rows: Tensor | None = None, *, chunk: int = 512) -> float:
    r"""Chen et al.'s global MAD: :math:`\frac{1}{|R|}\sum_{i \in R} \sum_j D_{ij} / \#\{j: D_{ij} > 0\}` with
    :math:`D_{ij} = 1 - \cos(h_i, h_j)` (below :data:`ZERO_DISTANCE`: 0), over rows ``R`` (default all nodes)."""
    h = h.detach().to(dtype=torch.float64, device="cpu")
    unit = h / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
    unit[h.norm(dim=1) == 0] = 0.0  # a zero vector: cosine 0, distance 1 (sklearn's convention)
    index = torch.arange(h.size(0)) if rows is None else rows
    total = 0.0
    for start in range(0, index.numel(), chunk):
        dist = 1.0 - unit[index[start:start + chunk]] @ unit.T
        dist[dist < ZERO_DISTANCE] = 0.0  # a node and its copies (itself included) are at distance 0
        nonzero = (dist > 0).sum(dim=1)
        total += float((dist.sum(dim=1) / (nonzero + 1e-8)).sum())
    return total / max(index.numel(), 1)


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


def _restricted_call(call: _Call, nodes: Tensor, num_nodes: int) -> Callable[[Tensor], Tensor] | None:
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
        return _first_tensor(conv_forward(z, *rest, **kwargs))[mapping]  # type: ignore[index]

    f.x0 = x_sub  # type: ignore[attr-defined]
    return f


def _labels_and_mask(data: Any, labels: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    y = labels if labels is not None else getattr(data, "y", None)
    if y is None:
        return None, None
    mask = getattr(data, "train_mask", None)
    if mask is None or mask.dim() != 1:
        mask = torch.ones(y.size(0), dtype=torch.bool, device=y.device)
    return y, mask


def _attention_grad_maxima(model: nn.Module, data: Any, calls: list[_Call], labels: Tensor | None,
                           forward: Forward, steps: int, lr: float) -> dict[int, float]:
    """Per attention layer (by ``id``), the largest gradient norm of its attention parameters over ``steps``
    Adam steps; the model's parameters, training flag and optimiser-free state are restored afterwards."""
    y, mask = _labels_and_mask(data, labels)
    if y is None:
        raise ConfigError("diagnose(train_steps > 0) needs labels: pass labels=<tensor> or data with .y")
    layers: dict[int, list[Tensor]] = {}
    for call in calls:
        try:
            layers[id(call.module)] = attention_parameters(call.module)
        except TypeError:
            continue
    if not layers:
        return {}
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    was_training = model.training
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    peaks = dict.fromkeys(layers, 0.0)
    model.train()
    try:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            out = _first_tensor(forward(model, data))
            if out is None:
                raise ConfigError("the model's forward returned no tensor; diagnose(train_steps > 0) needs logits")
            F.cross_entropy(out[mask], y[mask]).backward()
            for key, ps in layers.items():
                grads = [p.grad.detach().double().norm() for p in ps if p.grad is not None]
                if grads:
                    peaks[key] = max(peaks[key], float(torch.stack(grads).norm()))
            opt.step()
    finally:
        model.load_state_dict(saved)
        model.train(was_training)
        opt.zero_grad(set_to_none=True)
    return peaks


@dataclass
class Diagnosis:
    """What :func:`diagnose` measured: ``layers`` (one row per message-passing call, :data:`COLUMNS`) and the
    settings that produced it."""

    layers: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def energy_ratio(self) -> float:
        """:math:`\\mathcal{E}_1` of the first layer over that of the last (``inf`` when the last collapsed)."""
        return energy_ratio(list(self.layers["dirichlet"]))

    @property
    def summary(self) -> str:
        """One line a person can act on (see :func:`summarise`)."""
        return summarise(self.layers)

    def plot(self, path: str | Path) -> Path:
        """Energies and MAD per layer (log scale) and, beside them, the attention-gradient peaks and Lipschitz
        lower bounds; written to ``path`` (format from its suffix)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        df = self.layers
        depth = range(1, len(df) + 1)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
        for col, style in (("dirichlet", "o-"), ("laplacian", "s-"), ("mad", "^-")):
            values = df[col].clip(lower=1e-300)
            left.plot(depth, values, style, ms=3, label=col)
        left.set_yscale("log")
        left.set_xlabel("message-passing layer (call order)")
        left.set_title("energies (per entry) and MAD")
        left.legend(fontsize=8)
        plotted = False
        for col, style in (("attn_grad_norm", "o-"), ("lipschitz_lower", "s-")):
            if df[col].notna().any():
                right.plot(depth, df[col], style, ms=3, label=col)
                plotted = True
        if plotted:
            right.set_yscale("log")
            right.legend(fontsize=8)
        else:
            right.text(0.5, 0.5, "no gradient or Lipschitz columns\n(train_steps=0, lipschitz=False)",
                       ha="center", va="center", transform=right.transAxes)
        right.set_xlabel("message-passing layer (call order)")
        right.set_title("attention-gradient peak, Lipschitz lower bound")
        fig.suptitle(self.summary, fontsize=8)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"layers": {column: [values]}, "summary": ..., "settings": ...}`` (NaN as None)."""
        columns = {c: [None if isinstance(v, float) and not math.isfinite(v) and not math.isinf(v) else v
                       for v in self.layers[c].tolist()] for c in COLUMNS}
        return {"layers": columns, "summary": self.summary, "settings": dict(self.settings)}


def energy_ratio(dirichlet: list[float]) -> float:
    """``dirichlet[0] / dirichlet[-1]``: how many times the energy falls from the first message-passing layer
    to the last (``inf`` when the last is 0, ``nan`` when the first is)."""
    first, last = float(dirichlet[0]), float(dirichlet[-1])
    if not first > 0:
        return math.nan
    return math.inf if last <= 0 else first / last


def summarise(df: pd.DataFrame) -> str:
    """One line: how the Dirichlet energy changes from the first to the last layer and at what rate
    (halving / doubling every k layers, from a least-squares line through log2 E_1), the verdict
    (over-smoothing: a fall of 100x or more; exploding: a rise of 100x or more; else stable), and the
    largest attention gradient or Lipschitz lower bound where measured."""
    n = len(df)
    energies = [max(float(e), 0.0) for e in df["dirichlet"]]
    parts: list[str] = []
    if n >= 2 and energies[0] > 0:
        ratio = energy_ratio(energies)
        logs = [math.log2(max(e, 1e-300)) for e in energies]
        mean_x, mean_y = (n - 1) / 2, sum(logs) / n
        slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(logs)) / sum(
            (i - mean_x) ** 2 for i in range(n))
        if not math.isfinite(ratio):
            parts.append(f"energy collapses to 0 between layer 1 and {n}: over-smoothing (nodes indistinguishable)")
        elif ratio >= 1:
            rate = f", halving every {-1 / slope:.2g} layers" if slope < 0 else ""
            verdict = "over-smoothing" if ratio >= 100 else "no strong over-smoothing"
            parts.append(f"energy falls {_times(ratio)} from layer 1 to {n}{rate}: {verdict}")
        else:
            rate = f", doubling every {1 / slope:.2g} layers" if slope > 0 else ""
            verdict = "features explode" if 1 / ratio >= 100 else "no over-smoothing"
            parts.append(f"energy rises {_times(1 / ratio)} from layer 1 to {n}{rate}: {verdict}")
    elif n >= 1:
        parts.append(f"energy {energies[0]:.3g} at layer 1 ({n} message-passing layer{'s' if n > 1 else ''})")
    for col, what in (("attn_grad_norm", "attention gradients reach"), ("lipschitz_lower", "Lipschitz lower bound")):
        values = df[col].dropna()
        if len(values):
            at = int(values.idxmax())
            parts.append(f"{what} {float(values.max()):.2g} at layer {at + 1}")
    return "; ".join(parts) if parts else "no message-passing output to measure"


def _times(ratio: float) -> str:
    if ratio < 1000:
        return f"{ratio:.3g}x"
    exponent = math.floor(math.log10(ratio))
    mantissa = ratio / 10 ** exponent
    return f"10^{exponent}x" if mantissa < 1.5 else f"{mantissa:.1f}·10^{exponent}x"


def diagnose(model: nn.Module, data: Any, *, labels: Tensor | None = None, train_steps: int = 0,
             lr: float = 0.005, lipschitz: bool = True, lipschitz_nodes: int = 16, lipschitz_steps: int = 0,
             power_iters: int = 10, mad_nodes: int = 512, seed: int = 0,
             forward: Forward = default_forward) -> Diagnosis:
    """Per-layer diagnostics of every message-passing layer of ``model`` on ``data`` (module docstring).

    Args:
        model: any ``nn.Module`` whose forward runs PyG ``MessagePassing`` layers.
        data: a PyG ``Data`` (``x``, ``edge_index``; ``y`` and ``train_mask`` used for ``train_steps``).
        labels: node labels for ``group_distance_ratio`` (and the training steps); default none (column NaN).
        train_steps: Adam steps (learning rate ``lr``) over which the attention-gradient peak is taken; 0 skips.
        lipschitz: compute ``lipschitz_lower`` on ``lipschitz_nodes`` output nodes (their 2-hop subgraph),
            ``power_iters`` power iterations plus ``lipschitz_steps`` ascent steps.
        mad_nodes: rows of the MAD average (all nodes when ``<= 0`` or more than ``n``).
        seed: draws the MAD rows, the Lipschitz nodes and start vectors; the global RNG is not touched.
        forward: ``forward(model, data)`` runs the model (default ``model(data.x, data.edge_index)``).

    Raises:
        ConfigError: no ``MessagePassing`` layer in ``model`` or none ran; ``train_steps > 0`` without labels.
    """
    if isinstance(train_steps, bool) or int(train_steps) < 0:
        raise ConfigError(f"train_steps={train_steps} is invalid; use an integer >= 0")
    num_nodes = int(data.num_nodes)
    calls = trace_message_passing(model, data, forward)
    graph = GraphMeasure(data.edge_index, num_nodes)
    gen = torch.Generator().manual_seed(int(seed))
    mad_rows = (None if mad_nodes <= 0 or mad_nodes >= num_nodes
                else torch.randperm(num_nodes, generator=gen)[:mad_nodes])
    lip_nodes = torch.randperm(num_nodes, generator=gen)[:max(1, min(lipschitz_nodes, num_nodes))]
    y = labels if labels is not None else None
    peaks = _attention_grad_maxima(model, data, calls, labels, forward, int(train_steps), lr) if train_steps else {}
    rows = []
    was_training = model.training
    model.eval()
    try:
        for call in calls:
            h = call.output
            usable = h is not None and h.dim() == 2 and h.size(0) == num_nodes
            row: dict[str, Any] = {"layer": call.name, "kind": type(call.module).__name__}
            row["dirichlet"] = graph.energy(h, 1, normalise="entries") if usable else math.nan
            row["laplacian"] = graph.energy(h, 2, normalise="entries") if usable else math.nan
            row["mad"] = mean_average_distance(h, mad_rows) if usable else math.nan
            row["group_distance_ratio"] = (
                DiffGroupNorm.group_distance_ratio(h.detach().float().cpu(), y.cpu())
                if usable and y is not None else math.nan)
            row["attn_grad_norm"] = peaks.get(id(call.module), math.nan)
            row["lipschitz_lower"] = math.nan
            if lipschitz:
                f = _restricted_call(call, lip_nodes.to(data.edge_index.device), num_nodes)
                if f is not None:
                    _, best = lower_bound_at(f, f.x0, steps=lipschitz_steps,  # type: ignore[attr-defined]
                                             power_iters=power_iters, generator=gen)
                    row["lipschitz_lower"] = best
            rows.append(row)
    finally:
        model.train(was_training)
    settings = {"train_steps": int(train_steps), "lr": lr, "lipschitz": lipschitz,
                "lipschitz_nodes": int(lip_nodes.numel()), "lipschitz_steps": lipschitz_steps,
                "power_iters": power_iters, "mad_nodes": num_nodes if mad_rows is None else int(mad_rows.numel()),
                "seed": int(seed), "energy_normalise": "entries"}
    return Diagnosis(pd.DataFrame(rows, columns=list(COLUMNS)), settings)


__all__ = ["COLUMNS", "Diagnosis", "default_forward", "diagnose", "energy_ratio", "mean_average_distance",
           "summarise", "trace_message_passing"]
