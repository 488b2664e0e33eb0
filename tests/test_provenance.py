"""Records and benchmark outputs name the code that ran, not the working tree at write time."""

from __future__ import annotations

import re

import pytest

from lipgnn import provenance


def test_loaded_commit_is_the_commit_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    at_import = provenance.loaded_commit()
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", at_import)
    # The tree moves on (a commit, an edit) while a sweep's worker runs: the worker's records keep
    # naming what it imported.
    monkeypatch.setattr(provenance, "git_commit", lambda: "f" * 40)
    assert provenance.git_commit() == "f" * 40
    assert provenance.loaded_commit() == at_import


def test_versions_name_the_numerical_libraries() -> None:
    v = provenance.versions()
    assert {"python", "torch", "torch_geometric", "numpy", "numba"} <= v.keys()
    assert v["torch"] != "absent" and v["numba"] != "absent"
