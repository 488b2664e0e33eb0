"""The artifact registry: every ``ARTIFACT`` found under ``lipgnn/results/artifacts/<paper>/``.

Order: by paper (``PAPERS``), then tables before the other artifacts, then by name, so outputs and the report
inventory are listed in a stable order that does not depend on the file system.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from lipgnn.results import artifacts as _package
from lipgnn.results.artifact import Artifact

PAPERS: tuple[str, ...] = ("lipschitznorm", "guan_he", "kim")


def _order(artifact: Artifact) -> tuple:
    paper = PAPERS.index(artifact.paper) if artifact.paper in PAPERS else len(PAPERS)
    return (paper, artifact.paper, artifact.table is None, artifact.name)


def module_names() -> list[str]:
    """``lipgnn.results.artifacts.<paper>.<name>`` for every ``<paper>/<name>.py`` (files starting with ``_``
    are helpers, not artifacts). Read from the folders, so a paper package needs no ``__init__.py``."""
    root = Path(_package.__file__).parent
    return [f"{_package.__name__}.{paper.name}.{path.stem}"
            for paper in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
            for path in sorted(paper.glob("*.py")) if not path.name.startswith("_")]


@cache
def artifacts() -> tuple[Artifact, ...]:
    """Every registered artifact; raises ValueError on a module without ``ARTIFACT`` or a duplicate name."""
    found: dict[str, Artifact] = {}
    for name in module_names():
        module = importlib.import_module(name)
        artifact = getattr(module, "ARTIFACT", None)
        if not isinstance(artifact, Artifact):
            raise ValueError(f"{name} defines no ARTIFACT: an artifact module must build one with "
                             "lipgnn.results.artifact.Artifact (helper modules start with '_')")
        if artifact.name in found:
            raise ValueError(f"artifact name {artifact.name!r} is defined twice ({name}): rename one")
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
