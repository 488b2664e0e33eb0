"""Verdicts a referee would sign: each branch (holds, does not hold, tie, too few seeds, under budget, outside
the declared grid) from synthetic records in the real record format, checked as Claim objects."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lipgnn.results import grid
from lipgnn.results.artifacts.lipschitznorm import table3
from lipgnn.results.artifacts.lipschitznorm._spread import rank
from lipgnn.results.engine import Loader
from lipgnn.results.report import render_blocks
from lipgnn.results.stats import greater, no_clear_lead, t_interval, under_budget
from lipgnn.results.verdict import (
    DOES_NOT_HOLD,
    HOLDS,
    LARGER,
    NOT_REPRODUCED,
    NOT_RUN,
    REPRODUCES,
    REVERSED,
    TIE,
    TOO_FEW_SEEDS,
    UNDER_BUDGET,
)
from lipgnn.store import config_key, write_record
from lipgnn.store.records import flatten_record, records_frame

ROOT = Path(__file__).resolve().parents[1]
LABEL = "Cora 30 layers, GAT-Lip vs GAT-res"   # the paper: GAT-Lip 69.3 vs GAT-res 63.5, an effect of +5.8
# Per-seed GAT-Lip and GAT-res accuracies whose paired difference (+6, +7, +5 points: [+3.5, +8.5]) holds the
# paper's +5.8: the claim reproduces.
LIP, RES = [0.66, 0.68, 0.70], [0.60, 0.61, 0.65]


def record(norm: str, residual: bool, seed: int, test: float, epochs: int = 200) -> dict:
    """A Table 3 run record as the trainer writes it (config from the composed groups, fractions in [0, 1])."""
    cfg = {
        "model": {"name": "gat", "hidden": 64, "heads": 1, "residual": residual, "dropout": 0.6,
                  "attn_dropout": 0.3, "impl": "fused"},
        "norm": {"name": "lip", "alpha": 1.0, "variant": "paper"} if norm == "lip" else {"name": "none"},
        "dataset": {"name": "cora", "kind": "planetoid", "missing_rate": 0, "root": "data"},
        "train": {"epochs": epochs, "lr": 0.005, "selection": "best_val"}, "budget": {"name": "cpu"},
        "depth": 30, "seed": seed, "device": "cpu", "results_dir": "results", "experiment_name": "table3",
        "log": {"grad_norms": False},
    }
    point = {"epoch": epochs, "loss": 0.5, "train": 0.9, "val": test, "test": test}
    return {"run_id": f"{config_key(cfg)}-s{seed}", "experiment": "table3", "status": "completed", "config": cfg,
            "seed": seed, "metric": "acc", "history": {}, "best": dict(point), "last": dict(point),
            "epochs_run": epochs, "wall_time_s": 10.0, "device": "cpu", "versions": {}, "git_commit": "b" * 40,
            "info": {}, "error": None}


@pytest.fixture
def conf(tmp_path: Path, monkeypatch) -> Path:
    """A declared grid for table3 at budget cpu: GAT-res and GAT-Lip, Cora, 30 layers, seeds 0-2, 200 epochs."""
    root = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", root)
    for path in (root / "grid").glob("table3_*.yaml"):
        path.unlink()
    (root / "grid" / "table3_cpu.yaml").write_text(
        "# @package _global_\ntrain:\n  epochs: 200\nhydra:\n  sweeper:\n    params:\n"
        "      variant: gat_res,gat_lip\n      dataset: cora\n      depth: 30\n      seed: 0,1,2\n")
    monkeypatch.setattr(grid, "CONF_DIR", root)
    return root


def verdict_of(results: Path) -> tuple[str, int]:
    frame = Loader(results).frame(table3.ARTIFACT)
    (claim,) = [c for c in table3.claims(frame) if c.quote.endswith(LABEL)]
    assert claim.section == "§7.3" and claim.quote.startswith("LipschitzNorm significantly outperforms GAT-res")
    return claim.verdict, claim.n_runs


def write(results: Path, lip: list[float], res: list[float], epochs: int = 200) -> None:
    for seed, (a, b) in enumerate(zip(lip, res, strict=True)):
        write_record(results, record("lip", False, seed, a, epochs))
        write_record(results, record("none", True, seed, b, epochs))


def test_t_interval_by_hand() -> None:
    # [1, 2, 3]: mean 2, s = 1, t(0.975, 2) = 4.302653; half-width 4.302653 / sqrt(3) = 2.484138.
    ci = t_interval([1.0, 2.0, 3.0])
    assert (ci.n, ci.mean) == (3, 2.0)
    assert ci.lo == pytest.approx(2 - 2.484138, abs=1e-6) and ci.hi == pytest.approx(2 + 2.484138, abs=1e-6)
    assert greater(ci) == TIE and greater(t_interval([1.0, 1.1, 1.2])) == HOLDS
    assert greater(t_interval([-1.0, -1.1, -1.2])) == DOES_NOT_HOLD and greater(t_interval([5.0, 6.0])) == TOO_FEW_SEEDS
    assert greater(t_interval([2.0, 2.1, 2.2]), margin=1.5) == HOLDS      # a margin claim needs the margin
    assert greater(t_interval([1.0, 1.1, 1.2]), margin=1.5) == DOES_NOT_HOLD
    assert no_clear_lead(t_interval([0.1, -0.1, 0.0]), band=1.5) == HOLDS   # a tie claim needs a tie test
    assert no_clear_lead(t_interval([3.0, 3.1, 3.2]), band=1.5) == DOES_NOT_HOLD
    assert no_clear_lead(ci, band=1.5) == TIE
    assert math.isnan(t_interval([4.0]).lo)


def test_reproduces_when_the_interval_excludes_zero_and_holds_the_papers_effect(tmp_path: Path,
                                                                                conf: Path) -> None:
    write(tmp_path, LIP, RES)
    assert verdict_of(tmp_path) == (REPRODUCES, 6)
    write(tmp_path / "larger", [0.70, 0.72, 0.74], RES)   # +10 [+7.5, +12.5]: above +5.8 and its margin
    assert verdict_of(tmp_path / "larger")[0] == LARGER


def test_reversed_when_the_interval_is_below_zero(tmp_path: Path, conf: Path) -> None:
    write(tmp_path, [0.60, 0.61, 0.65], [0.70, 0.72, 0.74])
    assert verdict_of(tmp_path) == (REVERSED, 6)


def test_tie_when_the_interval_straddles_zero(tmp_path: Path, conf: Path) -> None:
    # Unpaired, the means differ by 0.3 points; the per-seed differences (+5, -5, +1) straddle zero.
    write(tmp_path, [0.75, 0.65, 0.71], [0.70, 0.70, 0.70])
    assert verdict_of(tmp_path)[0] == TIE


def test_too_few_seeds_below_three(tmp_path: Path, conf: Path) -> None:
    (conf / "grid" / "table3_cpu.yaml").write_text(
        (conf / "grid" / "table3_cpu.yaml").read_text().replace("seed: 0,1,2", "seed: 0,1"))
    write(tmp_path, [0.90, 0.91], [0.10, 0.11])   # a huge lead, but two seeds
    assert verdict_of(tmp_path) == (TOO_FEW_SEEDS, 4)


def test_under_budget_below_the_declared_epochs_or_on_part_of_the_grid(tmp_path: Path, conf: Path) -> None:
    write(tmp_path / "short", LIP, RES, epochs=5)
    assert verdict_of(tmp_path / "short")[0] == UNDER_BUDGET
    write(tmp_path / "part", LIP, RES)
    (tmp_path / "part" / "runs" / "table3" / f"{record('none', True, 2, RES[2])['run_id']}.json").unlink()
    assert verdict_of(tmp_path / "part")[0] == UNDER_BUDGET    # GAT-res has 2 of its 3 declared runs


def test_records_outside_the_grid_never_enter_a_cell_and_are_listed(tmp_path: Path, conf: Path) -> None:
    write(tmp_path, LIP, RES)
    write_record(tmp_path, record("none", True, 7, 0.99))                # seed 7 is not declared
    frame = Loader(tmp_path).frame(table3.ARTIFACT)
    assert int((~frame["in_grid"]).sum()) == 1
    assert verdict_of(tmp_path) == (REPRODUCES, 6)                       # unchanged: the stray run is left out
    protocol = render_blocks(tmp_path)["protocol"]
    assert "1 record(s) outside the grid declared in `conf/grid/table3_<budget>.yaml`" in protocol


# ------------------------------------------------------------------ Table 3: rankings within the seed spread


def spread_frame(cells: dict[tuple[str, bool, str], list[float]]) -> pd.DataFrame:
    """A hand-built Table 3 frame, 30 layers: (norm, residual, dataset) -> test accuracy per seed 0, 1, ...
    Budget "handmade" declares no grid, so no cell is partial."""
    rows = []
    for (norm, residual, dataset), tests in cells.items():
        for seed, test in enumerate(tests):
            rec = record(norm, residual, seed, test)
            rec["config"]["dataset"]["name"] = dataset
            rec["config"]["budget"]["name"] = "handmade"
            rows.append(flatten_record(rec))
    return records_frame(rows)


def test_table3_rankings_tie_within_the_seed_spread_by_hand() -> None:
    frame = spread_frame({
        # Cora, 5 seeds. GAT-Lip - GAT per seed: +2, -1, +1, +2, +1 (points): mean 1.0, s = sqrt(1.5) = 1.2247,
        # half-width t(0.975, 4) * s / sqrt(5) = 2.776445 * 0.547723 = 1.5207 -> [-0.52, +2.52]: straddles 0, a tie.
        ("lip", False, "cora"): [0.72, 0.71, 0.75, 0.73, 0.74],
        ("none", False, "cora"): [0.70, 0.72, 0.74, 0.71, 0.73],
        # GAT-Lip-res - GAT-res: +15, +14, +12, +17, +11: the interval lies above 0, the lead holds.
        ("lip", True, "cora"): [0.75, 0.76, 0.77, 0.78, 0.74],
        ("none", True, "cora"): [0.60, 0.62, 0.65, 0.61, 0.63],
    })
    # PubMed in a frame of its own: with no declared grid, a 2-run cell beside 5-run ones would be partial.
    pubmed = spread_frame({
        # PubMed, 2 seeds. GAT-Lip - GAT: -1, -1 -> |mean| 1.0 < pooled std sqrt((8 + 8) / 2) = 2.83: a tie.
        ("lip", False, "pubmed"): [0.70, 0.74],
        ("none", False, "pubmed"): [0.71, 0.75],
        # GAT-Lip-res - GAT-res: +20, +18 -> 19.0 > pooled std sqrt((2 + 8) / 2) = 2.24: too few seeds to rank.
        ("lip", True, "pubmed"): [0.80, 0.82],
        ("none", True, "pubmed"): [0.60, 0.64],
    })
    found = {f.label: f for _, f in table3.findings(frame) if f.label.startswith("Cora")}
    found |= {f.label: f for _, f in table3.findings(pubmed) if f.label.startswith("PubMed")}
    # On the reproduction scale against the paper's Table 3 effects (+39.8, +5.9, +34.0 on Cora at 30 layers):
    assert found["Cora 30 layers, GAT-Lip vs GAT"].verdict == NOT_REPRODUCED   # holds 0, excludes +39.8
    assert "GAT-Lip 73.0 ± 1.6 (n=5) vs GAT 72.0 ± 1.6 (n=5)" in found["Cora 30 layers, GAT-Lip vs GAT"].reason
    assert "paired difference +1.0 [-0.5, +2.5], n=5" in found["Cora 30 layers, GAT-Lip vs GAT"].reason
    assert found["Cora 30 layers, GAT-Lip-res vs GAT-res"].verdict == LARGER     # +13.8 [+10.6, +17.0]
    assert found["Cora 30 layers, GAT-res vs GAT"].verdict == REVERSED          # 62.2 vs 72.0 over 5 seeds
    # Two seeds never decide, whatever the spread rule says about them.
    assert found["PubMed 30 layers, GAT-Lip vs GAT"].verdict == TOO_FEW_SEEDS
    assert "pooled std 2.8" in found["PubMed 30 layers, GAT-Lip vs GAT"].reason
    assert found["PubMed 30 layers, GAT-Lip-res vs GAT-res"].verdict == TOO_FEW_SEEDS
    block = table3.report(frame)["claim-residual"]
    assert ("- Cora 30 layers: GAT-Lip-res 76.0 ± 1.6 (n=5) > GAT-Lip 73.0 ± 1.6 (n=5) > GAT 72.0 ± 1.6 (n=5) > "
            "GAT-res 62.2 ± 1.9 (n=5). Leader **GAT-Lip-res**: ahead of GAT-Lip, GAT, GAT-res.") in block


def test_spread_rule_on_one_and_two_seeds() -> None:
    def runs(values: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"seed": range(len(values)), "sel_test": values, "diverged": False})

    assert rank(runs([1.0]), runs([1.0])).verdict == TIE              # both at the ceiling: no ranking
    assert rank(runs([1.0]), runs([0.9])).verdict == TOO_FEW_SEEDS
    assert rank(runs([0.70, 0.74]), runs([0.71, 0.75])).verdict == TIE
    assert rank(runs([0.71, 0.75]), runs([0.70, 0.74])).verdict == TIE
    assert rank(runs([0.80, 0.82]), runs([0.60, 0.64])).verdict == TOO_FEW_SEEDS
    assert rank(runs([]), runs([0.5])).verdict == NOT_RUN


# ------------------------------------------------------------------ rules the verdicts rest on


def test_a_record_in_two_sweeps_is_judged_against_the_smaller_epoch_budget(tmp_path: Path, conf: Path) -> None:
    """grid.check_grid: the 200-epoch runs of a point that a 1000-epoch sweep also declares are complete runs of
    the 200-epoch sweep, not "under budget" (judging them against the larger budget would be)."""
    with (conf / "grid" / "table3_cpu.yaml").open("a") as grid_file:  # an extra: the same points at 1000 epochs
        grid_file.write("    extra:\n      - train.epochs: 1000\n        variant: gat_res,gat_lip\n"
                        "        dataset: cora\n        depth: 30\n        seed: 0,1,2\n")
    grid._declared_grid.cache_clear()
    write(tmp_path, [0.70, 0.72, 0.74], [0.60, 0.61, 0.65])
    frame = Loader(tmp_path).frame(table3.ARTIFACT)
    assert set(frame["declared_epochs"]) == {200.0}
    assert not under_budget(frame)


def _runs(rows: list[tuple[str, int, float, float]]) -> pd.DataFrame:
    """(config_key, depth, val, test) per run, seeds 0.. per key, in ``with_selected_metrics``'s columns."""
    out, seeds = [], {}
    for key, depth, val, test in rows:
        seeds[key] = seeds.get(key, -1) + 1
        out.append({"config_key": key, "depth": depth, "seed": seeds[key], "sel_val": val, "sel_test": test,
                    "diverged": False})
    return pd.DataFrame(out)


def test_a_validation_tie_selects_the_shallower_configuration_then_the_smaller_hash() -> None:
    """protocol.select_best, rule 5: equal mean validation -> the shallower depth wins, across depths (whatever
    the hash order says), and within one depth the config hash that sorts first."""
    from lipgnn.results.protocol import select_best

    across = _runs([("aaa", 8, 0.70, 0.10), ("aaa", 8, 0.80, 0.10), ("zzz", 2, 0.75, 0.90), ("zzz", 2, 0.75, 0.90)])
    sel = select_best(across)
    assert (sel.config_key, sel.depth, sel.mean) == ("zzz", 2, 0.90)
    within = _runs([("bbb", 4, 0.75, 0.20), ("aaa", 4, 0.75, 0.60), ("ccc", 4, 0.74, 0.99)])
    sel = select_best(within)
    assert (sel.config_key, sel.mean) == ("aaa", 0.60)


# ------------------------------------------------------------------ multiplicity, seeds, the paper's protocol


def test_one_family_per_paper_holm_and_bh_each_test_once_by_hand() -> None:
    """Holm: p sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone: 0.02, 0.03, 0.06, 0.06; BH: p_(i)·m/i
    made monotone from the top: 0.02, 0.02, 0.04, 0.04. A decisive verdict whose adjusted p reaches 0.05 becomes
    inconclusive; a claim on the same test as an earlier one is counted once and shares its adjusted p; a decisive
    verdict resting on no test keeps itself; another paper's claims form their own family."""
    from types import SimpleNamespace

    from lipgnn.results.report import family_rows
    from lipgnn.results.stats import bh_adjusted, holm_adjusted
    from lipgnn.results.verdict import Claim, Outcome, Scale

    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert bh_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    effect = t_interval([0.01, 0.02, 0.03])

    def claim(verdict: str, p: float | None, test: str = "", paper: str = "lipschitznorm") -> Claim:
        scale = Scale(effect, 0.4, Outcome(verdict, "", p or math.nan), test) if test else None
        return Claim(paper, "§1", "q", verdict, "", 1, "a", p_value=p, scale=scale)

    lip, kim = SimpleNamespace(paper="lipschitznorm"), SimpleNamespace(paper="kim")
    rows = family_rows([(lip, claim(REPRODUCES, 0.01, "t1")), (lip, claim(HOLDS, 0.04)),
                        (lip, claim(DOES_NOT_HOLD, 0.03)), (lip, claim(NOT_REPRODUCED, 0.005, "t4")),
                        (lip, claim(NOT_REPRODUCED, 0.005, "t4")),           # the same test as claim 4
                        (lip, claim(HOLDS, None)),                            # an observation: no test
                        (kim, claim(HOLDS, 0.04))])                           # a family of its own
    assert [r.holm_p for r in rows[:5]] == pytest.approx([0.03, 0.06, 0.06, 0.02, 0.02])
    assert [r.bh_p for r in rows[:5]] == pytest.approx([0.02, 0.04, 0.04, 0.02, 0.02])
    assert [r.holm for r in rows] == [REPRODUCES, TIE, TIE, NOT_REPRODUCED, NOT_REPRODUCED, HOLDS, HOLDS]
    assert [r.bh for r in rows] == [REPRODUCES, HOLDS, DOES_NOT_HOLD, NOT_REPRODUCED, NOT_REPRODUCED, HOLDS, HOLDS]
    assert rows[4].same_test == 4 and rows[3].same_test is None
    assert rows[6].holm_p == pytest.approx(0.04)
    # the interval's own test: p < 0.05 exactly when the 95% interval excludes the threshold
    for values in ([1.0, 1.1, 1.2], [1.0, 2.0, 3.0], [-0.2, 0.1, 0.5, 0.3]):
        ci = t_interval(values)
        assert (ci.p_value() < 0.05) == (ci.lo > 0 or ci.hi < 0)
    assert t_interval([2.0, 2.1, 2.2]).p_value(2.1) == pytest.approx(1.0)
    # an equivalence claim's test (TOST): below 0.05 when the 90% interval lies inside the band
    assert t_interval([0.1, -0.1, 0.0]).equivalence_p(1.5) < 0.05 < t_interval([1.0, 2.0, 3.0]).equivalence_p(1.5)


def test_the_index_prints_the_holm_verdict_and_the_distance_from_the_papers_protocol(tmp_path: Path,
                                                                                     conf: Path) -> None:
    """A Table 3 claim that holds raw at 200 epochs: its index row names 200 of the paper grid's 1000 epochs, its
    seeds and its Holm verdict; the tally reports both."""
    from lipgnn.results.paper_protocol import distance

    write(tmp_path, LIP, RES)
    frame = Loader(tmp_path).frame(table3.ARTIFACT)
    assert "200 of 1000 epochs" in distance("table3", frame)
    blocks = render_blocks(tmp_path)
    (row,) = [line for line in blocks["claims"].splitlines() if LABEL in line]
    assert "**reproduces**" in row and "200 of 1000 epochs" in row and "| 3 |" in row
    assert "| +5.8 | +6.0 [+3.5, +8.5] |" in row               # the paper's effect beside ours
    assert "After Holm's adjustment per paper" in blocks["claims"]
    assert "Benjamini–Hochberg" in blocks["claims"]
    # Each verdict block: the paper's effect beside ours, the outcome's reason, p and its Holm-adjusted p.
    (quote,) = [line for line in blocks["claims-quotes"].splitlines() if LABEL in line]
    assert "— **reproduces**" in quote and "Paper's effect +5.8, ours +6.0 [+3.5, +8.5] points." in quote
    assert re.search(r"p = 0\.\d{3}, Holm-adjusted p = [01]\.\d{3}, BH-adjusted p = [01]\.\d{3}\.", quote)
    # 200 of the paper's 1000 epochs is above the budget floor (a tenth); 50 would not be.
    from lipgnn.results.paper_protocol import budget_fraction
    assert budget_fraction(frame) == pytest.approx(0.2)
    assert budget_fraction(frame.assign(epochs=50.0)) == pytest.approx(0.05)
    assert "200 of 1000 epochs" in blocks["summary"].split("[table3]")[1].splitlines()[0]


def test_protocol_distance_by_hand() -> None:
    """Epochs below the paper's, fewer seeds per configuration, fewer configurations per cell and datasets are
    each named; runs at the paper's protocol read "paper protocol"."""
    from lipgnn.results.paper_protocol import training_distance

    runs = pd.DataFrame({"status": "completed", "in_grid": True, "epochs": [200.0, 200.0, 500.0],
                         "config_key": ["a", "a", "b"], "seed": [0, 1, 0], "variant": "GAT", "dataset": "cora",
                         "depth": 2})
    paper = {"epochs": 1000, "seeds": 5, "configs": 8, "datasets": 2}
    assert training_distance(runs, paper) == ["200-500 of 1000 epochs", "1-2 of 5 seeds",
                                              "2 of 8 configurations per cell", "1 of 2 datasets"]
    assert training_distance(runs, {"epochs": 200, "configs": 1}) == []
    assert training_distance(runs, {"seeds": 1}) == ["1-2 seeds (the paper's 1)"]   # more seeds are named too


def test_a_claims_distance_counts_every_selection_axis_and_names_values_outside_the_grid() -> None:
    """Per claim: a selected depth is a selection axis (Table 1: 160 hyper-parameter configurations × 20 depths);
    an attention dropout the paper's grid lacks is named; a figure axis covering part of the paper's is named; the
    runs' own experiment gives the yardstick (a Fig. 3 claim of the fig6 artifact reads fig3's)."""
    from lipgnn.results.paper_protocol import claim_distance, coverage, outside_grid, paper_side

    def run(depth: int, attn: float, seed: int, experiment: str = "table1") -> dict:
        cfg = {"model": {"hidden": 64, "heads": 1, "attn_dropout": attn, "dropout": 0.5}, "train": {"lr": 0.005},
               "depth": depth}
        return {"status": "completed", "in_grid": True, "epochs": 1000.0, "config_key": f"{depth}-{attn}",
                "seed": seed, "variant": "GAT-Lip", "dataset": "cora", "missing_rate": 0.0, "depth": depth,
                "experiment": experiment, "config": cfg}

    runs = pd.DataFrame([run(d, 0.0, s) for d in (2, 4, 8) for s in range(5)])
    assert paper_side({"grid": "table1", "select": ["depth"]})["configs"] == 3200
    assert claim_distance("table1", runs) == "3 of 3200 configurations per cell"
    table3_runs = pd.DataFrame([run(30, attn, s, "table3") for attn in (0.3, 0.5) for s in range(5)])
    paper3 = paper_side({"grid": "table3"})
    assert outside_grid(table3_runs, paper3) == [
        "attention dropout 0.3 (1 of 2 configurations) outside the paper's {0, 0.2, 0.5}"]
    fig3 = pd.DataFrame([run(d, 0.0, s, "fig3") for d in (2, 10) for s in range(5)])
    assert coverage(fig3, paper_side({"grid": "fig3"})) == ["depth 2-10 (2 of 7 values; paper 2-30)"]
    assert "depth 2-10 (2 of 7 values" in claim_distance("fig6", fig3, fig3)


def test_a_decisive_verdict_on_a_record_from_uncommitted_code_is_marked_and_listed(tmp_path: Path,
                                                                                    conf: Path) -> None:
    """One GAT-res record written with uncommitted changes: the "holds" it supports is marked in the index and the
    dirty block names the record as lipgnn verify takes it (<experiment>/<run id>)."""
    write(tmp_path, LIP, RES)
    rec = record("none", True, 1, RES[1])
    rec["git_commit"] = "b" * 40 + "-dirty"
    write_record(tmp_path, rec)   # the same run id: the record is replaced
    blocks = render_blocks(tmp_path)
    (row,) = [line for line in blocks["claims"].splitlines() if LABEL in line]
    assert "**reproduces** ([1 -dirty](#dirty))" in row
    assert f"`table3/{rec['run_id']}`" in blocks["dirty"]
    clean = tmp_path / "clean"
    write(clean, LIP, RES)
    assert "No decisive verdict rests on a record" in render_blocks(clean)["dirty"]
