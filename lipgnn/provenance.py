"""Where a result came from: the code's git commit and the versions of the libraries that ran it.

Run records (:mod:`lipgnn.runs`) and benchmark outputs (:mod:`lipgnn.bench`) both store these.
The commit they store is :func:`loaded_commit`, taken once per process when a run (or benchmark) starts,
right after its code was imported, and reused when the record is written: a sweep's worker process keeps
the code it imported, so the working tree's ``HEAD`` at the time a record is written (perhaps hours and
several commits later) can name code that did not run. Nothing runs ``git`` at import time.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES: tuple[str, ...] = ("lipgnn", "torch", "torch_geometric", "ogb", "hydra-core", "numpy", "numba")


def versions() -> dict[str, str]:
    """Python's and each of :data:`PACKAGES`' installed version (``"absent"`` if not installed)."""
    out = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def git_commit() -> str:
    """``HEAD``'s sha of the checkout this package runs from, ``-dirty`` if tracked files have
    uncommitted changes, ``"unknown"`` outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


_LOADED_COMMIT: str | None = None


def loaded_commit() -> str:
    """:func:`git_commit` at this function's first call in the process (``run`` calls it before training)."""
    global _LOADED_COMMIT
    if _LOADED_COMMIT is None:
        _LOADED_COMMIT = git_commit()
    return _LOADED_COMMIT
