"""The record store: run records, their paths, and where checkpoints, locks and quarantined files live.

The layer below the trainer and the run layer; it imports only the config and the run identity. Here: writing
and reading run records and their paths; ``records``: the record's typed columns and cell key; ``checkpoint``:
the checkpoint file format; ``pending``: records that could not be written, kept for a rerun.

Run records: one JSON file per run under ``results_dir/runs/<experiment>/<run_id>.json``.

The record is the only thing tables and figures read (see docs/ARCHITECTURE.md for the schema). Writes are
atomic: the JSON goes to a uniquely named hidden temp file in the destination folder, is fsync'ed, then
``os.replace``'d onto the final name. A killed run therefore leaves either no record or a complete one,
and any number of processes can write into the same ``results_dir`` concurrently (the last writer of a
given ``run_id`` wins; nothing is ever half-written). Stray temp files are hidden (``.``-prefixed,
``.tmp`` suffix) and ignored by the readers.

Metric values (``best``/``last``/``history``) are stored as the trainer computes them: fractions in
[0, 1] (accuracy or ROC-AUC); the table and figure builders convert them to percent. Non-finite floats
(a diverged loss) are stored as ``null`` so the files stay strict JSON (RFC 8259) that any tool can read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

import pandas as pd

from lipgnn.errors import ConfigError
from lipgnn.store.records import (
    COLUMNS,
    RECORD_COLUMNS,
    config_key,
    flatten_record,
    jsonable,
    records_frame,
    variant_label,
)

log = logging.getLogger("lipgnn.store")

SCHEMA_VERSION = 1
STATUSES = ("completed", "diverged", "failed")

# The schema lives in records.py (typed loading); re-exported here, where records are read and written.
__all__ = ["COLUMNS", "RECORD_COLUMNS", "SCHEMA_VERSION", "STATUSES", "config_key", "load_records", "read_record",
           "checkpoint_file", "lock_file", "quarantine_dir", "record_paths", "record_text", "run_record_path",
           "variant_label", "write_failure_record", "write_record"]


def run_record_path(results_dir: str | os.PathLike, experiment: str, run_id: str) -> Path:
    """``results_dir/runs/<experiment>/<run_id>.json``."""
    for what, value in (("experiment", experiment), ("run_id", run_id)):
        text = str(value)
        if not text or "/" in text or "\\" in text or text.startswith("."):
            raise ConfigError(
                f"{what} {text!r} is not a valid file name: use a non-empty name without '/' or a leading '.'")
    return Path(results_dir) / "runs" / str(experiment) / f"{run_id}.json"


def checkpoint_file(results_dir: str | os.PathLike, experiment: str, run_id: str) -> Path:
    """``results_dir/checkpoints/<experiment>/<run_id>/checkpoint.ckpt``: where an unfinished run keeps its state
    (:mod:`lipgnn.store.checkpoint`)."""
    return Path(results_dir) / "checkpoints" / str(experiment) / run_id / "checkpoint.ckpt"


def lock_file(results_dir: str | os.PathLike, experiment: str, run_id: str) -> Path:
    """``results_dir/locks/<experiment>/<run_id>.lock``: held by the one process training the run."""
    return Path(results_dir) / "locks" / str(experiment) / f"{run_id}.lock"


def quarantine_dir(results_dir: str | os.PathLike, experiment: str) -> Path:
    """``results_dir/quarantine/<experiment>/``: where invalid checkpoints are moved aside, never deleted."""
    return Path(results_dir) / "quarantine" / str(experiment)


def write_record(results_dir: str | os.PathLike, record: dict) -> Path:
    """Write ``record`` atomically to its ``run_record_path`` and return that path.

    ``record`` needs ``run_id``, ``experiment`` and a ``status`` in ``STATUSES``; ``schema`` is filled in.
    """
    for key in ("run_id", "experiment", "status"):
        if key not in record:
            raise ValueError(f"run record lacks {key!r}; see docs/ARCHITECTURE.md for the schema")
    if record["status"] not in STATUSES:
        raise ValueError(f"run record status {record['status']!r} is not one of {STATUSES}")
    path = run_record_path(results_dir, record["experiment"], record["run_id"])
    _atomic_write_text(path, record_text(record))
    return path


def record_text(record: dict) -> str:
    """The file contents :func:`write_record` writes for ``record`` (``schema`` filled in): strict, sorted JSON,
    so the same record always gives the same bytes (the W&B logger uploads exactly these)."""
    record = {"schema": SCHEMA_VERSION, **record}
    return json.dumps(jsonable(record), indent=1, sort_keys=True, allow_nan=False) + "\n"


def write_failure_record(results_dir: str | os.PathLike, record: dict, error: str | BaseException) -> Path:
    """``write_record`` with ``status="failed"`` and ``error`` set (one line; exceptions as ``Type: msg``).

    A failure never replaces a finished (completed or diverged) record of the same run: a run that failed
    after another process finished it leaves that record as it is."""
    path = run_record_path(results_dir, record["experiment"], record["run_id"])
    if path.exists() and (read_record(path) or {}).get("status") in ("completed", "diverged"):
        log.warning("%s: not recording its failure (%s): a finished record exists at %s", record["run_id"],
                    error, path)
        return path
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    failed = {"history": {}, "best": {}, "last": {}, **record}
    failed["status"] = "failed"
    failed["error"] = " ".join(str(error).split())
    return write_record(results_dir, failed)


def read_record(path: str | os.PathLike) -> dict | None:
    """The record at ``path``, or None (with a warning naming the file) if it is not a lipgnn record."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("skipping unreadable run record %s: %s", path, " ".join(str(exc).split()))
        return None
    if not isinstance(data, dict):
        log.warning("skipping foreign file %s: JSON is a %s, not a run record", path, type(data).__name__)
        return None
    missing = [key for key in ("schema", "run_id") if key not in data]
    if missing:
        log.warning("skipping foreign file %s: no %s key", path, " / ".join(missing))
        return None
    if data["schema"] != SCHEMA_VERSION:
        log.warning("skipping %s: record schema %r, this lipgnn reads %d", path, data["schema"], SCHEMA_VERSION)
        return None
    return data


def record_paths(results_dir: str | os.PathLike, experiment: str | None = None) -> list[Path]:
    """Sorted record files under ``results_dir/runs`` (one experiment or all), without temp files."""
    runs = Path(results_dir) / "runs"
    pattern = f"{experiment}/*.json" if experiment is not None else "*/*.json"
    return sorted(p for p in runs.glob(pattern) if p.is_file() and not _is_temp(p.name))


def load_records(results_dir: str | os.PathLike, experiment: str | None = None, *,
                 history: bool = True) -> pd.DataFrame:
    """One row per run record (columns ``COLUMNS``, typed by ``records.records_frame``); corrupt or foreign
    files are skipped with a warning.

    ``history=False`` leaves the ``history`` column as empty dicts: the per-epoch curves dominate the
    memory of a large sweep and only the curve figures need them.
    """
    rows = []
    for path in record_paths(results_dir, experiment):
        record = read_record(path)
        if record is None:
            continue
        try:
            row = flatten_record(record, path)
            if not history:
                row["history"] = {}
            rows.append(row)
        except (TypeError, AttributeError, ValueError) as exc:
            log.warning("skipping malformed run record %s: %s", path, exc)
    frame = records_frame(rows)
    if experiment is not None and not frame.empty:
        frame = frame[frame["experiment"] == experiment].reset_index(drop=True)
    return frame


# ---------------------------------------------------------------------------------------------- helpers


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp gives a name no other process can get (O_EXCL), so concurrent writers never share a temp file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; records are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable across a power loss; not possible on every OS/filesystem.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_temp(name: str) -> bool:
    return name.startswith(".") or name.endswith(".tmp")
