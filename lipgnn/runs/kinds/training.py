"""The ``training`` job kind (every experiment that declares no other): train one model, record its curves.

The data and the model as every run starts them (:func:`lipgnn.seeding.start`) → fit
(:class:`lipgnn.train.trainer.Trainer`, with the checkpoint the run layer validated) → the record: status,
history, best and last epochs, wall time and what ran (device, implementation, threads). ``log.energy`` /
``log.diagnose`` add the traced diagnostics (:func:`lipgnn.diagnostics.probe.fit_traced`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from lipgnn.errors import ConfigError
from lipgnn.provenance import loaded_commit
from lipgnn.runs.registry import Job, JobKind, register_job_kind

#: called after fitting with (model, task, fit result); returns diagnostics to merge into the record's
AfterFit = Callable[[torch.nn.Module, Any, Any], dict[str, Any]]
#: called before fitting with (model, task, the run's logger); returns the logger the trainer calls each evaluated
#: epoch (one that forwards to the run's and measures the model in between)
Monitor = Callable[[torch.nn.Module, Any, Any], Any]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@register_job_kind("training")
class Training(JobKind):
    checkpoints = True

    def validate(self, cfg: DictConfig) -> None:
        epochs = int(cfg.train.epochs)
        if epochs < 1:
            raise ConfigError(f"train.epochs={epochs} trains nothing; a {self.name} job needs train.epochs >= 1 "
                              "(energies of untrained models: experiment=gh_energy)")

    def compute(self, job: Job) -> dict[str, Any]:
        return train(job)

    def summary(self, record: Mapping[str, Any], path: Path) -> str:
        best, last = record["best"], record["last"]
        where = f"{record['epochs_run']} epochs in {record['wall_time_s']:.1f}s on {record['device']} -> {path}"
        if record["status"] == "diverged":
            best_text = "no evaluated epoch before" if best["epoch"] is None else \
                f"best val {_fmt(best['val'])} @ epoch {best['epoch']} (test {_fmt(best['test'])}) before"
            return f"[diverged] {record['run_id']}: {record.get('error')}; {best_text} | {where}"
        return (f"[{record['status']}] {record['run_id']}: best val {_fmt(best['val'])} @ epoch {best['epoch']} "
                f"(test {_fmt(best['test'])}) | last test {_fmt(last['test'])} | {where}")


def train(job: Job, after_fit: AfterFit | None = None, monitor: Monitor | None = None) -> dict[str, Any]:
    """Train ``job.settings`` and return the record's fields; ``after_fit`` adds diagnostics of the fitted model,
    ``monitor`` wraps the run's logger to measure the model during training."""
    from lipgnn.diagnostics.probe import fit_traced
    from lipgnn.models.builder import resolve_impl
    from lipgnn.seeding import start
    from lipgnn.train import gc_pause
    from lipgnn.train.allocator import is_tuned, tune_malloc
    from lipgnn.train.faults import maybe_raise
    from lipgnn.train.loggers import make_logger
    from lipgnn.train.trainer import Trainer

    settings, run_id = job.settings, job.run_id
    maybe_raise(run_id)
    # Before the data and the model: their allocations come from the heap the settings govern. Process-wide:
    # a job with malloc_tuning=false after one with true still runs (and is recorded) tuned.
    malloc_tuned = tune_malloc() if settings.train.malloc_tuning else is_tuned()
    device = resolve_device(settings.device)
    # The heavy imports are done: what is alive now lives as long as the process
    # (lipgnn.train.gc_pause). The data and the model stay out of the frozen set, so that a sweep's later
    # jobs can collect this job's cycles.
    gc_pause.resume()
    model_cfg = settings.model
    if settings.train.cuda_graphs and model_cfg.impl == "auto":
        # A captured step needs the fused layers (PyG's ask the host for sizes), whatever auto would pick.
        model_cfg = dataclasses.replace(model_cfg, impl="fused")
    model, task = start(settings, model=model_cfg, device=device)
    model = model.to(device)
    # The record names the implementation that ran (model.impl=auto resolves by device; not part of the
    # run's identity, since both are tested equal).
    job.base["config"]["model"]["impl"] = resolve_impl(model_cfg.impl, model_cfg.name, device, task.spec.step_edges)
    model.checkpoint_activations = settings.train.checkpoint_activations
    logger = make_logger(settings, job.base["config"], run_id)
    if monitor is not None:
        logger = monitor(model, task, logger)
    started = job.started
    log = settings.log
    trainer = Trainer(
        settings.train, device=device, seed=settings.seed, logger=logger,
        grad_norms=log.grad_norms, grad_norms_epochs=log.grad_norms_epochs,
        progress=log.progress if job.progress is None else job.progress,
        checkpoint_path=job.checkpoint if settings.train.checkpoint_every else None, resume_state=job.resume_state,
        desc=run_id,
        # Checkpoints name the code that wrote them and carry the wall time of the segments so far.
        checkpoint_extra=lambda: {"git_commit": loaded_commit(), "wall_time_s": time.time() - started},
    )
    fit_started = time.time()
    result, diagnostics = fit_traced(trainer, model, task, energy=log.energy, diagnose=log.diagnose,
                                     diagnose_every=log.diagnose_every)
    if after_fit is not None:
        diagnostics = {**diagnostics, "diagnostics": {**diagnostics.get("diagnostics", {}),
                                                      **after_fit(model, task, result)}}
        diagnostics["diagnostics"]["train_time_s"] = round(time.time() - fit_started, 1)
    record = {
        **job.base, **diagnostics, "status": result.status, "metric": task.metric, "history": result.history,
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
