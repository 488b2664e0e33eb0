"""The suite's job kinds, registered by importing them (:func:`lipgnn.runs.registry.register_job_kind`), and the
lookup of a config's kind: what the run layer asks, so that it runs only registered kinds."""

from omegaconf import DictConfig

from lipgnn.errors import ConfigError
from lipgnn.runs.kinds import energy, gh_collapse, gh_depth, kim, training
from lipgnn.runs.registry import KINDS, JobKind

__all__ = ["energy", "gh_collapse", "gh_depth", "job_kind", "kim", "training"]


def job_kind(cfg: DictConfig | str) -> JobKind:
    """The registered kind of a composed config (its ``kind`` key) or of a name."""
    name = cfg if isinstance(cfg, str) else str(cfg.get("kind") or "training")
    if name not in KINDS:
        raise ConfigError(f"kind={name} is not a job kind; use one of: {', '.join(sorted(KINDS))}")
    return KINDS[name]
