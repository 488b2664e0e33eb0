"""Python's cyclic garbage collector paused while a training process starts up.

Why: starting a run imports torch and torch_geometric (which brings ``torch._dynamo`` and sympy) and
composes the configuration with Hydra, creating some 650,000 container objects that live as long as the
process. CPython's collector runs a full collection over all of them every time enough new objects have
accumulated, several times during start-up, each one costing about 0.4 s of CPU on the machine of
docs/performance.md. The collector cannot free any of them, since they are module objects and
configuration nodes. So ``train.py`` turns the collector off when it starts (:func:`pause`). Once the
imports and the configuration are done, just before the data loads, the run turns it back on
(:func:`resume`). Before that, it moves every object then alive into the permanent generation
(:func:`gc.freeze`), which later full collections skip. The data and the model are created afterwards and
stay collectable, so in a sweep that runs its jobs in one process, one job's cycles do not outlive it. The
measurements are in docs/performance.md, "Start-up".

The cost: cycles that became garbage during start-up (about 12,000 objects here, a few MB) are frozen
with the rest instead of being freed. A full collection to free them first costs as much as one of the
collections the pause saves.

Library code calling :func:`lipgnn.train.run.run` never pauses, so :func:`resume` does nothing there. A
collector that the caller turned off itself stays off.
"""

from __future__ import annotations

import gc

__all__ = ["is_paused", "pause", "resume"]

_paused = False


def pause() -> None:
    """Turn the cyclic collector off until :func:`resume`, unless it already is off (then nothing changes)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze every object alive now into the permanent generation and turn the collector back on, if
    :func:`pause` turned it off; otherwise do nothing."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False


def is_paused() -> bool:
    """Whether :func:`pause` has turned the collector off and :func:`resume` has not yet run."""
    return _paused
