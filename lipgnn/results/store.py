"""Run records: one JSON file per run under ``results_dir/runs/<experiment>/<run_id>.json``.

The record is the only thing tables and figures read (see docs/CONTRACTS.md for the schema). Writes are
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
import hashlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lipgnn.errors import ConfigError

log = logging.getLogger("lipgnn.results")

SCHEMA_VERSION = 1
STATUSES = ("completed", "diverged", "failed")

# The flat columns of ``load_records``, in the order given by docs/CONTRACTS.md ...
RECORD_COLUMNS: tuple[str, ...] = (
    "run_id", "experiment", "status", "model", "norm", "dataset", "depth", "seed", "residual",
    "missing_rate", "tree_depth", "lr", "hidden", "heads", "dropout", "budget", "metric",
    "best_epoch", "best_train", "best_val", "best_test", "last_train", "last_val", "last_test",
    "epochs_run", "wall_time_s", "path", "history",
)
# ... followed by these extras, which the table/figure builders need: the model-selection rule, the
# configured epoch budget, the paper's variant name, a hash of the configuration without its seed (runs
# sharing it are the seeds of one grid point), the failure message and the full config.
EXTRA_COLUMNS: tuple[str, ...] = ("selection", "epochs", "variant", "config_key", "error", "config", "max_train")
COLUMNS: tuple[str, ...] = RECORD_COLUMNS + EXTRA_COLUMNS

# Config entries that do not change what is computed (paths, devices, logging, bookkeeping): they are
# dropped before hashing so that e.g. two machines with different data roots share a grid point.
IGNORED_CONFIG_KEYS: tuple[str, ...] = (
    "seed", "device", "results_dir", "overwrite", "experiment_name", "log.progress", "logger", "hydra",
    "dataset.root", "dataset.cache_dir", "dataset.download", "model.impl", "train.checkpoint_every",
    "train.checkpoint_activations", "train.num_threads",
)

_MODEL_NAMES = {"gat": "GAT", "gt": "GT", "gcn": "GCN", "gin": "GIN", "ggnn": "GGNN", "gcnii": "GCNII"}
_NORM_SUFFIX = {"none": "", "": "", "pairnorm": "-Pn", "layernorm": "-Ln", "lip": "-Lip"}
# GCNII always has its initial residual; its `residual` key is unused (conf/model/gcnii.yaml).
_NO_RESIDUAL_SUFFIX = {"gcnii"}


def variant_label(model: str, norm: str | None, residual: bool = False) -> str:
    """The paper's name of a model variant: ``GAT``, ``GAT-Pn``, ``GAT-Ln``, ``GAT-Lip``, ``GAT-res``,
    ``GAT-Lip-res``, ``GT-Lip``, ``GCN``, ``GCN-Pn``, ``GGNN``, ``GCNII`` ..."""
    key = str(model).lower()
    name = _MODEL_NAMES.get(key, str(model).upper())
    norm_key = "none" if norm is None else str(norm).lower()
    name += _NORM_SUFFIX.get(norm_key, f"-{norm}")
    if _truthy(residual) and key not in _NO_RESIDUAL_SUFFIX:
        name += "-res"
    return name


def run_record_path(results_dir: str | os.PathLike, experiment: str, run_id: str) -> Path:
    """``results_dir/runs/<experiment>/<run_id>.json``."""
    for what, value in (("experiment", experiment), ("run_id", run_id)):
        text = str(value)
        if not text or "/" in text or "\\" in text or text.startswith("."):
            raise ConfigError(
                f"{what} {text!r} is not a valid file name: use a non-empty name without '/' or a leading '.'")
    return Path(results_dir) / "runs" / str(experiment) / f"{run_id}.json"


def write_record(results_dir: str | os.PathLike, record: dict) -> Path:
    """Write ``record`` atomically to its ``run_record_path`` and return that path.

    ``record`` needs ``run_id``, ``experiment`` and a ``status`` in ``STATUSES``; ``schema`` is filled in.
    """
    for key in ("run_id", "experiment", "status"):
        if key not in record:
            raise ValueError(f"run record lacks {key!r}; see docs/CONTRACTS.md for the schema")
    if record["status"] not in STATUSES:
        raise ValueError(f"run record status {record['status']!r} is not one of {STATUSES}")
    record = {"schema": SCHEMA_VERSION, **record}
    path = run_record_path(results_dir, record["experiment"], record["run_id"])
    text = json.dumps(_jsonable(record), indent=1, sort_keys=True, allow_nan=False) + "\n"
    _atomic_write_text(path, text)
    return path


def write_failure_record(results_dir: str | os.PathLike, record: dict, error: str | BaseException) -> Path:
    """``write_record`` with ``status="failed"`` and ``error`` set (one line; exceptions as ``Type: msg``)."""
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
    """One row per run record (columns ``COLUMNS``); corrupt or foreign files are skipped with a warning.

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
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if experiment is not None and not frame.empty:
        frame = frame[frame["experiment"] == experiment].reset_index(drop=True)
    return frame


def flatten_record(record: Mapping[str, Any], path: str | os.PathLike | None = None) -> dict:
    """The ``load_records`` row of one record (values taken from ``record["config"]`` where they live)."""
    cfg = record.get("config") or {}
    best = record.get("best") or {}
    last = record.get("last") or {}
    model = _get(cfg, "model.name")
    norm = _get(cfg, "norm.name", "none")
    residual = _truthy(_get(cfg, "model.residual", False))
    seed = _get(cfg, "seed", record.get("seed"))
    return {
        "run_id": str(record["run_id"]),
        "experiment": record.get("experiment", Path(path).parent.name if path is not None else None),
        "status": record.get("status"),
        "model": model,
        "norm": norm,
        "dataset": _get(cfg, "dataset.name"),
        "depth": _get(cfg, "depth"),
        "seed": seed,
        "residual": residual,
        "missing_rate": _num(_get(cfg, "dataset.missing_rate", 0)),
        "tree_depth": _num(_get(cfg, "dataset.tree_depth")),
        "lr": _num(_get(cfg, "train.lr")),
        "hidden": _get(cfg, "model.hidden"),
        "heads": _get(cfg, "model.heads"),
        "dropout": _num(_get(cfg, "model.dropout")),
        "budget": _get(cfg, "budget.name"),
        "metric": record.get("metric"),
        "best_epoch": best.get("epoch"),
        "best_train": _num(best.get("train")),
        "best_val": _num(best.get("val")),
        "best_test": _num(best.get("test")),
        "last_train": _num(last.get("train")),
        "last_val": _num(last.get("val")),
        "last_test": _num(last.get("test")),
        "epochs_run": record.get("epochs_run"),
        "wall_time_s": _num(record.get("wall_time_s")),
        "path": str(path) if path is not None else None,
        "history": record.get("history") or {},
        # Best train accuracy over all epochs: the TREES protocol (Alon & Yahav report best train accuracy).
        "max_train": _max_finite((record.get("history") or {}).get("train")),
        "selection": normalise_selection(_get(cfg, "train.selection", "best_val")),
        "epochs": _get(cfg, "train.epochs"),
        "variant": variant_label(model, norm, residual) if model is not None else None,
        "config_key": config_key(cfg),
        "error": record.get("error"),
        "config": cfg,
    }


def normalise_selection(selection: Any) -> str:
    """``best_val`` (test at the best-validation epoch) or ``last`` (last epoch's test)."""
    text = str(selection).lower()
    if text in ("last", "last_test", "last_epoch"):
        return "last"
    if text not in ("best_val", "best", "best_test"):
        log.warning("unknown train.selection %r: using best_val", selection)
    return "best_val"


def config_key(cfg: Mapping[str, Any]) -> str:
    """A short hash of the config without the seed and other non-semantic keys (see IGNORED_CONFIG_KEYS)."""
    pruned = _prune(cfg, IGNORED_CONFIG_KEYS)
    try:  # configs read back from JSON are already plain
        text = json.dumps(pruned, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(_jsonable(pruned), sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


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


def _jsonable(value: Any) -> Any:
    """Plain JSON types: numpy/torch scalars via .item(), arrays via .tolist(), non-finite floats -> None."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy arrays/scalars and torch tensors
        return _jsonable(value.tolist())
    if hasattr(value, "item"):
        return _jsonable(value.item())
    raise TypeError(f"run record value {value!r} of type {type(value).__name__} is not JSON-serialisable")


def _get(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None and default is not None else node


def _prune(cfg: Any, ignored: tuple[str, ...], prefix: str = "") -> Any:
    if not isinstance(cfg, Mapping):
        return cfg
    out = {}
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if dotted in ignored:
            continue
        out[key] = _prune(value, ignored, f"{dotted}.")
    return out


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value) if value is not None and not (isinstance(value, float) and math.isnan(value)) else False


def _max_finite(values: Any) -> float:
    finite = [float(v) for v in (values or []) if v is not None and math.isfinite(float(v))]
    return max(finite) if finite else math.nan
