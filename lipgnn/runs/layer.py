"""The run layer: one path from a composed config to a run record, for every job kind.

compose (:func:`lipgnn.config.compose`, Hydra) → validate (:func:`lipgnn.config.validate` and the kind's own
checks) → identity (the kind's run id) → skip a finished record → lock the run id → resume or start → compute
(the kind) → write the record (atomically; :func:`lipgnn.store.write_record`, called here and nowhere
else for run records).

* A bad config or a missing dataset raises :class:`~lipgnn.errors.LipgnnError` before anything is written.
* A finished record (completed or diverged) is never redone unless ``overwrite=true``; a failed one is retried.
* One process at a time runs a run id: a lock file per id under ``<results_dir>/locks/``, taken after every check
  (config, dataset, results folder) passed and removed when the run ends, however it ends (a PID marker:
  :class:`filelock.SoftFileLock`, whose holder a later launch on the same host reclaims if it died); a second launch
  stops with :class:`~lipgnn.errors.RunInProgress` in one line.
* A kind that checkpoints (:attr:`~lipgnn.runs.registry.JobKind.checkpoints`) resumes from a valid
  checkpoint of the same code (``allow_code_change=true`` for another commit's); an invalid one is moved
  aside into ``<results_dir>/quarantine/`` and named in the record (``checkpoint_discarded``).
* Any other exception leaves a failure record (``<run_id>.failed.json``) so a sweep shows what to rerun.
* A record that cannot be written (a full disk, a vanished folder) is kept where a rerun finds it
  (:mod:`lipgnn.store.pending`); the rerun writes it without computing again.
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
from filelock import SoftFileLock, Timeout
from omegaconf import DictConfig

from lipgnn import numerics
from lipgnn.config import resolve_threads, validate
from lipgnn.errors import ConfigError, LipgnnError, RecordNotWritten, RunInProgress, RunInterrupted
from lipgnn.provenance import loaded_commit, versions
from lipgnn.runs.kinds import job_kind
from lipgnn.runs.registry import Job, JobKind
from lipgnn.store import pending
from lipgnn.store.checkpoint import InvalidCheckpoint, load_checkpoint, read_header

log = logging.getLogger("lipgnn")

FINISHED = ("completed", "diverged")
__all__ = ["checkpoint_path", "import_record", "job_id", "run", "run_lock"]


def job_id(cfg: DictConfig) -> str:
    """The run id of a composed job, by its kind (what ``sweep-status`` and the layer itself look up)."""
    return job_kind(cfg).run_id(cfg)


def checkpoint_path(cfg: DictConfig, run_id: str) -> Path:
    from lipgnn.store import checkpoint_file

    return checkpoint_file(str(cfg.results_dir), str(cfg.experiment_name), run_id)


def _check_writable(cfg: DictConfig) -> None:
    from lipgnn.data.common import is_writable_dir

    folder = Path(str(cfg.results_dir)) / "runs" / str(cfg.experiment_name)
    if not is_writable_dir(folder):
        raise ConfigError(f"results_dir={cfg.results_dir} is not writable (the record would go to {folder}); "
                          "choose a writable folder with results_dir=<path>")


def _quarantine(cfg: DictConfig, run_id: str, ckpt_path: Path, why: str) -> dict[str, str]:
    """Move an invalid checkpoint aside (never delete it) and say so in one line; returns the record's note."""
    from lipgnn.store import quarantine_dir

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
        # The whole state, loaded once here and handed to the kind: a truncated or planted file is caught
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
    """Run one job of any kind and write its record; return the record (or the existing one if skipped).

    ``parallel_jobs`` (the local launcher's n_jobs) sizes ``train.num_threads=auto``. One process at a time
    runs a run id (a lock beside the records); a second launch of the same run says so and stops.
    """
    from lipgnn.store import run_record_path

    kind = job_kind(cfg)
    settings = validate(cfg)
    kind.validate(cfg)
    run_id = kind.run_id(cfg)
    record_path = run_record_path(cfg.results_dir, str(cfg.experiment_name), run_id)
    existing = _finished(record_path)
    if existing is not None and not cfg.overwrite:
        return existing
    _check_writable(cfg)
    numerics.check(str(cfg.get("numerics") or "native"))
    kind.check_inputs(cfg, settings)
    lock = _acquire(cfg.results_dir, str(cfg.experiment_name), run_id)
    try:
        # Another process may have finished the run while this one composed its config.
        existing = _finished(record_path)
        if existing is not None and not cfg.overwrite:
            return existing
        kept = pending.take(cfg, run_id)
        if kept is not None and not cfg.overwrite:
            return _write(kind, cfg, kept, checkpoint_path(cfg, run_id), kept_from=kept.pop("_kept_at"))
        return _run_locked(kind, cfg, settings, run_id, progress, parallel_jobs)
    finally:
        lock.release()


def run_lock(results_dir: str | os.PathLike, experiment: str, run_id: str) -> SoftFileLock:
    """The run id's lock (not yet held): a file under ``<results_dir>/locks/`` that exists only while a process
    holds it, naming that process, so that ``locks/`` holds the runs in progress and nothing else."""
    from lipgnn.store import lock_file

    return SoftFileLock(lock_file(str(results_dir), experiment, run_id), timeout=0)


def _acquire(results_dir: str | os.PathLike, experiment: str, run_id: str) -> SoftFileLock:
    """The run id's lock, held, or RunInProgress in one line."""
    lock = run_lock(results_dir, experiment, run_id)
    try:
        lock.acquire()
    except Timeout:
        raise RunInProgress(f"{run_id} is being run by another process (lock {lock.lock_file}); it will "
                            "write the record itself: wait for it, then rerun to skip or resume (if no process "
                            "runs it, remove the lock file)") from None
    return lock


def import_record(results_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write a record produced elsewhere (pulled back from W&B, re-keyed by ``scripts/migrate_run_ids.py``) at
    its run id's path, under the lock a running job of that id holds: the record tools write through the same
    lock and the same atomic writer as the run layer, never beside a job that is writing its own record."""
    from lipgnn.store import write_record

    lock = _acquire(results_dir, str(record["experiment"]), str(record["run_id"]))
    try:
        return write_record(results_dir, record)
    finally:
        lock.release()


def finished_record(record_path: Path) -> dict[str, Any] | None:
    """The record at ``record_path`` if its run finished (completed or diverged: never redone, unless
    ``overwrite=true``); None when it is absent or failed (a failed run is retried)."""
    from lipgnn.store import read_record

    existing = read_record(record_path) if record_path.is_file() else None
    return existing if existing is not None and existing.get("status") in FINISHED else None


def _finished(record_path: Path) -> dict[str, Any] | None:
    """The finished record, marked skipped and logged as such: the job ends without computing."""
    existing = finished_record(record_path)
    if existing is not None:
        log.info("skipped %s: record exists at %s (overwrite=true reruns it)", existing["run_id"], record_path)
        return {**existing, "skipped": True}
    return None


def _run_locked(kind: JobKind, cfg: DictConfig, settings: Any, run_id: str, progress: bool | None,
                parallel_jobs: int) -> dict[str, Any]:
    from lipgnn.store import SCHEMA_VERSION, write_failure_record

    ckpt_path = checkpoint_path(cfg, run_id)
    resume_state, discarded = _prepare_checkpoint(cfg, run_id, ckpt_path) if kind.checkpoints else (None, None)
    earlier = float((resume_state or {}).get("wall_time_s") or 0.0)  # the wall time of its earlier segments
    threads = resolve_threads(cfg.train.num_threads, parallel_jobs)
    torch.set_num_threads(threads)
    config = kind.record_config(cfg)
    if isinstance(config.get("train"), dict):  # the count used, not `auto`: what a rerun composes
        config["train"]["num_threads"] = threads
    base = {
        "schema": SCHEMA_VERSION, "run_id": run_id, "experiment": str(cfg.experiment_name), "config": config,
        "seed": int(cfg.seed), "versions": versions(), "git_commit": loaded_commit(), "num_threads": threads,
        "numerics": numerics.environment(threads),
    }
    if discarded is not None:
        base["checkpoint_discarded"] = discarded
    job = Job(settings=settings, run_id=run_id, base=base, started=time.time() - earlier, threads=threads,
              progress=progress, checkpoint=ckpt_path, resume_state=resume_state)
    try:
        record = {**job.base, **kind.compute(job)}
    except LipgnnError:
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(_interrupted_message(kind, cfg, run_id, ckpt_path)) from None
    except Exception as exc:
        failure = {**job.base, "traceback": traceback.format_exc(limit=20),
                   "wall_time_s": round(time.time() - job.started, 3)}
        try:
            write_failure_record(cfg.results_dir, failure, exc)
        except OSError as write_error:
            log.error("%s: its failure record could not be written either (%s)", run_id, write_error)
        raise
    return _write(kind, cfg, record, ckpt_path)


def _write(kind: JobKind, cfg: DictConfig, record: dict[str, Any], ckpt_path: Path,
           kept_from: str | None = None) -> dict[str, Any]:
    """Write the finished job's record, then drop its checkpoint. If the record cannot be written (a full disk,
    a vanished folder), the result is kept where a rerun finds it (:mod:`lipgnn.store.pending`) and the job
    ends with one line naming both places."""
    from lipgnn.store import write_record

    try:
        path = write_record(cfg.results_dir, record)
    except OSError as exc:
        raise RecordNotWritten(pending.keep(cfg, record, exc)) from None
    if kept_from is not None:
        pending.drop(kept_from)
        print(f"{record['run_id']}: wrote the record kept at {kept_from} (it could not be written when the run "
              "finished); nothing was computed again", flush=True)
    shutil.rmtree(ckpt_path.parent, ignore_errors=True)
    print(kind.summary(record, path), flush=True)
    return record


def _interrupted_message(kind: JobKind, cfg: DictConfig, run_id: str, ckpt_path: Path) -> str:
    if not kind.checkpoints:
        return f"interrupted: {run_id} keeps nothing (a {kind.name} job is redone whole); rerun to run it again"
    if ckpt_path.exists():
        try:
            epoch = (read_header(ckpt_path) or {}).get("epoch")
        except InvalidCheckpoint as exc:
            return f"interrupted: {run_id}: {exc}; rerunning moves it aside and starts fresh"
        return (f"interrupted: {run_id} is checkpointed at epoch {epoch}; run the same command again to resume "
                "from there (resume=false starts fresh)")
    return (f"interrupted: {run_id} was not checkpointed (train.checkpoint_every=0), so nothing is kept; "
            "rerun to start again, with train.checkpoint_every=<N> to make it resumable")
