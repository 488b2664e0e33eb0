"""Job kinds: what a job computes, registered by the name an experiment declares (``kind:`` in its YAML).

A kind is a :class:`JobKind` subclass decorated with :func:`register_job_kind`. The run layer
(:mod:`lipgnn.runs.layer`) does everything around it; a kind supplies only

* :meth:`JobKind.compute`: the record's fields beyond the common ones (status, numbers, diagnostics);
* where its records differ from a training run's: its id (:meth:`JobKind.run_id`: the kind owns its format, built
  on :func:`lipgnn.identity.identity_config` so that a key that does not change the numbers never changes an id),
  the config its record stores (:meth:`JobKind.record_config`), its own checks (:meth:`JobKind.validate`, and
  :meth:`JobKind.check_inputs` before the run's lock), whether it resumes through checkpoints
  (:attr:`JobKind.checkpoints`),
  and the line printed when it finishes (:meth:`JobKind.summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from lipgnn.config_schema import RootConfig

__all__ = ["KINDS", "Job", "JobKind", "declared_kind", "register_job_kind"]


@dataclass
class Job:
    """One job as the run layer hands it to its kind's :meth:`JobKind.compute`: typed settings only, never the
    composed config node (a kind's hooks that name the job, :meth:`JobKind.run_id` and
    :meth:`JobKind.record_config`, read that; what it computes reads these)."""

    #: the config as the schema's dataclasses (:func:`lipgnn.config.validate`), converted once by the run layer:
    #: what the data, model and trainer are built from, and every key a kind reads
    settings: RootConfig
    run_id: str
    base: dict[str, Any]  # the record's common fields (schema, run_id, experiment, config, seed, provenance)
    started: float  # time.time() at the start of the job (minus the wall time of resumed segments)
    threads: int  # torch's intra-op threads (train.num_threads resolved)
    progress: bool | None  # a progress bar: None = log.progress
    checkpoint: Path  # where a checkpointing kind keeps its checkpoint
    resume_state: dict[str, Any] | None  # the validated checkpoint to resume from (None: start fresh)


class JobKind:
    """A kind of job. Subclasses override :meth:`compute` and, where they differ from a training run, the rest."""

    name: ClassVar[str] = ""
    #: resumes through ``train.checkpoint_every`` checkpoints (else a job is a cheap unit, redone when interrupted)
    checkpoints: ClassVar[bool] = False

    def validate(self, cfg: DictConfig) -> None:
        """Checks beyond :func:`lipgnn.config.validate` (one-line :class:`~lipgnn.errors.ConfigError`)."""

    def check_inputs(self, cfg: DictConfig, settings: Any) -> None:
        """What can be checked of the job's inputs before anything is written (default: the dataset, without
        loading it: :func:`lipgnn.data.check`)."""
        from lipgnn.data import check

        check(settings.dataset)

    def run_id(self, cfg: DictConfig) -> str:
        """The job's record id (default: a training run's, :func:`lipgnn.identity.run_id`)."""
        from lipgnn.identity import run_id

        return run_id(cfg)

    def record_config(self, cfg: DictConfig) -> dict[str, Any]:
        """The ``config`` its record stores (default: the resolved config without Hydra's node)."""
        config = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(config, dict)
        config.pop("hydra", None)
        return config

    def compute(self, job: Job) -> dict[str, Any]:
        """The record's fields beyond ``job.base``: at least ``status`` and ``wall_time_s``."""
        raise NotImplementedError

    def summary(self, record: Mapping[str, Any], path: Path) -> str:
        """The one line printed when the record is written."""
        return f"[{record['status']}] {record['run_id']} ({record['wall_time_s']:.1f}s) -> {path}"


KINDS: dict[str, JobKind] = {}


def register_job_kind(name: str) -> Callable[[type[JobKind]], type[JobKind]]:
    """Class decorator: ``@register_job_kind("energy")`` makes experiments with ``kind: energy`` run it."""

    def register(cls: type[JobKind]) -> type[JobKind]:
        if name in KINDS and type(KINDS[name]) is not cls:
            raise ValueError(f"job kind {name!r} is registered twice ({type(KINDS[name]).__name__}, {cls.__name__})")
        cls.name = name
        KINDS[name] = cls()
        return cls

    return register


def declared_kind(experiment: str) -> str:
    """The kind ``conf/experiment/<experiment>.yaml`` declares (``training`` without a file or a ``kind`` key): for
    records written before configs carried their kind."""
    from lipgnn.config import CONF_DIR

    path = Path(CONF_DIR) / "experiment" / f"{experiment}.yaml"
    return str(OmegaConf.load(path).get("kind") or "training") if path.is_file() else "training"
