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
    assert gh_energy.features_block(c).startswith("not run (`python train.py -m experiment=gh_energy")
    assert "gh_energy-features" in gh_energy.report(_frame({}))


def test_the_declared_ablation_is_row_features_on_cora_and_pubmed() -> None:
    sweeps = {s.name: s for s in declared_grid("gh_energy", "cpu").sweeps}
    points = sweeps["grid/gh_energy_cpu.yaml extra[1]"].points
    assert len(points) == 90 and {p["energy.features"] for p in points} == {"row"}
    assert {p["dataset.name"] for p in points} == {"cora", "pubmed"} and {p["depth"] for p in points} == {2, 32, 256}
    assert {p["model.init"] for p in points} == {"xavier"} and {p["seed"] for p in points} == set(range(5))


# ------------------------------------------------------------------ the encoder depth as a measured choice


def _encoder_frame(one: float, two: float) -> pd.DataFrame:
    """Pre-LN on Cora and PubMed at 2 layers, 5 seeds: the two-layer encoder at ``two`` times the paper's value,
    the one-Linear encoder at ``one`` times it (records of the one-Linear encoder carry model.encoder_layers=1)."""
    recs = []
    for dataset in ("cora", "pubmed"):
        paper = gh_energy.paper_value("pre", dataset, 2)
        for seed in range(5):
            recs.append(_record("pre", dataset, 2, seed, "raw", paper * two))
            rec = _record("pre", dataset, 2, seed, "raw", paper * one)
            rec["config"]["model"]["encoder_layers"] = 1
            recs.append(rec)
    return pd.DataFrame(recs)


def test_the_encoder_block_names_the_encoder_closer_to_the_paper_and_never_mixes_them() -> None:
    c = gh_energy.cells(_encoder_frame(one=1.2, two=10.0))
    assert sorted(c["encoder"].unique()) == [1, 2]
    main = gh_energy._main(c)
    assert set(main["encoder"]) == {gh_energy.MAIN["encoder"]} and len(main) == 2    # one cell per dataset
    block = gh_energy.encoder_block(c)
    assert "Closer to the paper overall: Linear (" in block and "| all | all | 2 | 0.0792 | 1 | 2/2 |" in block
    assert "| Pre-LN SAN | 0.0682 | 0.0682 | 0.0682 |" in block   # PubMed/Cora under both encoders and the paper's
    flipped = gh_energy.encoder_block(gh_energy.cells(_encoder_frame(one=10.0, two=1.2)))
    assert "Closer to the paper overall: Linear-ReLU-Linear" in flipped


def test_the_encoder_default_is_the_main_setting_and_keeps_committed_run_ids() -> None:
    """conf/model/san.yaml's encoder depth is the one the energy table reports as main, and at that default the
    key stays out of the identity: a committed gh_energy record composes to its own run id."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from lipgnn.config import compose
    from lipgnn.runs import job_id as run_id_for

    root = Path(__file__).resolve().parents[1]
    assert OmegaConf.load(root / "conf" / "model" / "san.yaml").encoder_layers == gh_energy.MAIN["encoder"]
    base = ["experiment=gh_energy", "budget=cpu", "dataset=cora", "variant=san_postln", "depth=2",
            "model.init=xavier", "seed=0"]
    committed = run_id_for(compose(base))
    assert (root / "results" / "runs" / "gh_energy" / f"{committed}.json").exists()
    assert run_id_for(compose(base + ["model.encoder_layers=1"])) != committed
