"""Every experiment's grid builds the same models as the reference (tests/data/model_fingerprints.json):
the same parameters with the same initial values per seed, and the same module settings (dropout rates,
LipschitzNorm's formula and alpha, conv implementations). A default moved between the schema, the YAML
files and the builder must leave every grid's models as they were."""

from __future__ import annotations

import json

from model_fingerprints import REFERENCE, fingerprints


def test_grids_build_the_reference_models() -> None:
    reference = json.loads(REFERENCE.read_text())
    current = fingerprints()
    assert sorted(current) == sorted(reference)
    changed = [key for key in reference if current[key]["seeds"] != reference[key]["seeds"]]
    assert not changed, f"{len(changed)} grid models changed, e.g. {changed[:3]}"
