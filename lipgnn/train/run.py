"""``run(cfg)``: the one path from a composed config to a run record.

validate → skip if the record exists → seed → load data → build model → fit → write record (atomically).
A bad config or missing dataset raises :class:`~lipgnn.errors.LipgnnError` before anything is written; any
other exception leaves a failure record (``<run_id>.failed.json``) so a sweep shows what to rerun.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch_geometric import seed_everything

from lipgnn.config import validate
from lipgnn.errors import LipgnnError
from lipgnn.provenance import loaded_commit, versions

log = logging.getLogger("lipgnn")

# Keys that say where/how a run executes, not what it computes: they never change its id.
NON_IDENTITY_KEYS = (
    "results_dir", "overwrite", "device", "experiment_name", "log.progress", "logger",
    "dataset.root", "dataset.cache_dir", "dataset.download",
    "train.checkpoint_every", "train.checkpoint_activations", "train.num_threads",
)
# Model keys added after records existed: at these values they leave a run's id unchanged, so the
# records of configs that predate them keep their ids.
NEUTRAL_MODEL_DEFAULTS: dict[str, Any] = {"layer_norm": "none", "activation": "default"}
# Train keys of the TREES protocol: at these values the loop is exactly the one before them.
NEUTRAL_TRAIN_DEFAULTS: dict[str, Any] = {"plateau_threshold_mode": "rel", "train_metric": "eval",
                                          "stop_at_train": 0.0, "train_patience": 0}
# dataset.sampling=trees is the TREES example set that predates the key (num_trees trees, one target each).
NEUTRAL_DATASET_DEFAULTS: dict[str, Any] = {"sampling": "trees"}
RECORD_SCHEMA = 1
FINISHED = ("completed", "diverged")


def identity_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config minus :data:`NON_IDENTITY_KEYS` (and Hydra's own node)."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    container.pop("hydra", None)
    for dotted in NON_IDENTITY_KEYS:
        node: Any = container
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    # Keys a model ignores must not split its runs: a paper-budget grid over heads is then run once for GCN.
    from lipgnn.config import ATTENTION_MODELS

    model = container.get("model", {})
    if model.get("name") not in ATTENTION_MODELS:
        for key in ("heads", "head_aggregation", "attn_dropout", "impl"):
            model.pop(key, None)
    for key, neutral in NEUTRAL_MODEL_DEFAULTS.items():
        if key in model and model[key] == neutral:
            model.pop(key)
    for node, neutrals in ((container.get("train", {}), NEUTRAL_TRAIN_DEFAULTS),
                           (container.get("dataset", {}), NEUTRAL_DATASET_DEFAULTS)):
        for key, neutral in neutrals.items():
            if key in node and node[key] == neutral:
                node.pop(key)
    return container


def run_id_for(cfg: DictConfig) -> str:
    """Stable id from the resolved config and seed: readable prefix + a hash of everything that matters."""
    digest = hashlib.sha1(json.dumps(identity_config(cfg), sort_keys=True).encode()).hexdigest()[:10]
    parts = [cfg.model.name, cfg.norm.name]
    if cfg.model.get("residual"):
        parts.append("res")
    parts.append(str(cfg.dataset.name))
    if cfg.dataset.get("missing_rate"):
        parts.append(f"m{cfg.dataset.missing_rate:g}")
    if cfg.dataset.get("kind") == "trees":
        parts.append(f"t{cfg.dataset.tree_depth}")
    parts += [f"L{cfg.depth}", f"s{cfg.seed}", digest]
    return "-".join(parts)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def checkpoint_path(cfg: DictConfig, run_id: str) -> Path:
    return Path(cfg.results_dir) / "checkpoints" / str(cfg.experiment_name) / run_id / "checkpoint.pt"


def run(cfg: DictConfig, *, progress: bool | None = None) -> dict[str, Any]:
    """Train one configuration and write its record; return the record (or the existing one if skipped)."""
    from lipgnn.results.store import read_record, run_record_path, write_failure_record, write_record

    validate(cfg)
    run_id = run_id_for(cfg)
    record_path = run_record_path(cfg.results_dir, str(cfg.experiment_name), run_id)
    ckpt_path = checkpoint_path(cfg, run_id)
    # A finished run (completed or diverged) is never redone; a failed one is retried.
    existing = read_record(record_path) if record_path.exists() else None
    if existing is not None and existing.get("status") in FINISHED and not cfg.overwrite:
        log.info("skipped %s: record exists at %s (overwrite=true reruns it)", run_id, record_path)
        return {**existing, "skipped": True}

    base = {
        "schema": RECORD_SCHEMA, "run_id": run_id, "experiment": str(cfg.experiment_name),
        "config": OmegaConf.to_container(cfg, resolve=True), "seed": int(cfg.seed),
        "versions": versions(), "git_commit": loaded_commit(),
    }
    base["config"].pop("hydra", None)
    started = time.time()
    try:
        record = _train(cfg, run_id, ckpt_path, progress, base, started)
    except LipgnnError:
        raise
    except Exception as exc:
        failure = {**base, "traceback": traceback.format_exc(limit=20),
                   "wall_time_s": round(time.time() - started, 3)}
        write_failure_record(cfg.results_dir, failure, exc)
        raise
    write_record(cfg.results_dir, record)
    shutil.rmtree(ckpt_path.parent, ignore_errors=True)
    _print_summary(record, record_path)
    return record


def _train(cfg: DictConfig, run_id: str, ckpt_path: Path, progress: bool | None,
           base: dict[str, Any], started: float) -> dict[str, Any]:
    from lipgnn.data import load
    from lipgnn.models import build_model
    from lipgnn.train.faults import maybe_raise
    from lipgnn.train.loggers import make_logger
    from lipgnn.train.trainer import Trainer

    maybe_raise(run_id)
    if cfg.train.get("num_threads"):
        torch.set_num_threads(int(cfg.train.num_threads))
    seed_everything(int(cfg.seed))
    device = resolve_device(str(cfg.device))
    task = load(cfg.dataset, int(cfg.seed))
    # Re-seed: loading may or may not draw random numbers (a cache hit draws none), and the model's
    # initialisation must not depend on which path the data took.
    seed_everything(int(cfg.seed))
    model = build_model(cfg.model, cfg.norm, task.spec, int(cfg.depth)).to(device)
    model.checkpoint_activations = bool(cfg.train.checkpoint_activations)
    logger = make_logger(cfg, run_id)
    trainer = Trainer(
        cfg.train, device=device, seed=int(cfg.seed), logger=logger,
        grad_norms=bool(cfg.log.grad_norms),
        progress=bool(cfg.log.progress) if progress is None else progress,
        checkpoint_path=ckpt_path if cfg.train.checkpoint_every else None, desc=run_id,
    )
    result = trainer.fit(model, task)
    record = {
        **base, "status": result.status, "metric": task.metric, "history": result.history,
        "best": result.best, "last": result.last, "epochs_run": result.epochs_run,
        "wall_time_s": round(time.time() - started, 3), "device": str(device),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "info": dict(task.info), "error": result.error, "resumed_from": result.resumed_from,
    }
    if result.best_train is not None:  # the TREES protocol's headline: best train accuracy (train.train_metric)
        record["best_train"] = result.best_train
    logger.finish({"best_val": result.best["val"], "best_test": result.best["test"],
                   "last_test": result.last["test"], "epochs_run": result.epochs_run}, result.status)
    return record


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _print_summary(record: dict[str, Any], path: Path) -> None:
    best, last = record["best"], record["last"]
    print(f"[{record['status']}] {record['run_id']}: best val {_fmt(best['val'])} @ epoch {best['epoch']} "
          f"(test {_fmt(best['test'])}) | last test {_fmt(last['test'])} | {record['epochs_run']} epochs "
          f"in {record['wall_time_s']:.1f}s on {record['device']} -> {path}", flush=True)
