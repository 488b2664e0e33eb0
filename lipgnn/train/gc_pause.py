"""Python's cyclic garbage collector paused while a training process imports its heavy modules.

Why: a run imports torch and torch_geometric (which brings ``torch._dynamo`` and sympy), numba and the
project's layers, creating some 650,000 container objects that live as long as the process. CPython's
collector runs a full collection over all of them every time enough new objects have accumulated, several
times during start-up, each one costing about 0.4 s of CPU on the machine of docs/performance.md. The
collector cannot free any of them, since they are module objects. So ``train.py``'s task function turns
the collector off before those imports (:func:`pause`). Just before the data loads, the run turns it back
on (:func:`resume`), after moving every object then alive into the permanent generation
(:func:`gc.freeze`), which later full collections skip. The measurements are in docs/performance.md,
"Start-up".

What is frozen stays in memory for good, so the pause is kept narrow:
- It starts after Hydra has composed the configuration. Composing every job of a sweep up front leaves
  garbage cycles in proportion to the jobs (about 480,000 objects, 67 MB, for a 44-job sweep); with the
  collector on they are freed.
- The data and the model are created after the freeze and stay collectable.
- It happens once per process: a sweep's later jobs find the modules imported, and freezing again would
  also freeze the previous job's uncollected cycles.

The cost: cycles that became garbage during the imports (about 12,000 objects, a few MB) are frozen with the
rest instead of being freed. A full collection to free them first costs as much as one of the collections
the pause saves.

Library code calling :func:`lipgnn.runs.run` never pauses, so :func:`resume` does nothing there. A
collector that the caller turned off itself stays off.
"""

from __future__ import annotations

import gc

__all__ = ["is_paused", "pause", "resume"]

_paused = False
_resumed = False  # a pause has run its course in this process


def pause() -> None:
    """Turn the cyclic collector off until :func:`resume`. Nothing changes if it already is off, or if a
    pause has already been resumed in this process (see the module docstring)."""
    global _paused
    if gc.isenabled() and not _resumed:
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze every object alive now into the permanent generation and turn the collector back on, if
    :func:`pause` turned it off; otherwise do nothing."""
    global _paused, _resumed
    if _paused:
        gc.freeze()
        gc.enable()
        _paused, _resumed = False, True


def is_paused() -> bool:
    """Whether :func:`pause` has turned the collector off and :func:`resume` has not yet run."""
    return _paused
