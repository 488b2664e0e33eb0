r"""``diagnose(model, data)``: per-layer over-smoothing and Lipschitz diagnostics of any PyG network.

Every :class:`torch_geometric.nn.conv.MessagePassing` module that runs in ``model``'s forward pass is found
by forward hooks, in call order (:mod:`lipgnn.diagnostics.calls`); ``model`` needs no particular structure.
The table has one row for the input features ``data.x`` (layer 0, ``depth`` 0) and one per message-passing
call (``depth`` 1, 2, ...), measured on the output :math:`H` of each call (``[n, d]``, eval mode, no
gradients) on the graph of ``data``:

* raw, scaling with the features: ``dirichlet`` :math:`\mathcal{E}_1`, ``laplacian`` :math:`\mathcal{E}_2`
  (Guan & He §2, per entry), ``feature_norm`` :math:`\sqrt{\|H\|_F^2/n}`, ``group_distance_ratio`` (PyG's
  ``DiffGroupNorm.group_distance_ratio`` as it is, with ``labels``);
* scale-free: ``rayleigh`` :math:`\mathcal{E}/\|H\|^2` (the normalised Dirichlet energy), ``mad`` (Chen et
  al.'s mean average distance), ``group_ratio`` (the group ratio of the standardised features; its
  no-separation baseline :math:`C^2/((C-1)^2 \sum_i (1 - 1/|X_i|)) \approx C/(C-1)^2` is in ``settings``
  and the summary). Formulas and sources: :mod:`lipgnn.diagnostics.measures`;
* ``attn_grad_norm`` (``train_steps > 0``, attention layers): the largest norm of the gradient of the layer's
  attention parameters (:func:`lipgnn.models.grad_norms.attention_parameters`, the quantity of the
  LipschitzNorm paper's Fig. 2) over ``train_steps`` Adam steps of cross-entropy on the labelled nodes (or
  graphs); the other columns are measured before those steps, on the model as given, which is restored after;
  with ``every = k`` the quantities are also recorded every k steps (:class:`lipgnn.diagnostics.Monitor`,
  ``Diagnosis.history``);
* ``lipschitz_lower``: a lower bound on the layer's Lipschitz constant, within ``lipschitz_budget_s``
  (:mod:`lipgnn.diagnostics.layer_lipschitz`).

``kind`` names the layer's class and, for attention layers, whether its scores are LipschitzNorm'd. The
one-line summary (:mod:`lipgnn.diagnostics.summary`) judges smoothing from the scale-free quantities and
scale from the feature norm, separately.

Cost on one CPU thread: dominated by MAD (:math:`O(m n d)`, ``m = mad_nodes``) and the Lipschitz power
iterations (bounded by their budget); ``train_steps=0`` skips the gradient columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.diagnostics.calls import (
    QUANTITIES,
    Call,
    Forward,
    check_data,
    default_forward,
    first_tensor,
    measure,
    node_labels,
    one_line,
    trace_message_passing,
)
from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.layer_lipschitz import lipschitz_lower_bounds
from lipgnn.diagnostics.measures import no_separation_baseline
from lipgnn.diagnostics.monitor import Monitor, heatmap, json_ready, mad_sample, save_figure
from lipgnn.diagnostics.summary import energy_ratio, summarise
from lipgnn.errors import ConfigError, ModelError
from lipgnn.models.grad_norms import attention_parameters

COLUMNS: tuple[str, ...] = ("layer", "depth", "kind", *QUANTITIES, "attn_grad_norm", "lipschitz_lower")


def _targets(data: Any, labels: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """The training steps' labels and the rows of the output they score: per node (``data.train_mask`` where
    it is a node mask, else all) or per graph (every output row)."""
    y = labels if labels is not None else getattr(data, "y", None)
    if y is None:
        return None, None
    mask = getattr(data, "train_mask", None)
    if y.numel() == int(data.num_nodes) and isinstance(mask, Tensor) and mask.dim() == 1 \
            and mask.numel() == y.numel():
        return y, mask
    return y, None


def _train(model: nn.Module, data: Any, calls: list[Call], labels: Tensor | None, forward: Forward, steps: int,
           lr: float, history: Monitor | None) -> dict[int, float]:
    """``steps`` Adam steps of cross-entropy; per attention layer (by ``id``) the largest gradient norm of its
    attention parameters, and ``history`` recorded every ``history.every`` steps. The model's parameters and
    training flag are restored afterwards."""
    y, mask = _targets(data, labels)
    if y is None:
        raise ConfigError("diagnose(train_steps > 0) needs labels: pass labels=<tensor> or data with .y")
    layers: dict[int, list[Tensor]] = {}
    for call in calls:
        try:
            layers[id(call.module)] = attention_parameters(call.module)
        except TypeError:
            continue
    if not layers and history is None:  # nothing to record: no attention layer, no history
        return {}
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    was_training = model.training
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    peaks = dict.fromkeys(layers, 0.0)
    try:
        for step in range(steps + 1):
            if history is not None:
                history.step(step)
            if step == steps:
                break
            model.train()
            opt.zero_grad(set_to_none=True)
            try:
                out = first_tensor(forward(model, data))
            except Exception as exc:  # the user's model: one line, the traceback chained
                raise ModelError(f"{type(model).__name__}'s forward pass failed in training step {step + 1}: "
                                 f"{one_line(exc)}") from exc
            if out is None or out.size(0) != (y.numel() if mask is None else mask.numel()):
                raise ConfigError(f"the model's output ({None if out is None else tuple(out.shape)}) has no row per "
                                  f"label ({y.numel()}); diagnose(train_steps > 0) needs logits per node or graph")
            (F.cross_entropy(out, y) if mask is None else F.cross_entropy(out[mask], y[mask])).backward()
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
    """What :func:`diagnose` measured: ``layers`` (layer 0 and one row per message-passing call,
    :data:`COLUMNS`), the settings that produced it and, with ``every > 0``, ``history`` (the monitor's
    frame over the training steps)."""

    layers: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    history: pd.DataFrame | None = None

    @property
    def energy_ratio(self) -> float:
        """:math:`\\mathcal{E}_1` of the first message-passing layer over that of the last (``inf`` when the
        last collapsed)."""
        return energy_ratio(list(self.layers.loc[self.layers["depth"] > 0, "dirichlet"]))

    @property
    def summary(self) -> str:
        """One line a person can act on (:func:`lipgnn.diagnostics.summary.summarise`), with the Lipschitz
        step's budget where it stopped early."""
        line = summarise(self.layers, baseline=self.settings.get("group_ratio_baseline", math.nan))
        measured, total = self.settings.get("lipschitz_measured"), len(self.layers) - 1
        cut = self.settings.get("lipschitz_cut", 0)
        if self.settings.get("lipschitz") and measured is not None and (measured < total or cut):
            line += (f"; Lipschitz bound on {measured} of {total} layers"
                     + (f", {cut} cut short" if cut else "") + f" (budget {self.settings['lipschitz_budget_s']:g} s)")
        return line

    def plot(self, path: str | Path) -> Path:
        """Three panels against the layer (0 = input): the raw energies and feature norm, the scale-free
        quantities with the group ratio's no-separation baseline, and the attention-gradient peaks and
        Lipschitz lower bounds; written to ``path`` (format from its suffix)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        df = self.layers
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        panels = ((("dirichlet", "laplacian", "feature_norm"), "raw: energies (per entry), feature norm"),
                  (("rayleigh", "mad", "group_ratio"), "scale-free: energy/|X|^2, MAD, group ratio"),
                  (("attn_grad_norm", "lipschitz_lower"), "attention-gradient peak, Lipschitz lower bound"))
        for ax, (columns, title) in zip(axes, panels, strict=True):
            plotted = False
            for col, style in zip(columns, ("o-", "s-", "^-"), strict=False):
                values = df[col].astype(float)
                if values.notna().any():
                    ax.plot(df["depth"], values.clip(lower=1e-300), style, ms=3, label=col)
                    plotted = True
            if columns[0] == "rayleigh" and math.isfinite(self.settings.get("group_ratio_baseline", math.nan)):
                ax.axhline(self.settings["group_ratio_baseline"], ls="--", lw=0.8, color="grey",
                           label="group ratio, no separation")
            if plotted:
                ax.set_yscale("log")
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "not measured (train_steps=0, lipschitz=False)", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8)
            ax.set_xlabel("layer (0 = input features, then message-passing calls)")
            ax.set_title(title, fontsize=9)
        fig.suptitle(self.summary, fontsize=7, wrap=True)
        return save_figure(fig, path)

    def heatmap(self, path: str | Path, quantity: str = "rayleigh") -> Path:
        """The training steps' ``history`` of ``quantity`` as a layer x step heat map (needs ``every > 0``)."""
        if self.history is None:
            raise ConfigError("no history: call diagnose(..., train_steps=N, every=k) with k > 0")
        return heatmap(self.history, path, quantity)

    def to_record(self) -> dict[str, Any]:
        """A strict-JSON dict: ``{"layers": {column: [...]}, "input": {column: value}, "summary", "settings"}``
        (non-finite values as ``None``), plus ``"history"`` with ``every > 0``. ``layers`` holds the
        message-passing calls only (as records before layer 0 did); ``input`` the layer-0 row."""
        df = self.layers
        record: dict[str, Any] = {
            "layers": json_ready(df[df["depth"] > 0][list(COLUMNS)]),
            "input": {k: v[0] for k, v in json_ready(df[df["depth"] == 0][list(COLUMNS)]).items()},
            "summary": self.summary,
            "settings": {k: None if isinstance(v, float) and not math.isfinite(v) else v
                         for k, v in self.settings.items()}}
        if self.history is not None:
            record["history"] = json_ready(self.history)
        return record


def diagnose(model: nn.Module, data: Any, *, labels: Tensor | None = None, train_steps: int = 0, every: int = 0,
             lr: float = 0.005, lipschitz: bool = True, lipschitz_nodes: int = 16, lipschitz_steps: int = 0,
             power_iters: int = 10, lipschitz_budget_s: float = 10.0, mad_nodes: int = 512, seed: int = 0,
             forward: Forward = default_forward, device: str | torch.device | None = None) -> Diagnosis:
    """Per-layer diagnostics of every message-passing layer of ``model`` on ``data`` (module docstring).

    Args:
        model: any ``nn.Module`` whose forward runs PyG ``MessagePassing`` layers.
        data: a PyG ``Data`` or batch (``x``, ``edge_index``; ``edge_attr`` and ``batch`` passed on where the
            model's forward names them; ``y`` and ``train_mask`` used for ``train_steps``). ``HeteroData``
            is refused in one line.
        labels: class labels per node, or per graph of a batch (each node gets its graph's), for the group
            ratios (and the training steps); default none (those columns NaN).
        train_steps: Adam steps (learning rate ``lr``) over which the attention-gradient peak is taken; 0 skips.
        every: with ``train_steps``, record the quantities every ``every`` steps (``Diagnosis.history``).
        lipschitz: compute ``lipschitz_lower`` on ``lipschitz_nodes`` output nodes (their 2-hop subgraph),
            ``power_iters`` power iterations plus ``lipschitz_steps`` ascent steps, starting no new layer
            after ``lipschitz_budget_s`` seconds.
        mad_nodes: rows of the MAD average (all nodes when ``<= 0`` or more than ``n``).
        seed: draws the MAD rows, the Lipschitz nodes and start vectors; the global RNG is not touched.
        forward: ``forward(model, data)`` runs the model (default
            :func:`lipgnn.diagnostics.calls.default_forward`).
        device: move the model (in place, as ``nn.Module.to`` does) and the data (a copy) there first.

    Raises:
        ConfigError: no ``MessagePassing`` layer in ``model`` or none ran; unusable data or labels;
            ``train_steps > 0`` without labels.
        ModelError: the model's forward pass failed (the message names the layer call; the cause is chained).
    """
    for name, value in (("train_steps", train_steps), ("every", every)):
        if isinstance(value, bool) or int(value) < 0:
            raise ConfigError(f"{name}={value} is invalid; use an integer >= 0")
    if every and not train_steps:
        raise ConfigError(f"every={every} records over training steps; pass train_steps > 0 with it")
    check_data(data)
    if device is not None:
        model.to(device)
        data = data.to(device)
        labels = None if labels is None else labels.to(device)
    num_nodes = int(data.num_nodes)
    y = node_labels(data, labels)
    calls = trace_message_passing(model, data, forward)
    graph = GraphMeasure(data.edge_index, num_nodes)
    gen = torch.Generator().manual_seed(int(seed))
    mad_rows = mad_sample(num_nodes, mad_nodes, gen)
    lip_nodes = torch.randperm(num_nodes, generator=gen)[:max(1, min(lipschitz_nodes, num_nodes))]
    rows = measure(calls, data.x, graph, y, mad_rows)
    history = (Monitor(model, data, every=int(every), labels=labels, forward=forward, mad_nodes=mad_nodes,
                       seed=seed) if every and train_steps else None)
    peaks = _train(model, data, calls, labels, forward, int(train_steps), lr, history) if train_steps else {}
    rows[0].update(attn_grad_norm=math.nan, lipschitz_lower=math.nan)
    for row, call in zip(rows[1:], calls, strict=True):
        row["attn_grad_norm"] = peaks.get(id(call.module), math.nan)
        row["lipschitz_lower"] = math.nan
    settings: dict[str, Any] = {
        "train_steps": int(train_steps), "every": int(every), "lr": lr, "lipschitz": lipschitz,
        "lipschitz_nodes": int(lip_nodes.numel()), "lipschitz_steps": lipschitz_steps, "power_iters": power_iters,
        "mad_nodes": num_nodes if mad_rows is None else int(mad_rows.numel()), "seed": int(seed),
        "energy_normalise": "entries", "device": str(data.x.device),
        "group_ratio_baseline": no_separation_baseline(y) if y is not None else math.nan}
    if lipschitz:
        was_training = model.training
        model.eval()
        try:
            bounds, spent = lipschitz_lower_bounds(calls, lip_nodes.to(data.edge_index.device), num_nodes,
                                                   steps=lipschitz_steps, power_iters=power_iters, generator=gen,
                                                   budget_s=lipschitz_budget_s)
        finally:
            model.train(was_training)
        for row, bound in zip(rows[1:], bounds, strict=True):
            row["lipschitz_lower"] = bound
        settings.update(spent)
    return Diagnosis(pd.DataFrame(rows, columns=list(COLUMNS)), settings,
                     None if history is None else history.frame)


__all__ = ["COLUMNS", "Diagnosis", "diagnose", "energy_ratio"]
