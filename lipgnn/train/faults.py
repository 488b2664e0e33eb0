"""Fault injection for the resilience tests (and for rehearsing a sweep's failure modes by hand).

Inactive unless ``LIPGNN_FAULT`` is set: ``<kind>@<run-id substring>[:<epoch>]``, several separated by ``,``.
- ``raise@gcn-none``      — the run raises RuntimeError before training (an "OOM"-like crash)
- ``nan@gat-lip:3``       — the training loss becomes NaN at epoch 3 (a divergence)
- ``kill@gat-none:5``     — the process SIGKILLs itself after epoch 5 (and after that epoch's checkpoint)
No maintained library offers this for a training loop, hence this small module.
"""

from __future__ import annotations

import os
import signal


def _matches(kind: str, run_id: str) -> list[int | None]:
    out: list[int | None] = []
    for item in filter(None, os.environ.get("LIPGNN_FAULT", "").split(",")):
        name, _, rest = item.partition("@")
        pattern, _, epoch = rest.partition(":")
        if name == kind and pattern in run_id:
            out.append(int(epoch) if epoch else None)
    return out


def maybe_raise(run_id: str) -> None:
    if _matches("raise", run_id):
        raise RuntimeError(f"injected fault (LIPGNN_FAULT) in run {run_id}")


def maybe_nan(run_id: str, epoch: int, loss: float) -> float:
    return float("nan") if epoch in _matches("nan", run_id) else loss


def maybe_kill(run_id: str, epoch: int) -> None:
    if epoch in _matches("kill", run_id):
        os.kill(os.getpid(), signal.SIGKILL)
