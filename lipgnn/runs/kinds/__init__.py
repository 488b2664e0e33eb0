"""The suite's job kinds; importing this package registers them (:func:`lipgnn.runs.registry.register_job_kind`)."""

from lipgnn.runs.kinds import energy, gh_collapse, gh_depth, kim, training

__all__ = ["energy", "gh_collapse", "gh_depth", "kim", "training"]
