"""Typed loading of run records: one row per record, one dtype pass.

``flatten_record`` reads the values a table needs out of a record (most live in its ``config``);
``records_frame`` turns those rows into a DataFrame whose numeric columns are float64 (missing = NaN), so no
builder needs to coerce a column again. ``load_records`` (in ``store``) is the public entry point.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from lipgnn.config import CONF_DIR
from lipgnn.config_schema import FAMILIES
from lipgnn.identity import config_key as identity_config_key
from lipgnn.identity import get_dotted

# The flat columns of ``load_records``, in the order given by docs/ARCHITECTURE.md ...
RECORD_COLUMNS: tuple[str, ...] = (
    "run_id", "experiment", "status", "model", "norm", "dataset", "depth", "seed", "residual",
    "missing_rate", "tree_depth", "lr", "hidden", "heads", "dropout", "budget", "metric",
    "best_epoch", "best_train", "best_val", "best_test", "last_train", "last_val", "last_test",
    "epochs_run", "wall_time_s", "path", "history",
)
# ... followed by these extras, which the artifacts need: the model-selection rule, the configured epoch
# budget, the paper's variant name, a hash of the configuration without its seed (runs sharing it are the
# seeds of one grid point), the failure message, the full config, the best train accuracy over epochs, the
# free-form payload of diagnostic records, the commit that wrote the record, the TREES protocol's best train
# accuracy tracked during training with its pass (the record's ``best_train``; NaN when the run has none), and the
# CPU the record names in its numeric environment (``cpu_label``; None for records older than it).
EXTRA_COLUMNS: tuple[str, ...] = ("selection", "epochs", "variant", "config_key", "error", "config", "max_train",
                                  "diagnostics", "git_commit", "tracked_train", "tracked_train_epoch", "cpu")
COLUMNS: tuple[str, ...] = RECORD_COLUMNS + EXTRA_COLUMNS

# One dtype per numeric column: integers too are float64, so a missing value is NaN (never None/pd.NA)
# and every comparison or mean works without a per-use coercion.
NUMERIC_COLUMNS: tuple[str, ...] = (
    "depth", "seed", "missing_rate", "tree_depth", "lr", "hidden", "heads", "dropout", "best_epoch",
    "best_train", "best_val", "best_test", "last_train", "last_val", "last_test", "epochs_run", "wall_time_s",
    "epochs", "max_train", "tracked_train", "tracked_train_epoch",
)

# Config entries that do not change what is computed (paths, devices, logging, bookkeeping): they are
# dropped before hashing so that e.g. two machines with different data roots share a grid point.
IGNORED_CONFIG_KEYS: tuple[str, ...] = (
    "seed", "device", "results_dir", "overwrite", "experiment_name", "log.progress", "logger", "hydra",
    "dataset.root", "dataset.cache_dir", "dataset.download", "model.impl", "train.checkpoint_every",
    "train.checkpoint_activations", "train.num_threads", "numerics",
)

# Each family's label, and the families whose `residual` key is unused (GCNII always has its initial residual):
# declared once in lipgnn.config_schema.FAMILIES.
_MODEL_NAMES = {name: family.label for name, family in FAMILIES.items()}
_NORM_SUFFIX = {"none": "", "": "", "pairnorm": "-Pn", "layernorm": "-Ln", "lip": "-Lip"}
_NO_RESIDUAL_SUFFIX = {name for name, family in FAMILIES.items() if not family.residual}


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


@cache
def _norm_defaults(name: str) -> dict[str, Any]:
    """The keys of ``conf/norm/<name>.yaml`` (the paper's setting of that normalisation)."""
    path = Path(CONF_DIR) / "norm" / f"{name}.yaml"
    if not path.exists():
        return {}
    return {k: v for k, v in OmegaConf.to_container(OmegaConf.load(path)).items() if k != "name"}


def label_extras(cfg: Mapping[str, Any]) -> str:
    """`` [norm.alpha=2]``: the normalisation keys of a run that differ from the paper's row (its
    ``conf/norm`` defaults), so a custom variant never takes the paper's row label."""
    norm = cfg.get("norm") if isinstance(cfg, Mapping) else None
    if not isinstance(norm, Mapping):
        return ""
    defaults = _norm_defaults(str(norm.get("name", "none")))
    differ = [f"norm.{k}={norm[k]}" for k in sorted(defaults) if k in norm and norm[k] != defaults[k]]
    return f" [{', '.join(differ)}]" if differ else ""


def config_key(cfg: Mapping[str, Any]) -> str:
    """The grid point of a run: :func:`lipgnn.identity.config_key`, the run identity without the seed.

    The one place that defines which runs are seeds of one grid point; ``store.config_key`` is this function.
    """
    return identity_config_key(cfg)


def flatten_record(record: Mapping[str, Any], path: str | Path | None = None) -> dict:
    """The ``load_records`` row of one record (values taken from ``record["config"]`` where they live)."""
    cfg = record.get("config") or {}
    best = record.get("best") or {}
    last = record.get("last") or {}
    model = get_dotted(cfg, "model.name")
    norm = get_dotted(cfg, "norm.name", "none")
    residual = _truthy(get_dotted(cfg, "model.residual", False))
    history = record.get("history") or {}
    tracked = record.get("best_train") or {}
    return {
        "run_id": str(record["run_id"]),
        "experiment": record.get("experiment", Path(path).parent.name if path is not None else None),
        "status": record.get("status"),
        "model": model,
        "norm": norm,
        "dataset": get_dotted(cfg, "dataset.name"),
        "depth": get_dotted(cfg, "depth"),
        "seed": get_dotted(cfg, "seed", record.get("seed")),
        "residual": residual,
        "missing_rate": get_dotted(cfg, "dataset.missing_rate", 0),
        "tree_depth": get_dotted(cfg, "dataset.tree_depth"),
        "lr": get_dotted(cfg, "train.lr"),
        "hidden": get_dotted(cfg, "model.hidden"),
        "heads": get_dotted(cfg, "model.heads"),
        "dropout": get_dotted(cfg, "model.dropout"),
        "budget": get_dotted(cfg, "budget.name"),
        "metric": record.get("metric"),
        "best_epoch": best.get("epoch"),
        "best_train": best.get("train"),
        "best_val": best.get("val"),
        "best_test": best.get("test"),
        "last_train": last.get("train"),
        "last_val": last.get("val"),
        "last_test": last.get("test"),
        "epochs_run": record.get("epochs_run"),
        "wall_time_s": record.get("wall_time_s"),
        "path": str(path) if path is not None else None,
        "history": history,
        # Best train accuracy over all epochs: the TREES protocol (Alon & Yahav report best train accuracy).
        "max_train": _max_finite(history.get("train")),
        # train.selection is validated to best_val | last when the run is configured.
        "selection": "last" if str(get_dotted(cfg, "train.selection", "best_val")).lower() == "last" else "best_val",
        "epochs": get_dotted(cfg, "train.epochs"),
        "variant": variant_label(model, norm, residual) + label_extras(cfg) if model is not None else None,
        "config_key": config_key(cfg),
        "error": record.get("error"),
        "config": cfg,
        "diagnostics": record.get("diagnostics") or {},
        "git_commit": record.get("git_commit"),
        # The TREES protocol's metric (train.train_metric): best train accuracy measured during training, as
        # Alon & Yahav report it; only runs with a TREES-protocol key record it.
        "tracked_train": tracked.get("train"),
        "tracked_train_epoch": tracked.get("epoch"),
        "cpu": cpu_label(record),
    }


def cpu_label(record: Mapping[str, Any]) -> str | None:
    """The record's CPU as a reader compares machines: its model name and the widest vector instruction set among
    its flags ("Intel(R) Xeon(R) Processor, AVX-512"); None when the record carries no numeric environment."""
    numerics = record.get("numerics")
    cpu = numerics.get("cpu") if isinstance(numerics, Mapping) else None
    if not isinstance(cpu, Mapping) or not cpu.get("model"):
        return None
    flags = set(cpu.get("simd_flags") or ())
    width = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"{cpu['model']}, {width}" if width else str(cpu["model"])


def records_frame(rows: list[dict]) -> pd.DataFrame:
    """The typed frame of flattened rows: columns ``COLUMNS``; ``NUMERIC_COLUMNS`` as float64 (NaN = missing)."""
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in NUMERIC_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    frame["residual"] = frame["residual"].astype(bool)
    return frame


# ---------------------------------------------------------------------------------------------- helpers


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy/torch scalars via .item(), arrays via .tolist(), non-finite floats -> None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy arrays/scalars and torch tensors
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    raise TypeError(f"run record value {value!r} of type {type(value).__name__} is not JSON-serialisable")


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value) if value is not None and not (isinstance(value, float) and math.isnan(value)) else False


def _max_finite(values: Any) -> float:
    finite = [float(v) for v in (values or []) if v is not None and math.isfinite(float(v))]
    return max(finite) if finite else math.nan
