"""``run(cfg)``: the one path from a composed config to a run record.

validate → skip if the record exists → seed → load data → build model → fit → write record (atomically).
A bad config or missing dataset raises :class:`~lipgnn.errors.LipgnnError` before anything is written; any
other exception leaves a failure record (``<run_id>.failed.json``) so a sweep shows what to rerun.
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch_geometric import seed_everything

from lipgnn.config import resolve_threads, validate
from lipgnn.errors import ConfigError, LipgnnError, RunInterrupted
from lipgnn.identity import identity_config
from lipgnn.identity import run_id as run_id_for
from lipgnn.provenance import loaded_commit, versions
from lipgnn.train.checkpoint import load_checkpoint

log = logging.getLogger("lipgnn")

RECORD_SCHEMA = 1
FINISHED = ("completed", "diverged")
# run_id_for and identity_config are re-exported: lipgnn.identity defines both run ids and cell keys.
__all__ = ["identity_config", "run", "run_id_for"]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def checkpoint_path(cfg: DictConfig, run_id: str) -> Path:
    from lipgnn.results.store import checkpoint_file

    return checkpoint_file(str(cfg.results_dir), str(cfg.experiment_name), run_id)


def _check_writable(cfg: DictConfig) -> None:
    from lipgnn.data.common import is_writable_dir

    folder = Path(str(cfg.results_dir)) / "runs" / str(cfg.experiment_name)
    if not is_writable_dir(folder):
        raise ConfigError(f"results_dir={cfg.results_dir} is not writable (the record would go to {folder}); "
                          "choose a writable folder with results_dir=<path>")


def _prepare_checkpoint(cfg: DictConfig, run_id: str, ckpt_path: Path) -> float:
    """Start fresh (overwrite=true or resume=false: the checkpoint is deleted) or check that the checkpoint
    may be resumed; returns the wall time its earlier segments took."""
    if not ckpt_path.exists():
        return 0.0
    if cfg.overwrite or not cfg.resume:
        why = "overwrite=true" if cfg.overwrite else "resume=false"
        print(f"{run_id}: {why}: deleting its checkpoint and starting from epoch 0", flush=True)
        shutil.rmtree(ckpt_path.parent, ignore_errors=True)
        return 0.0
    meta = load_checkpoint(ckpt_path, torch.device("cpu")) or {}
    written_by, here = meta.get("git_commit", "unknown"), loaded_commit()
    if written_by != here and not cfg.allow_code_change:
        raise ConfigError(
            f"{run_id} has a checkpoint (epoch {meta.get('epoch')}) written by commit {written_by}, but this code "
            f"is {here}: rerun with allow_code_change=true to resume it anyway, or resume=false to start fresh")
    note = "" if written_by == here else f"; this code is {here} (allow_code_change=true)"
    print(f"{run_id}: resuming from epoch {meta.get('epoch')} (checkpoint written by commit {written_by}{note})",
          flush=True)
    return float(meta.get("wall_time_s") or 0.0)


def run(cfg: DictConfig, *, progress: bool | None = None, parallel_jobs: int = 1) -> dict[str, Any]:
    """Train one configuration and write its record; return the record (or the existing one if skipped).

    ``parallel_jobs`` (the local launcher's n_jobs) sizes ``train.num_threads=auto``.
    """
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
    _check_writable(cfg)
    earlier = _prepare_checkpoint(cfg, run_id, ckpt_path)

    threads = resolve_threads(cfg.train.num_threads, parallel_jobs)
    base = {
        "schema": RECORD_SCHEMA, "run_id": run_id, "experiment": str(cfg.experiment_name),
        "config": OmegaConf.to_container(cfg, resolve=True), "seed": int(cfg.seed),
        "versions": versions(), "git_commit": loaded_commit(), "num_threads": threads,
    }
    base["config"].pop("hydra", None)
    started = time.time() - earlier
    try:
        record = _train(cfg, run_id, ckpt_path, progress, base, started, threads)
    except LipgnnError:
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(_interrupted_message(cfg, run_id, ckpt_path)) from None
    except Exception as exc:
        failure = {**base, "traceback": traceback.format_exc(limit=20),
                   "wall_time_s": round(time.time() - started, 3)}
        write_failure_record(cfg.results_dir, failure, exc)
        raise
    write_record(cfg.results_dir, record)
    shutil.rmtree(ckpt_path.parent, ignore_errors=True)
    _print_summary(record, record_path)
    return record


def _interrupted_message(cfg: DictConfig, run_id: str, ckpt_path: Path) -> str:
    if ckpt_path.exists():
        epoch = (load_checkpoint(ckpt_path, torch.device("cpu")) or {}).get("epoch")
        return (f"interrupted: {run_id} is checkpointed at epoch {epoch}; run the same command again to resume "
                "from there (resume=false starts fresh)")
    return (f"interrupted: {run_id} was not checkpointed (train.checkpoint_every=0), so nothing is kept; "
            "rerun to start again, with train.checkpoint_every=<N> to make it resumable")


def _train(cfg: DictConfig, run_id: str, ckpt_path: Path, progress: bool | None,
           base: dict[str, Any], started: float, threads: int) -> dict[str, Any]:
    from lipgnn.data import load
    from lipgnn.models import build_model
    from lipgnn.models.builder import resolve_impl
    from lipgnn.train import gc_pause
    from lipgnn.train.allocator import is_tuned, tune_malloc
    from lipgnn.train.faults import maybe_raise
    from lipgnn.train.loggers import make_logger
    from lipgnn.train.trainer import Trainer

    maybe_raise(run_id)
    torch.set_num_threads(threads)
    # Before the data and the model: their allocations come from the heap the settings govern. Process-wide:
    # a job with malloc_tuning=false after one with true still runs (and is recorded) tuned.
    malloc_tuned = tune_malloc() if cfg.train.malloc_tuning else is_tuned()
    seed_everything(int(cfg.seed))
    device = resolve_device(str(cfg.device))
    # The heavy imports are done: what is alive now lives as long as the process
    # (lipgnn.train.gc_pause). The data and the model stay out of the frozen set, so that a sweep's later
    # jobs can collect this job's cycles.
    gc_pause.resume()
    task = load(cfg.dataset, int(cfg.seed))
    # Re-seed: loading may or may not draw random numbers (a cache hit draws none), and the model's
    # initialisation must not depend on which path the data took.
    seed_everything(int(cfg.seed))
    model_cfg = cfg.model
    if cfg.train.get("cuda_graphs", False) and str(cfg.model.impl) == "auto":
        # A captured step needs the fused layers (PyG's ask the host for sizes), whatever auto would pick.
        model_cfg = OmegaConf.merge(cfg.model, {"impl": "fused"})
    model = build_model(model_cfg, cfg.norm, task.spec, int(cfg.depth), device=device).to(device)
    # The record names the implementation that ran (model.impl=auto resolves by device; not part of the
    # run's identity, since both are tested equal).
    base["config"]["model"]["impl"] = resolve_impl(str(model_cfg.impl), str(cfg.model.name), device,
                                                   task.spec.step_edges)
    model.checkpoint_activations = bool(cfg.train.checkpoint_activations)
    logger = make_logger(cfg, run_id)
    trainer = Trainer(
        cfg.train, device=device, seed=int(cfg.seed), logger=logger,
        grad_norms=bool(cfg.log.grad_norms),
        progress=bool(cfg.log.progress) if progress is None else progress,
        checkpoint_path=ckpt_path if cfg.train.checkpoint_every else None, desc=run_id,
        # Checkpoints name the code that wrote them and carry the wall time of the segments so far.
        checkpoint_extra=lambda: {"git_commit": loaded_commit(), "wall_time_s": time.time() - started},
    )
    from lipgnn.diagnostics.probe import fit_traced

    result, diagnostics = fit_traced(trainer, model, task, energy=bool(cfg.log.get("energy", False)),
                                     diagnose=bool(cfg.log.get("diagnose", False)))
    record = {
        **base, **diagnostics, "status": result.status, "metric": task.metric, "history": result.history,
        "best": result.best, "last": result.last, "epochs_run": result.epochs_run,
        "wall_time_s": round(time.time() - started, 3), "device": str(device),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "info": dict(task.info), "error": result.error, "resumed_from": result.resumed_from,
        # Whether the encoder multiplied the input features in CSR form (model.impl=auto|fused, CPU,
        # sparse enough): equal to the dense product within float rounding, recorded for the timing.
        "sparse_input": any(getattr(m, "used_csr", False) for m in model.modules()),
        # glibc malloc kept freed memory between steps (train.malloc_tuning): recorded for the timing.
        "malloc_tuned": malloc_tuned,
    }
    if result.best_train is not None:  # the TREES protocol's headline: best train accuracy (train.train_metric)
        record["best_train"] = result.best_train
    logger.finish({"best_val": result.best["val"], "best_test": result.best["test"],
                   "last_test": result.last["test"], "epochs_run": result.epochs_run}, result.status, record)
    return record


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _print_summary(record: dict[str, Any], path: Path) -> None:
    best, last = record["best"], record["last"]
    where = f"{record['epochs_run']} epochs in {record['wall_time_s']:.1f}s on {record['device']} -> {path}"
    if record["status"] == "diverged":
        best_text = "no evaluated epoch before" if best["epoch"] is None else \
            f"best val {_fmt(best['val'])} @ epoch {best['epoch']} (test {_fmt(best['test'])}) before"
        print(f"[diverged] {record['run_id']}: {record.get('error')}; {best_text} | {where}", flush=True)
        return
    print(f"[{record['status']}] {record['run_id']}: best val {_fmt(best['val'])} @ epoch {best['epoch']} "
          f"(test {_fmt(best['test'])}) | last test {_fmt(last['test'])} | {where}", flush=True)
