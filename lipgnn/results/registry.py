"""The artifact registry: every ``ARTIFACT`` found under ``lipgnn/results/artifacts/<paper>/``.

Order: by paper (``PAPERS``), then tables before the other artifacts, then by name, so outputs and the report
inventory are listed in a stable order that does not depend on the file system.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from lipgnn.results import artifacts as _package
from lipgnn.results.artifact import Artifact

PAPERS: tuple[str, ...] = ("lipschitznorm", "guan_he", "kim")


def _order(artifact: Artifact) -> tuple:
    paper = PAPERS.index(artifact.paper) if artifact.paper in PAPERS else len(PAPERS)
    return (paper, artifact.paper, artifact.table is None, artifact.name)


@cache
def artifacts() -> tuple[Artifact, ...]:
    """Every registered artifact; raises ValueError on a module without ``ARTIFACT`` or a duplicate name."""
    found: dict[str, Artifact] = {}
    for info in pkgutil.walk_packages(_package.__path__, prefix=f"{_package.__name__}."):
        if info.ispkg:
            continue
        module = importlib.import_module(info.name)
        artifact = getattr(module, "ARTIFACT", None)
        if not isinstance(artifact, Artifact):
            raise ValueError(f"{info.name} defines no ARTIFACT: an artifact module must build one with "
                             "lipgnn.results.artifact.Artifact")
        if artifact.name in found:
            raise ValueError(f"artifact name {artifact.name!r} is defined twice ({info.name}): rename one")
        found[artifact.name] = artifact
    return tuple(sorted(found.values(), key=_order))


def get(name: str) -> Artifact:
    """The artifact called ``name``; ValueError naming the known ones if there is none."""
    for artifact in artifacts():
        if artifact.name == name:
            return artifact
    raise ValueError(f"no artifact {name!r}; known: {', '.join(a.name for a in artifacts())}")


def names(kind: str | None = None) -> tuple[str, ...]:
    """Names of the artifacts with a ``kind`` output ('table', 'figure', 'report', 'claims'), or all."""
    return tuple(a.name for a in artifacts() if kind is None or getattr(a, kind) is not None)
