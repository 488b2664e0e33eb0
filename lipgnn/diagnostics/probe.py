r"""``log.energy=true``: Guan & He's per-layer energies (§2) of a trained run, at initialisation and after training.

For layers :math:`X^0` (encoder output) to :math:`X^L` (final hidden layer) of the run's DeepGNN, measured in
eval mode on the first evaluation batch (the whole graph for full-batch datasets):

.. math::
    \mathcal{E}_2(X^k) = \frac{1}{n} \sum_i |\Delta_\mu X^k(i)|^2 \mu_i, \qquad
    \mathcal{E}_1(X^k) = \frac{1}{n} \sum_i \sum_{j \sim i} |X^k(j) - X^k(i)|^2

(:math:`\omega_{ij} = 1`, :math:`\mu_i = \deg_i + 1`, the paper's 1/n prefactor). "After training" is the
model as the trainer leaves it (the last epoch's weights). Tracing runs without gradients and in eval mode,
so it draws no random numbers and leaves the training run bit-identical.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from torch import nn

from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.tracing import trace_layers

DEFINITION = "E_m(X^k) = (1/n) int_G |grad_mu^m X^k|^2 dmu, omega=1, mu=deg+1 (Guan & He §2); k=0 encoder output"
MONITOR_DEFINITION = ("lipgnn.diagnostics.monitor on the first evaluation batch, eval mode: depth 0 = input features, "
                      "then each message-passing call; quantities of lipgnn.diagnostics.measures")


def energy_profile(model: nn.Module, data: Any, graph: GraphMeasure | None = None, *,
                   dirichlet_every_layer: bool = True) -> dict[str, Any]:
    """``{"laplacian": [E_2(X^0..X^L)], "dirichlet": [E_1(X^0..X^L)], "width": d of X^L}`` of one
    eval-mode forward pass; ``dirichlet_every_layer=False`` keeps only ``[E_1(X^0), E_1(X^L)]`` (the
    edge-wise gather of E_1 dominates the cost on large graphs)."""
    layers = trace_layers(model, data.x, data.edge_index, getattr(data, "edge_attr", None))
    graph = graph or GraphMeasure(data.edge_index, int(data.num_nodes))
    dirichlet_layers = layers if dirichlet_every_layer else [layers[0], layers[-1]]
    return {"laplacian": [graph.energy(h, 2) for h in layers],
            "dirichlet": [graph.energy(h, 1) for h in dirichlet_layers], "width": int(layers[-1].size(1))}


def fit_traced(trainer: Any, model: nn.Module, task: Any, *, energy: bool, diagnose: bool = False,
               diagnose_every: int = 0) -> tuple[Any, dict[str, Any]]:
    """``trainer.fit(model, task)``; with ``energy`` also the per-layer energies before and after it; with
    ``diagnose`` :func:`lipgnn.diagnostics.diagnose.diagnose`'s table at initialisation (no training steps; its
    own generator, so the run's random numbers are untouched); with ``diagnose_every = k`` its per-layer
    quantities at initialisation and every k epochs (:class:`lipgnn.diagnostics.Monitor`, eval mode, no random
    numbers drawn), kept in ``trainer.carry`` so that a resumed run records its first segment's too.

    Returns ``(fit_result, extra)`` where ``extra`` is ``{}`` or ``{"diagnostics": {"energy": ..., "diagnose":
    ..., "monitor": ...}}``, to be merged into the run record.
    """
    if not energy and not diagnose and not diagnose_every:
        return trainer.fit(model, task), {}
    device = next(model.parameters()).device
    data = next(iter(task.eval_batches())).to(device)
    extra: dict[str, Any] = {}
    if diagnose:
        from lipgnn.diagnostics.diagnose import diagnose as run_diagnose

        table = run_diagnose(model, data, labels=getattr(data, "y", None), forward=_suite_forward).to_record()
        extra["diagnose"] = {"at": "init", **table}
    graph = GraphMeasure(data.edge_index, int(data.num_nodes)) if energy else None
    if graph is not None:
        # At initialisation; a resumed run restores the value its first segment measured (Trainer.carry).
        trainer.carry["energy_init"] = energy_profile(model, data, graph)
    if diagnose_every:
        _monitor(trainer, model, data, int(diagnose_every))
    result = trainer.fit(model, task)
    trainer.on_epoch = None
    if diagnose_every:
        from lipgnn.diagnostics.monitor import COLUMNS, json_ready

        extra["monitor"] = {"every": int(diagnose_every), "definition": MONITOR_DEFINITION,
                            **json_ready(pd.DataFrame(trainer.carry["monitor"], columns=list(COLUMNS)))}
    if graph is None:
        return result, {"diagnostics": extra}
    before = trainer.carry["energy_init"]
    after = energy_profile(model, data, graph)
    width = after.pop("width")
    before.pop("width")
    payload = {"definition": DEFINITION, "normalise": "nodes", "width": width,
               "init": before, "trained": after, "trained_at_epoch": int(result.epochs_run)}
    return result, {"diagnostics": {"energy": payload, **extra}}


def _monitor(trainer: Any, model: nn.Module, data: Any, every: int) -> None:
    """A :class:`~lipgnn.diagnostics.Monitor` measured at epoch 0 now and then every ``every`` epochs through
    ``trainer.on_epoch``, its rows appended to ``trainer.carry["monitor"]`` (saved with each checkpoint)."""
    from lipgnn.diagnostics.monitor import Monitor

    watch = Monitor(model, data, every=every, labels=getattr(data, "y", None), forward=_suite_forward)
    trainer.carry["monitor"] = watch.measure(0)  # a resumed run's carry replaces it with its first segment's

    def on_epoch(epoch: int) -> None:
        if epoch % every == 0:
            trainer.carry["monitor"] = [*trainer.carry.get("monitor", []), *watch.measure(epoch)]

    trainer.on_epoch = on_epoch


def _suite_forward(model: nn.Module, data: Any) -> Any:
    """The suite's models take ``edge_attr`` as well (``None`` where the data has none)."""
    return model(data.x, data.edge_index, getattr(data, "edge_attr", None))


__all__ = ["DEFINITION", "energy_profile", "fit_traced"]
