"""Remote loggers: ``none`` (nothing leaves the machine) and ``wandb`` (W&B's own API, offline by default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

#: The file each W&B run carries its lipgnn record in (``lipgnn pull-wandb`` reads it back).
RECORD_FILE = "lipgnn_record.json"


class RunLogger(Protocol):
    def log_epoch(self, metrics: dict[str, Any], step: int) -> None: ...

    def finish(self, summary: dict[str, Any], status: str, record: dict[str, Any] | None = None) -> None: ...


class NullLogger:
    """``logger=none``: the JSON run record is the only output."""

    def log_epoch(self, metrics: dict[str, Any], step: int) -> None:
        pass

    def finish(self, summary: dict[str, Any], status: str, record: dict[str, Any] | None = None) -> None:
        pass


class WandbLogger:
    """``logger=wandb``: one W&B run per attempt of a lipgnn run: named by the run id, grouped by experiment
    (``logger.group``), with a fresh W&B id per attempt so a rerun (``overwrite=true``) never appends to the
    old attempt's history. Per epoch: loss, metrics, learning rate and (``log.grad_norms=true``) the
    per-layer attention-gradient norms; the record's best/last as summary, and the record itself as the run's
    file :data:`RECORD_FILE` (the bytes the results folder gets), so that ``lipgnn pull-wandb`` can rebuild a
    results folder from W&B when the jobs' own folders are out of reach.

    Offline unless ``logger.mode=online`` or ``WANDB_MODE`` says otherwise, because online mode without a
    network retries for minutes instead of failing.
    """

    def __init__(self, settings: Any, config: dict[str, Any], run_id: str) -> None:
        import wandb  # lazy: wandb's import is slow and only needed here

        log_cfg = settings.logger
        mode = os.environ.get("WANDB_MODE") or log_cfg.mode
        save_dir = os.path.join(str(log_cfg.dir))
        os.makedirs(save_dir, exist_ok=True)
        tags = [settings.model.name, settings.norm.name, settings.dataset.name, f"depth={settings.depth}",
                *log_cfg.tags]
        self._run = wandb.init(
            project=log_cfg.project,
            entity=log_cfg.entity,
            group=str(log_cfg.group),
            tags=tags,
            name=run_id,  # no id: W&B draws a fresh one per attempt
            job_type=settings.experiment_name,
            config={**config, "run_id": run_id},  # the record's config
            dir=save_dir,
            mode=mode,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log_epoch(self, metrics: dict[str, Any], step: int) -> None:
        self._run.log(metrics, step=step)

    def finish(self, summary: dict[str, Any], status: str, record: dict[str, Any] | None = None) -> None:
        self._run.summary.update({**summary, "status": status})
        if record is not None:
            from lipgnn.store import record_text

            path = Path(self._run.dir) / RECORD_FILE
            path.write_text(record_text(record), encoding="utf-8")
            self._run.save(str(path), base_path=self._run.dir, policy="now")
        self._run.finish(exit_code=0)


def make_logger(settings: Any, config: dict[str, Any], run_id: str) -> RunLogger:
    """The run's logger, from its typed ``settings`` (:class:`~lipgnn.config_schema.RootConfig`); ``config``: the
    record's config, what W&B stores as the run's."""
    if settings.logger.name == "wandb":
        return WandbLogger(settings, config, run_id)
    return NullLogger()
