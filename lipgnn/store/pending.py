"""Finished results whose record could not be written (a full disk, a vanished folder), kept for a rerun.

When :func:`lipgnn.store.write_record` fails at the end of a run, the record's exact bytes are kept in the
first place that accepts them: beside the run's checkpoint (same file system, usually the one that is full),
then the temp folder, then the user's cache. Rerunning the same command finds the kept record, writes it to its
place in ``results_dir`` and deletes the kept copy: nothing is trained again. If no place accepts it, the record
is printed to stderr as the last copy. The kept files are JSON run records: they are read with
:func:`lipgnn.store.read_record`, never unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

__all__ = ["drop", "keep", "places", "take"]


def places(cfg: DictConfig, run_id: str) -> list[Path]:
    """Where a run's record is kept when it cannot be written, in the order tried."""
    from lipgnn.store import checkpoint_file

    results_dir, experiment = str(cfg.results_dir), str(cfg.experiment_name)
    # Outside results_dir the folder is keyed by it, so two results folders never share a kept record.
    key = hashlib.sha256(os.path.abspath(results_dir).encode()).hexdigest()[:12]
    tail = Path(key) / experiment / f"{run_id}.json"
    return [checkpoint_file(results_dir, experiment, run_id).parent / "record.json",
            Path(tempfile.gettempdir()) / "lipgnn-pending" / tail,
            Path.home() / ".cache" / "lipgnn" / "pending" / tail]


def keep(cfg: DictConfig, record: dict[str, Any], error: OSError) -> str:
    """Keep ``record`` in the first place that takes it; return the one line to print."""
    from lipgnn.store import _atomic_write_text, record_text, run_record_path

    target = run_record_path(cfg.results_dir, str(cfg.experiment_name), record["run_id"])
    problem = f"the record of {record['run_id']} could not be written to {target} ({error.strerror or error})"
    text = record_text(record)
    for place in places(cfg, record["run_id"]):
        try:
            _atomic_write_text(place, text)
        except OSError:
            continue
        return (f"{problem}; the trained result is kept at {place}: free the space (or restore the folder) and "
                "rerun the same command to write it without training again")
    sys.stderr.write(text)
    return (f"{problem}, nor kept anywhere else (every fallback failed); the record is printed above: save it "
            f"as {target}")


def take(cfg: DictConfig, run_id: str) -> dict[str, Any] | None:
    """A record kept by an earlier run of ``run_id`` (``_kept_at`` added), or None."""
    from lipgnn.store import read_record

    for place in places(cfg, run_id):
        if place.is_file():
            record = read_record(place)
            if record is not None and record.get("run_id") == run_id:
                return {**record, "_kept_at": str(place)}
    return None


def drop(place: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(place)
