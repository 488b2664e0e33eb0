r"""``monitor(model, data, every=k)``: the per-layer quantities of :func:`lipgnn.diagnostics.diagnose` over
training, for any training loop.

.. code-block:: python

    with monitor(model, data, every=10) as m:      # records every 10th training forward pass by itself
        for epoch in range(200):
            ...                                    # the user's loop, unchanged
    m.frame                                        # DataFrame: epoch, layer, depth, kind, quantities
    m.heatmap("rayleigh.png", "rayleigh")          # layer x epoch

or ``m.step(epoch)`` once per epoch in the loop (then only those calls record, at ``epoch % every == 0``).
In the automatic mode the ``epoch`` column counts the model's training-mode forward passes before the
measurement (one per optimiser step in a full-batch loop), and leaving the block records the final state.

Each measurement is one eval-mode forward pass without gradients on ``data``
(:func:`lipgnn.diagnostics.calls.trace_message_passing`): it draws no random numbers and changes no
parameter, so the training run is the same with and without the monitor. Rows: layer 0 (the input features)
and one per message-passing call, with :data:`lipgnn.diagnostics.calls.QUANTITIES`
(:mod:`lipgnn.diagnostics.measures` defines them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from lipgnn.diagnostics.calls import (
    QUANTITIES,
    Forward,
    check_data,
    default_forward,
    measure,
    node_labels,
    trace_message_passing,
)
from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.errors import ConfigError

#: Columns of :attr:`Monitor.frame`.
COLUMNS: tuple[str, ...] = ("epoch", "layer", "depth", "kind", *QUANTITIES)


def mad_sample(num_nodes: int, mad_nodes: int, generator: torch.Generator) -> Tensor | None:
    """The rows of the MAD average: all nodes (``None``) when ``mad_nodes <= 0`` or ``>= n``, else a draw."""
    if mad_nodes <= 0 or mad_nodes >= num_nodes:
        return None
    return torch.randperm(num_nodes, generator=generator)[:mad_nodes]


def json_ready(frame: pd.DataFrame) -> dict[str, list[Any]]:
    """``{column: [values]}`` with every non-finite float as ``None`` (strict JSON has no NaN or Infinity)."""
    return {c: [None if isinstance(v, float) and not math.isfinite(v) else v for v in frame[c].tolist()]
            for c in frame.columns}


class Monitor:
    """Per-layer quantities of ``model`` on ``data`` over training (module docstring).

    Args:
        model: any ``nn.Module`` whose forward runs PyG ``MessagePassing`` layers.
        data: a PyG ``Data`` (or batch) to measure on, the same at every measurement.
        every: record every ``every``-th epoch (``step``) or training forward pass (automatic mode).
        labels: per-node or per-graph class labels for the group ratios (default none).
        forward: ``forward(model, data)`` (default: :func:`lipgnn.diagnostics.calls.default_forward`).
        mad_nodes: rows of the MAD average, drawn once with ``seed``.
    """

    def __init__(self, model: nn.Module, data: Any, *, every: int = 10, labels: Tensor | None = None,
                 forward: Forward = default_forward, mad_nodes: int = 512, seed: int = 0) -> None:
        if isinstance(every, bool) or int(every) < 1:
            raise ConfigError(f"monitor every={every} is invalid; use an integer >= 1")
        check_data(data)
        self.model, self.data, self.forward, self.every = model, data, forward, int(every)
        self.graph = GraphMeasure(data.edge_index, int(data.num_nodes))
        self.labels = node_labels(data, labels)
        self.mad_rows = mad_sample(int(data.num_nodes), mad_nodes, torch.Generator().manual_seed(int(seed)))
        self.rows: list[dict[str, Any]] = []
        self._forwards = 0
        self._explicit = False
        self._measuring = False
        self._handle: Any = None
        self._input: dict[str, Any] | None = None

    def measure(self, epoch: int) -> list[dict[str, Any]]:
        """Measure now and keep the rows under ``epoch``; returns them."""
        self._measuring = True
        try:
            calls = trace_message_passing(self.model, self.data, self.forward)
        finally:
            self._measuring = False
        if self._input is None:  # layer 0, the input features, does not change over training: measured once
            self._input = measure([], self.data.x, self.graph, self.labels, self.mad_rows)[0]
        layers = measure(calls, None, self.graph, self.labels, self.mad_rows)[1:]
        rows = [{"epoch": int(epoch), **row} for row in (self._input, *layers)]
        self.rows.extend(rows)
        return rows

    def step(self, epoch: int) -> bool:
        """Record at ``epoch`` when ``epoch % every == 0``; returns whether it did. Calling it switches the
        automatic mode off (and drops what it recorded before)."""
        if not self._explicit:
            self.rows.clear()
        self._explicit = True
        if int(epoch) % self.every:
            return False
        self.measure(int(epoch))
        return True

    def _after_forward(self, module: nn.Module, args: Any, out: Any) -> None:
        if self._measuring or self._explicit or not module.training:
            return
        done = self._forwards  # optimiser steps taken before this forward pass
        self._forwards += 1
        if done % self.every == 0:
            self.measure(done)

    def __enter__(self) -> Monitor:
        self._handle = self.model.register_forward_hook(self._after_forward)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.remove()
        self._handle = None
        last = self.rows[-1]["epoch"] if self.rows else None
        if exc_type is None and not self._explicit and self._forwards and last != self._forwards:
            self.measure(self._forwards)  # the state the loop leaves

    @property
    def frame(self) -> pd.DataFrame:
        """One row per (measurement, layer): :data:`COLUMNS`."""
        return pd.DataFrame(self.rows, columns=list(COLUMNS))

    def to_record(self) -> dict[str, list[Any]]:
        """:attr:`frame` as JSON-ready columns (non-finite values as ``None``)."""
        return json_ready(self.frame)

    def heatmap(self, path: str | Path, quantity: str = "rayleigh") -> Path:
        """``quantity`` as a layer x epoch heat map (log colour scale where all values are positive)."""
        return heatmap(self.frame, path, quantity)


def heatmap(frame: pd.DataFrame, path: str | Path, quantity: str = "rayleigh") -> Path:
    """A :attr:`Monitor.frame` (or a record's columns as a DataFrame) as a layer x epoch heat map of
    ``quantity``, saved to ``path`` (format from its suffix)."""
    if quantity not in QUANTITIES:
        raise ConfigError(f"heatmap quantity {quantity!r} is unknown; choose one of: {', '.join(QUANTITIES)}")
    if frame.empty:
        raise ConfigError("the monitor recorded nothing yet; train inside `with monitor(...)` or call m.step(epoch)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    grid = frame.pivot_table(index="depth", columns="epoch", values=quantity, aggfunc="first", dropna=False)
    values = grid.to_numpy(dtype=float)
    finite = values[~pd.isna(values)]
    log = finite.size > 0 and bool((finite > 0).all())
    fig, ax = plt.subplots(figsize=(7, 4))
    image = ax.imshow(values, aspect="auto", origin="lower", interpolation="nearest",
                      norm=LogNorm() if log else None,
                      extent=(-0.5, len(grid.columns) - 0.5, -0.5, len(grid.index) - 0.5))
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns], fontsize=7,
                  rotation=90 if len(grid.columns) > 12 else 0)
    step = max(1, len(grid.index) // 12)
    ax.set_yticks(range(0, len(grid.index), step), [str(d) for d in grid.index[::step]], fontsize=7)
    ax.set_xlabel("epoch")
    ax.set_ylabel("layer (0 = input features)")
    ax.set_title(f"{quantity} per layer over training" + (" (log colour scale)" if log else ""), fontsize=9)
    fig.colorbar(image, ax=ax, label=quantity)
    return save_figure(fig, path)


def save_figure(fig: Any, path: str | Path) -> Path:
    """``fig`` laid out, written to ``path`` (format from its suffix, folders made) and closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def frame_from_record(payload: dict[str, Any]) -> pd.DataFrame:
    """A run record's ``diagnostics["monitor"]`` (``log.diagnose_every``) as a :attr:`Monitor.frame`, for
    :func:`heatmap`; ``None`` values read back as NaN."""
    return pd.DataFrame({c: payload[c] for c in COLUMNS}).astype({q: float for q in QUANTITIES})


def monitor(model: nn.Module, data: Any, every: int = 10, **options: Any) -> Monitor:
    """A :class:`Monitor`, to use as ``with monitor(model, data, every=10) as m:`` or with ``m.step(epoch)``."""
    return Monitor(model, data, every=every, **options)


__all__ = ["COLUMNS", "Monitor", "frame_from_record", "heatmap", "json_ready", "mad_sample", "monitor", "save_figure"]
