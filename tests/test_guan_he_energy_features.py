"""gh_energy's feature-normalisation ablation: row/raw per cell from hand-built energy records, the report block
and the declared sweep."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lipgnn.results.artifacts.guan_he import gh_energy
from lipgnn.results.grid import declared_grid


def _record(arch: str, dataset: str, depth: int, seed: int, features: str, final: float, init: str = "xavier"):
    lap = [1.0] * depth + [final * 32]  # per entry = final (width 32); only the last layer is read here
    return {"status": "completed", "config": {
        "model": {"name": "san", "layer_norm": "pre" if arch == "pre" else "post", "nonlocal": arch == "nonlocal",
                  "init": init},
        "dataset": {"name": dataset}, "depth": depth, "seed": seed, "energy": {"features": features}},
        "diagnostics": {"energy": {"width": 32, "init": {"laplacian": lap}}}}


def _frame(row_scale: dict[tuple[str, int], float]) -> pd.DataFrame:
    recs = []
    for dataset, base in (("cora", 1.0), ("pubmed", 0.5)):
        for depth in (2, 32):
            for seed in range(2):
                raw = base * (seed + 1) / depth
                recs.append(_record("pre", dataset, depth, seed, "raw", raw))
                recs.append(_record("pre", dataset, depth, seed, "raw", 99.0, init="default"))  # other init: unused
                if (dataset, depth) in row_scale:
                    recs.append(_record("pre", dataset, depth, seed, "row", raw * row_scale[(dataset, depth)]))
    return pd.DataFrame(recs)


def test_feature_ratios_divide_each_row_cell_by_its_raw_cell() -> None:
    c = gh_energy.cells(_frame({("cora", 2): 1 / 35, ("pubmed", 2): 1 / 10, ("cora", 32): 2.0}))
    r = gh_energy.feature_ratios(c).set_index(["dataset", "depth"])
    assert len(r) == 3 and set(r["architecture"]) == {"pre"}
    assert r.loc[("cora", 2), "ratio"] == pytest.approx(1 / 35)
    assert r.loc[("pubmed", 2), "ratio"] == pytest.approx(1 / 10)
    assert r.loc[("cora", 32), "ratio"] == pytest.approx(2.0)
    # raw geomean over seeds 1, 2 of 1/2 -> sqrt(2)/2
    assert r.loc[("cora", 2), "raw"] == pytest.approx(math.sqrt(2) / 2)
    block = gh_energy.features_block(c)
    assert "| Pre-LN SAN | Cora | 0.0286 | 2 |" in block
    assert "| Pre-LN SAN | PubMed | 0.1 | not run |" in block
    # PubMed/Cora at 2 layers: raw 0.5, row 0.5 * 35/10 = 1.75; the paper's Table 2: 0.116 / 1.70
    assert f"| Pre-LN SAN | 0.5 | 1.75 | {0.116 / 1.70:.3g} |" in block
    assert "2 layers 0.0643 (range 0.0286–0.1, 2 cells)" in block


def test_without_row_records_the_block_says_how_to_run_it() -> None:
    c = gh_energy.cells(_frame({}))
    assert gh_energy.feature_ratios(c).empty
    assert gh_energy.features_block(c).startswith("not run (`python -m lipgnn.diagnostics.runner")
    assert "gh_energy-features" in gh_energy.report(_frame({}))


def test_the_declared_ablation_is_row_features_on_cora_and_pubmed() -> None:
    sweeps = {s.name: s for s in declared_grid("gh_energy", "cpu").sweeps}
    points = sweeps["gh_energy_cpu_features"].points
    assert len(points) == 90 and {p["energy.features"] for p in points} == {"row"}
    assert {p["dataset.name"] for p in points} == {"cora", "pubmed"} and {p["depth"] for p in points} == {2, 32, 256}
    assert {p["model.init"] for p in points} == {"xavier"} and {p["seed"] for p in points} == set(range(5))
