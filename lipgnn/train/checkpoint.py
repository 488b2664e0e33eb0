"""Training checkpoints: everything needed to continue a run bit-for-bit (model, optimiser, RNGs, history).

Written atomically (temp file + ``os.replace``) so a job killed while saving keeps its previous checkpoint.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state(generator: torch.Generator | None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "generator": generator.get_state() if generator is not None else None,
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any], generator: torch.Generator | None) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if generator is not None and state.get("generator") is not None:
        generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    if not path.exists():
        return None
    # Our own file holding RNG states and numpy arrays: weights_only would reject them.
    return torch.load(path, map_location=device, weights_only=False)


def checkpoint_progress(path: Path) -> tuple[int, dict[str, Any]] | None:
    """``(epochs done, best train point)`` of the checkpoint at ``path``; None when it is absent or unreadable
    (a file being replaced, or written by an incompatible torch)."""
    try:
        payload = load_checkpoint(path, torch.device("cpu"))
        return None if payload is None else (int(payload["epoch"]), dict(payload.get("best_train") or {}))
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, EOFError, pickle.UnpicklingError):
        return None
