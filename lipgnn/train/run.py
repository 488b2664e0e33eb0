"""``run(cfg)``: the one path from a composed config to a run record.

validate → skip if the record exists → seed → load data → build model → fit → write record (atomically).
A bad config or missing dataset raises :class:`~lipgnn.errors.LipgnnError` before anything is written; any
other exception leaves a failure record (``<run_id>.failed.json``) so a sweep shows what to rerun.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf
from torch_geometric import seed_everything

from lipgnn.config import resolve_threads, validate
from lipgnn.errors import ConfigError, LipgnnError, RecordNotWritten, RunInProgress, RunInterrupted
from lipgnn.identity import identity_config
from lipgnn.identity import run_id as run_id_for
from lipgnn.provenance import loaded_commit, versions
from lipgnn.train import pending
from lipgnn.train.checkpoint import InvalidCheckpoint, load_checkpoint, read_header

log = logging.getLogger("lipgnn")

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


def _quarantine(cfg: DictConfig, run_id: str, ckpt_path: Path, why: str) -> dict[str, str]:
    """Move an invalid checkpoint aside (never delete it) and say so in one line; returns the record's note."""
    from lipgnn.results.store import quarantine_dir

    folder = quarantine_dir(str(cfg.results_dir), str(cfg.experiment_name))
    target = folder / f"{run_id}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.ckpt"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(ckpt_path, target)
    except OSError as exc:
        raise ConfigError(f"{why}; it could not be moved aside ({exc.strerror or exc}): remove {ckpt_path} "
                          "and rerun") from None
    print(f"{run_id}: {why}; moved it to {target} and starting from epoch 0", flush=True)
    return {"path": str(target), "reason": why}


def _prepare_checkpoint(cfg: DictConfig, run_id: str,
                        ckpt_path: Path) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """Start fresh (overwrite=true or resume=false: the checkpoint is deleted), move an invalid checkpoint aside,
    or check that the checkpoint may be resumed. Returns the checkpoint's state to resume from (None: start
    fresh) and, when a checkpoint was moved aside, where to and why (recorded in the run's record)."""
    if not ckpt_path.exists():
        return None, None
    if cfg.overwrite or not cfg.resume:
        why = "overwrite=true" if cfg.overwrite else "resume=false"
        print(f"{run_id}: {why}: deleting its checkpoint and starting from epoch 0", flush=True)
        shutil.rmtree(ckpt_path.parent, ignore_errors=True)
        return None, None
    try:
        # The whole state, loaded once here and handed to the trainer: a truncated or planted file is caught
        # before anything runs, and never unpickled beyond torch's tensors-and-plain-types loader.
        state = load_checkpoint(ckpt_path, torch.device("cpu"))
    except InvalidCheckpoint as exc:
        return None, _quarantine(cfg, run_id, ckpt_path, str(exc))
    if state is None:  # removed since the check above
        return None, None
    written_by, here = state.get("git_commit", "unknown"), loaded_commit()
    if written_by != here and not cfg.allow_code_change:
        raise ConfigError(
            f"{run_id} has a checkpoint (epoch {state.get('epoch')}) written by commit {written_by}, but this code "
            f"is {here}: rerun with allow_code_change=true to resume it anyway, or resume=false to start fresh")
    note = "" if written_by == here else f"; this code is {here} (allow_code_change=true)"
    print(f"{run_id}: resuming from epoch {state.get('epoch')} (checkpoint written by commit {written_by}{note})",
          flush=True)
    return state, None


def run(cfg: DictConfig, *, progress: bool | None = None, parallel_jobs: int = 1) -> dict[str, Any]:
    """Train one configuration and write its record; return the record (or the existing one if skipped).

    ``parallel_jobs`` (the local launcher's n_jobs) sizes ``train.num_threads=auto``. One process at a time
    trains a run id (a lock beside the records); a second launch of the same run says so and stops.
    """
    from lipgnn.results.store import lock_file, run_record_path

    validate(cfg)
    run_id = run_id_for(cfg)
    record_path = run_record_path(cfg.results_dir, str(cfg.experiment_name), run_id)
    existing = _finished(record_path)
    if existing is not None and not cfg.overwrite:
        return existing
    _check_writable(cfg)
    lock = FileLock(lock_file(str(cfg.results_dir), str(cfg.experiment_name), run_id), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunInProgress(f"{run_id} is being trained by another process (lock {lock.lock_file}); it will "
                            "write the record itself: wait for it, then rerun to skip or resume") from None
    try:
        # Another process may have finished the run while this one composed its config.
        existing = _finished(record_path)
        if existing is not None and not cfg.overwrite:
            return existing
        kept = pending.take(cfg, run_id)
        if kept is not None and not cfg.overwrite:
            return _write(cfg, kept, checkpoint_path(cfg, run_id), kept_from=kept.pop("_kept_at"))
        return _run_locked(cfg, run_id, progress, parallel_jobs)
    finally:
        lock.release()


def _finished(record_path: Path) -> dict[str, Any] | None:
    """The existing record if the run finished (completed or diverged: never redone); a failed one is retried."""
    from lipgnn.results.store import read_record

    existing = read_record(record_path) if record_path.exists() else None
    if existing is not None and existing.get("status") in FINISHED:
        log.info("skipped %s: record exists at %s (overwrite=true reruns it)", existing["run_id"], record_path)
        return {**existing, "skipped": True}
    return None


def _run_locked(cfg: DictConfig, run_id: str, progress: bool | None, parallel_jobs: int) -> dict[str, Any]:
    from lipgnn.results.store import SCHEMA_VERSION, write_failure_record

    ckpt_path = checkpoint_path(cfg, run_id)
    resume_state, discarded = _prepare_checkpoint(cfg, run_id, ckpt_path)
    earlier = float((resume_state or {}).get("wall_time_s") or 0.0)  # the wall time of its earlier segments
    threads = resolve_threads(cfg.train.num_threads, parallel_jobs)
    base = {
        "schema": SCHEMA_VERSION, "run_id": run_id, "experiment": str(cfg.experiment_name),
        "config": OmegaConf.to_container(cfg, resolve=True), "seed": int(cfg.seed),
        "versions": versions(), "git_commit": loaded_commit(), "num_threads": threads,
    }
    if discarded is not None:
        base["checkpoint_discarded"] = discarded
    base["config"].pop("hydra", None)
    started = time.time() - earlier
    try:
        record = _train(cfg, run_id, ckpt_path, resume_state, progress, base, started, threads)
    except LipgnnError:
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(_interrupted_message(cfg, run_id, ckpt_path)) from None
    except Exception as exc:
        failure = {**base, "traceback": traceback.format_exc(limit=20),
                   "wall_time_s": round(time.time() - started, 3)}
        try:
            write_failure_record(cfg.results_dir, failure, exc)
        except OSError as write_error:
            log.error("%s: its failure record could not be written either (%s)", run_id, write_error)
        raise
    return _write(cfg, record, ckpt_path)


def _write(cfg: DictConfig, record: dict[str, Any], ckpt_path: Path, kept_from: str | None = None) -> dict[str, Any]:
    """Write the finished run's record, then drop its checkpoint. If the record cannot be written (a full disk,
    a vanished folder), the trained result is kept where a rerun finds it (:mod:`lipgnn.train.pending`) and the
    run ends with one line naming both places."""
    from lipgnn.results.store import write_record

    try:
        path = write_record(cfg.results_dir, record)
    except OSError as exc:
        raise RecordNotWritten(pending.keep(cfg, record, exc)) from None
    if kept_from is not None:
        pending.drop(kept_from)
        print(f"{record['run_id']}: wrote the record kept at {kept_from} (it could not be written when the run "
              "finished); nothing was retrained", flush=True)
    shutil.rmtree(ckpt_path.parent, ignore_errors=True)
    _print_summary(record, path)
    return record


def _interrupted_message(cfg: DictConfig, run_id: str, ckpt_path: Path) -> str:
    if ckpt_path.exists():
        try:
            epoch = (read_header(ckpt_path) or {}).get("epoch")
        except InvalidCheckpoint as exc:
            return f"interrupted: {run_id}: {exc}; rerunning moves it aside and starts fresh"
        return (f"interrupted: {run_id} is checkpointed at epoch {epoch}; run the same command again to resume "
                "from there (resume=false starts fresh)")
    return (f"interrupted: {run_id} was not checkpointed (train.checkpoint_every=0), so nothing is kept; "
            "rerun to start again, with train.checkpoint_every=<N> to make it resumable")


def _train(cfg: DictConfig, run_id: str, ckpt_path: Path, resume_state: dict[str, Any] | None,
           progress: bool | None,
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
        checkpoint_path=ckpt_path if cfg.train.checkpoint_every else None, resume_state=resume_state, desc=run_id,
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
