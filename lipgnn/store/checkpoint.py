"""Training checkpoints: everything needed to continue a run bit for bit (model, optimiser, RNGs, history),
in a file that can be read without running code.

A checkpoint is one file, ``checkpoint.ckpt``, written atomically (temp file + ``os.replace``), so a job
killed while saving keeps its previous checkpoint and no reader ever sees a model of one epoch beside the
header of another::

    b"LIPGNNCK" | uint32 big-endian n | n bytes of UTF-8 JSON header | torch.save zip of the state

- The **header** holds what is read without the tensors: ``epoch``, ``git_commit``, ``wall_time_s``,
  ``best_train``, ``saved_at`` and the SHA-256 of the state bytes. ``sweep-status``, the commit check and the
  Ctrl-C message read only the header.
- The **state** is loaded with ``torch.load(weights_only=True)``: tensors, state dicts and plain Python types
  only. Results folders are shared (cluster file systems, rsync'd copies), so a pickle planted there must never
  run: torch's restricted unpickler refuses any other global. The RNG states are stored as tensors and plain
  types for that reason (numpy's state becomes a tensor of its keys).

A file that is not such a checkpoint (truncated, a planted pickle, written by older code, a SHA mismatch)
raises :class:`InvalidCheckpoint`; the run moves it aside and starts fresh (``lipgnn.runs.layer``).
Why by hand: torch's checkpoint formats either unpickle (``weights_only=False``) or cannot hold a header that
is readable without loading the tensors; safetensors holds tensors only (no optimiser state or RNG tuples).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lipgnn.errors import LipgnnError

MAGIC = b"LIPGNNCK"
FORMAT_VERSION = 1
_HEADER_MAX = 1 << 20  # a header is a few hundred bytes; a larger length field means a foreign file
HEADER_KEYS = ("epoch", "git_commit", "wall_time_s", "best_train", "saved_at")


class InvalidCheckpoint(LipgnnError):
    """The file at a checkpoint path is not a lipgnn checkpoint this code can resume (the message says why)."""


# ---------------------------------------------------------------------------------------------- RNG states
def rng_state(generator: torch.Generator | None) -> dict[str, Any]:
    """Every RNG a step draws from, as tensors and plain types (loadable with ``weights_only=True``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
        "generator": generator.get_state() if generator is not None else None,
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any], generator: torch.Generator | None) -> None:
    torch.set_rng_state(state["torch"])
    numpy = state["numpy"]
    np.random.set_state((numpy["name"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"],
                         numpy["cached"]))
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
    if generator is not None and state.get("generator") is not None:
        generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------------------------- the file
def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` (tensors and plain types; its ``HEADER_KEYS`` also go to the header) to ``path``."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    state = buffer.getvalue()
    header = {"format": "lipgnn-checkpoint", "version": FORMAT_VERSION,
              **{key: payload.get(key) for key in HEADER_KEYS},
              "state_sha256": hashlib.sha256(state).hexdigest(), "state_bytes": len(state)}
    head = json.dumps(header, sort_keys=True).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(MAGIC + struct.pack(">I", len(head)) + head)
            handle.write(state)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_header(handle: io.BufferedReader, path: Path) -> dict[str, Any]:
    lead = handle.read(len(MAGIC) + 4)
    if len(lead) < len(MAGIC) + 4 or lead[:len(MAGIC)] != MAGIC:
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint (no lipgnn header: truncated, written "
                                "by other code, or planted)")
    (size,) = struct.unpack(">I", lead[len(MAGIC):])
    raw = handle.read(size) if size <= _HEADER_MAX else b""
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != "lipgnn-checkpoint":
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint (its header is unreadable)")
    if header.get("version") != FORMAT_VERSION:
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint for this code (format version "
                                f"{header.get('version')!r}, this code reads {FORMAT_VERSION})")
    return header


def read_header(path: Path) -> dict[str, Any] | None:
    """The checkpoint's header (epoch, commit, wall time, best train point) without touching its state; None
    when there is no file. Raises :class:`InvalidCheckpoint` for a file that is not a lipgnn checkpoint."""
    try:
        with open(path, "rb") as handle:
            return _read_header(handle, path)
    except FileNotFoundError:
        return None


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint's state (None when there is no file), loaded with ``weights_only=True``. Raises
    :class:`InvalidCheckpoint` for a truncated, altered or foreign file; never runs code from it."""
    try:
        with open(path, "rb") as handle:
            header = _read_header(handle, path)
            state = handle.read()
    except FileNotFoundError:
        return None
    if len(state) != header.get("state_bytes") or hashlib.sha256(state).hexdigest() != header.get("state_sha256"):
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint (its state does not match its header: "
                                "truncated or altered)")
    try:
        payload = torch.load(io.BytesIO(state), map_location=device, weights_only=True)
    except Exception as exc:  # UnpicklingError (a forbidden global), RuntimeError (a damaged archive), EOFError
        first = " ".join(str(exc).split())[:160]
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint (its state does not load as tensors "
                                f"and plain types: {first})") from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise InvalidCheckpoint(f"{path} is not a valid lipgnn checkpoint (no model state in it)")
    return payload


def checkpoint_progress(path: Path) -> tuple[int, dict[str, Any]] | None:
    """``(epochs done, best train point)`` from the checkpoint's header; None when it is absent or being
    replaced. Raises :class:`InvalidCheckpoint` for a file that is not a lipgnn checkpoint."""
    header = read_header(path)
    if header is None or header.get("epoch") is None:
        return None
    return int(header["epoch"]), dict(header.get("best_train") or {})


def load_weights(path: Path) -> dict[str, Any]:
    """A model ``state_dict`` from ``path``: a lipgnn checkpoint's model state, or a plain ``torch.save``'d
    state dict, both loaded without running code (``weights_only=True``). Raises :class:`InvalidCheckpoint`."""
    with open(path, "rb") as handle:
        lipgnn_file = handle.read(len(MAGIC)) == MAGIC
    if lipgnn_file:
        payload = load_checkpoint(path, torch.device("cpu"))
        assert payload is not None
        return payload["model"]
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError (a forbidden global), RuntimeError (damaged zip), EOFError
        first = " ".join(str(exc).split())[:160]
        raise InvalidCheckpoint(f"{path} is neither a lipgnn checkpoint nor a state dict of tensors ({first})") \
            from None
    state = payload.get("model", payload) if isinstance(payload, dict) else payload
    if not isinstance(state, dict):
        raise InvalidCheckpoint(f"{path} holds a {type(state).__name__}, not a state dict of tensors")
    return state
