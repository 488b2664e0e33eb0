"""The one seeding rule: what a run's ``seed`` fixes, and when.

Every door that builds a model from a config (the training, energy and Kim job kinds, ``lipgnn lipschitz``, the
demo) starts it through :func:`start`; ``lipgnn diagnose`` (which also builds models from a factory) and the bench
(whose variants need no dataset) seed through :func:`seed_run` at the same two points. So one config starts from the
same initial weights whatever door it came through (``tests/test_seeding.py``):

1. **Data.** :func:`seed_run` (Python's ``random``, NumPy, torch on the CPU and every CUDA device), then the
   dataset is loaded with ``seed``: a random split, a generated TREES set and Planetoid's missing feature vectors
   are drawn from it.
2. **Model initialisation.** :func:`seed_run` again, then the model is built. Loading may or may not draw random
   numbers (a cache hit draws none), so the initial weights never depend on the path the data took, nor on
   whether this door loaded the data at all (a caller that holds them already passes them in).
3. **Dropout** draws from torch's global generator, continuing from step 2 after the build's draws; the trainer
   orders the training batches with its own generator seeded with ``seed``
   (:class:`lipgnn.train.trainer.Trainer`); a resumed run restores every generator from its checkpoint.

This is the rule every committed training record was made under; changing it changes their numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_geometric import seed_everything

__all__ = ["seed_run", "start"]


def seed_run(seed: int) -> None:
    """Seed every generator a run draws from: Python's ``random``, NumPy, torch (CPU and CUDA)."""
    seed_everything(int(seed))


def start(settings: Any, *, task: Any = None, model: Any = None,
          device: torch.device | str | None = None) -> tuple[torch.nn.Module, Any]:
    """``(model, task)`` as every run of ``settings`` starts: seed, load the data (unless ``task`` is given),
    seed again, build.

    ``settings`` is the config as the schema's dataclasses (:func:`lipgnn.config.validate`); ``model`` replaces
    ``settings.model`` (a door that must run one implementation: ``model.impl=pyg``); ``device`` is where the
    model is built.
    """
    from lipgnn.data import load
    from lipgnn.models import build_model

    seed = int(settings.seed)
    seed_run(seed)
    if task is None:
        task = load(settings.dataset, seed)
    seed_run(seed)
    built = build_model(settings.model if model is None else model, settings.norm, task.spec, int(settings.depth),
                        device=device)
    return built, task
