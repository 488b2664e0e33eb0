"""Tests of lipgnn.results.report and the report blocks of the LipschitzNorm artifacts (synthetic records)."""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_script

from lipgnn.errors import ConfigError
from lipgnn.results import grid
from lipgnn.results.artifacts.lipschitznorm import fig2, fig6, table1, table3
from lipgnn.results.artifacts.lipschitznorm.table3 import dropout_setting, grid_breakdown
from lipgnn.results.paper_table import build_cells
from lipgnn.results.render.markers import close_marker, open_marker
from lipgnn.results.report import PLACEHOLDER, render_blocks, update_report
from lipgnn.results.verdict import (
    DOES_NOT_HOLD,
    HOLDS,
    HOLDS_IN_PART,
    LARGER,
    NOT_RUN,
    REVERSED,
    TIE,
    TOO_FEW_SEEDS,
)
from lipgnn.store import config_key, load_records, write_record

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"table1": table1.SPEC, "table3": table3.SPEC}
# The main report's blocks: what the registry's LipschitzNorm artifacts build (from a folder without records).
BLOCK_NAMES = tuple(render_blocks(ROOT / "tests" / "no-results-here"))
NAN = float("nan")

# ----------------------------------------------------------------------------------- synthetic records


@pytest.fixture(autouse=True)
def no_declared_grids(tmp_path_factory, monkeypatch) -> None:
    """These tests are about the blocks, not the declared grids (tests/test_verdicts.py): no grid files, so
    every synthetic record is inside its experiment's grid."""
    monkeypatch.setattr(grid, "CONF_DIR", tmp_path_factory.mktemp("conf"))


def make_config(experiment: str, model: str = "gat", norm: str = "none", dataset: str = "cora", depth: int = 2,
                seed: int = 0, missing_rate: int = 0, tree_depth: int | None = None, lr: float = 0.005,
                dropout: float = 0.6, residual: bool = False, epochs: int = 200) -> dict:
    """A resolved config shaped like conf/config.yaml composed with its groups (as tests/test_results.py)."""
    if dataset == "trees":
        ds = {"name": "trees", "kind": "trees", "tree_depth": tree_depth, "num_trees": 1000}
    else:
        ds = {"name": dataset, "kind": "planetoid", "root": "/data", "missing_rate": missing_rate}
    return {
        "model": {"name": model, "hidden": 64, "heads": 1, "residual": residual, "dropout": dropout,
                  "attn_dropout": 0.3 if dropout > 0 else 0.0, "impl": "pyg"},
        "norm": {"name": norm}, "dataset": ds,
        "train": {"epochs": epochs, "lr": lr, "selection": "best_val"},
        "budget": {"name": "cpu"}, "depth": depth, "seed": seed, "device": "cpu", "results_dir": "results",
        "experiment_name": experiment, "log": {"grad_norms": experiment == "fig2"},
    }


def make_record(experiment: str, *, val: float = 0.5, test: float = 0.5, train: float = 0.6,
                status: str = "completed", history: dict | None = None, commit: str = "a" * 40, **cfg_kw) -> dict:
    """A run record per docs/ARCHITECTURE.md; best and last points share (train, val, test)."""
    cfg = make_config(experiment, **cfg_kw)
    point = {"epoch": 3, "loss": 0.7, "train": train, "val": val, "test": test}
    hist = history if history is not None else {
        "epoch": [1, 2, 3], "loss": [1.5, 1.0, 0.7], "train": [train / 2, train, train],
        "val": [val / 2, val, val], "test": [test / 2, test, test]}
    return {
        "run_id": f"{config_key(cfg)}-s{cfg['seed']}", "experiment": experiment, "status": status,
        "config": cfg, "seed": cfg["seed"], "metric": "acc", "history": hist, "best": dict(point),
        "last": dict(point), "epochs_run": 3, "wall_time_s": 36.0, "device": "cpu", "versions": {},
        "git_commit": commit, "info": {}, "error": None,
    }


def block(text: str, name: str) -> str:
    """The content of block ``name`` in a report."""
    # Markers count only on a line of their own (an inline-quoted marker is prose).
    match = re.search(r"^[ \t]*" + re.escape(open_marker(name)) + r"[ \t]*\r?\n(.*?)" + re.escape(close_marker(name)),
                      text, re.S | re.M)
    assert match, f"block {name} not found"
    return match.group(1)


def outside(text: str) -> str:
    """The report with the content of every known block removed (what must survive byte for byte)."""
    for name in BLOCK_NAMES:
        text = re.sub(r"^([ \t]*)" + re.escape(open_marker(name)) + r".*?" + re.escape(close_marker(name)),
                      r"\1" + open_marker(name) + close_marker(name), text, flags=re.S | re.M)
    return text


def fig2_records(results: Path, gat_peak: float, lip_peak: float, seeds: tuple[int, ...] = (0,)) -> None:
    """GAT and GAT-Lip, 3 layers x 4 epochs; the peaks sit at the last epoch of layer 0."""
    for norm, peak in (("none", gat_peak), ("lip", lip_peak)):
        grads = [[0.1, 0.2, 0.3], [0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [peak, 0.1, None]]
        hist = {"epoch": [1, 2, 3, 4], "train": [0.1, 0.2, 0.3, 0.4], "val": [0.1] * 4, "test": [0.1] * 4,
                "grad_norms": grads}
        for seed in seeds:
            write_record(results, make_record("fig2", norm=norm, depth=3, history=hist, train=0.4, seed=seed))


def table3_records(results: Path, lip_wins: bool) -> None:
    """Cora, 30 layers, two grid points per variant: (lr 0.005, authors' dropout) and (lr 0.001, none)."""
    good, bad = (0.70, 0.68), (0.40, 0.38)
    for model_norm, variant_good_at_first in ((("gat", "none"), not lip_wins), (("gat", "lip"), lip_wins)):
        model, norm = model_norm
        first = good if variant_good_at_first else bad
        # seeds 0, 1 at (0.005, authors'); seed 2 there diverged.
        for seed, delta in ((0, -0.05), (1, 0.05)):
            write_record(results, make_record("table3", model=model, norm=norm, depth=30, seed=seed, lr=0.005,
                                              dropout=0.6, val=first[0] + delta, test=first[1] + delta))
        write_record(results, make_record("table3", model=model, norm=norm, depth=30, seed=2, lr=0.005,
                                          dropout=0.6, status="diverged", val=NAN, test=NAN))
        # (0.001, none): GAT always leads here (so the leader depends on the grid point when Lip wins).
        second = (0.60, 0.58) if model_norm == ("gat", "none") else (0.55, 0.50)
        for seed in (0, 1):
            write_record(results, make_record("table3", model=model, norm=norm, depth=30, seed=seed, lr=0.001,
                                              dropout=0.0, val=second[0], test=second[1]))


# ------------------------------------------------------------------------------------------- updater


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_text_outside_markers_is_kept_byte_for_byte(tmp_path: Path, newline: str) -> None:
    results = tmp_path / "results"
    fig2_records(results, 1e6, 2.0)
    report = results / "REPRODUCTION.md"
    original = newline.join([
        "# My report — ünïcödé, `<!-- auto:protocol -->` quoted inline is not a marker",
        "", "Intro  with trailing spaces   ", "",
        open_marker("claim-gradients"), "OLD NUMBER 99.9", close_marker("claim-gradients"),
        "Hand-written discussion of Fig. 2.", "",
        open_marker("custom"), "my own block, not known to lipgnn", close_marker("custom"),
        "  " + open_marker("protocol") + "  ", "stale", close_marker("protocol"),
        "tail without final newline"])
    report.write_bytes(original.encode("utf-8"))
    result = update_report(results)
    new = report.read_bytes().decode("utf-8")
    assert outside(new) == outside(original)
    assert new.startswith(original[: original.index(open_marker("claim-gradients"))])
    assert new.endswith(newline + "tail without final newline")
    assert "OLD NUMBER 99.9" not in new and "stale" not in block(new.replace("\r\n", "\n"), "protocol")
    assert "my own block, not known to lipgnn" in new
    assert "= 1.00e+06 / 2.00e+00 = 5e+05." in new  # the ratio, from the records
    assert result.updated == ("claim-gradients", "protocol") and result.unknown == ("custom",)
    assert set(result.missing) == set(BLOCK_NAMES) - {"claim-gradients", "protocol"}
    if newline == "\r\n":
        assert "\n" not in new.replace("\r\n", "")  # the file's own line endings are kept everywhere


def test_skeleton_has_every_block_heading_and_placeholder_and_says_what_is_missing(tmp_path: Path) -> None:
    results = tmp_path / "empty"  # no runs/ folder at all
    result = update_report(results)
    assert result.created and result.updated == BLOCK_NAMES
    text = (results / "REPRODUCTION.md").read_text(encoding="utf-8")
    assert text.count("## ") == len(BLOCK_NAMES) and text.count(PLACEHOLDER) == len(BLOCK_NAMES)
    for name in BLOCK_NAMES:
        content = block(text, name)
        assert "not run" in content, name
    assert "needs the OGB download" in block(text, "claim-missing-vector")
    assert "needs the OGB download" in block(text, "claim-depth")  # ogbn-arxiv/proteins of Fig. 6
    assert "cannot be judged" in block(text, "claim-gradients")
    assert update_report(results).changed is False


def test_idempotent_and_deterministic(tmp_path: Path) -> None:
    results = tmp_path / "results"
    fig2_records(results, 1e6, 2.0)
    table3_records(results, lip_wins=True)
    for d, acc in ((2, 0.9), (3, 0.5)):
        for norm in ("none", "lip"):
            write_record(results, make_record("fig5", norm=norm, dataset="trees", tree_depth=d, depth=d + 1,
                                              train=acc if norm == "lip" else acc / 2))
    first = update_report(results)
    once = (results / "REPRODUCTION.md").read_bytes()
    second = update_report(results)
    assert first.created and not second.changed
    assert (results / "REPRODUCTION.md").read_bytes() == once
    other = update_report(results, tmp_path / "copy.md")  # a fresh render gives the same bytes
    assert other.path.read_bytes() == once


def test_marker_errors_leave_the_file_untouched(tmp_path: Path) -> None:
    report = tmp_path / "r.md"
    for broken in (f"{open_marker('protocol')}\nno end\n",
                   f"{close_marker('protocol')}\n",
                   f"{open_marker('protocol')}\n{open_marker('claim-fig4')}\n{close_marker('claim-fig4')}\n"):
        report.write_text(broken)
        with pytest.raises(ConfigError, match="line"):
            update_report(tmp_path, report)
        assert report.read_text() == broken


def test_missing_markers_warn_or_append(tmp_path: Path, caplog) -> None:
    report = tmp_path / "r.md"
    report.write_text(f"prose\n\n{open_marker('protocol')}\n{close_marker('protocol')}\n")
    with caplog.at_level(logging.WARNING, logger="lipgnn.results"):
        result = update_report(tmp_path, report)
    assert "claim-fig4" in result.missing and "claim-fig4" in caplog.text
    result = update_report(tmp_path, report, append_missing=True)
    text = report.read_text()
    assert result.appended == tuple(n for n in BLOCK_NAMES if n != "protocol")
    assert text.startswith("prose\n\n" + open_marker("protocol"))
    assert all(open_marker(n) in text for n in BLOCK_NAMES)
    assert not update_report(tmp_path, report).changed


# ------------------------------------------------------------------------------------ block contents


def test_gradient_block_numbers_and_verdict_flip(tmp_path: Path) -> None:
    results = tmp_path / "results"
    fig2_records(results, 5e6, 2.0)
    text = render_blocks(results)["claim-gradients"]
    # GAT: values 0.1 x5, 0.2 x4, 0.3, 5e6 (the null is left out): median (6th of 11) 0.2; epoch 1 mean
    # 0.2; last epoch mean (5e6 + 0.1) / 2 = 2.50e+06; final train 40.0.
    assert "| GAT | 1 (0) | Cora | 3 | 4 | 5.00e+06 | 2.00e-01 | 2.00e-01 | 2.50e+06 | 40.0 |" in text
    assert "= 5.00e+06 / 2.00e+00 = 2.5e+06." in text
    assert "1 non-finite gradient norms" in text
    assert [c.verdict for c in fig2.claims(load_records(results, "fig2"))] == [TOO_FEW_SEEDS]  # one seed
    fig2_records(results, 5e6, 2.0, seeds=(0, 1, 2))
    assert [c.verdict for c in fig2.claims(load_records(results, "fig2"))] == [HOLDS]
    fig2_records(results, 150.0, 2.0, seeds=(0, 1, 2))  # same run ids: the records are replaced
    text = render_blocks(results)["claim-gradients"]
    assert "= 1.50e+02 / 2.00e+00 = 75." in text
    (claim,) = fig2.claims(load_records(results, "fig2"))
    assert (claim.verdict, claim.section, claim.n_runs) == (DOES_NOT_HOLD, "§6", 6)


def test_residual_grid_breakdown_means_by_hand_and_cells_equal_the_tables(tmp_path: Path) -> None:
    results = tmp_path / "results"
    table3_records(results, lip_wins=True)
    text = render_blocks(results)["claim-residual"]
    # GAT-Lip at (0.005, authors'): seeds 0, 1 -> val (0.65 + 0.75) / 2 = 70.0, test (0.63 + 0.73) / 2 = 68.0;
    # seed 2 diverged: counted, not averaged. It is the configuration the cell selects.
    assert "| GAT-Lip | 0.005 | authors' | 3 | 1 | 70.0 | 68.0 | ✓ |" in text
    assert "| GAT | 0.005 | authors' | 3 | 1 | 40.0 | 38.0 |  |" in text
    assert "| GAT | 0.001 | none | 2 | 0 | 60.0 | 58.0 | ✓ |" in text
    # Variants without records still get rows, saying so.
    assert "| GAT-res | 0.005 | authors' | not run |" in text
    assert "Cora 15 layers: not run in this budget." in text
    # Table 3 cells are the tables' own cells.
    spec = TABLES["table3"]
    cells = {(c.row, c.column): c for c in build_cells(load_records(results, "table3"), spec)}
    gat_lip = cells[("GAT-Lip", "Cora 30 layers")]
    # 95% t-interval of (63, 73): 68 ± 12.706 · 7.071 / √2 = 68 ± 63.5.
    assert gat_lip.ours_text(False) == "68.0 ± 7.1 n=2 [4.5, 131.5] [1/3 div.]"
    assert f"| GAT-Lip | not run | 79.4 ± 0.7 | {gat_lip.ours_text(False)} | 69.3 ± 4.1 |" in text
    assert "- Cora 30 layers: GAT-Lip 68.0 ± 7.1 (n=2) > GAT 58.0" in text and "Leader **GAT-Lip**" in text
    assert "agrees with the paper" not in text  # paper ranks GAT-Lip-res first
    assert "the leader depends on the grid point" in text
    table3_records(results, lip_wins=False)
    text = render_blocks(results)["claim-residual"]
    assert "Leader **GAT**" in text
    assert "the same variant leads at every grid point" in text


def test_grid_breakdown_frame_and_dropout_setting(tmp_path: Path) -> None:
    assert dropout_setting(0.6) == "authors'" and dropout_setting(0.0) == "none" and dropout_setting(None) == "?"
    results = tmp_path / "results"
    table3_records(results, lip_wins=True)
    grid = grid_breakdown(load_records(results, "table3"), TABLES["table3"].rows)
    assert len(grid) == 4 * 2  # 4 variants x 2 grid points, two of them not run
    row = grid[(grid["variant"] == "GAT") & (grid["lr"] == 0.001)].iloc[0]
    assert (row["runs"], row["diverged"], row["dropout"]) == (2, 0, "none")
    assert row["val"] == pytest.approx(0.60) and row["test"] == pytest.approx(0.58)
    assert (grid[grid["variant"] == "GAT-res"]["runs"] == 0).all()


def test_missing_vector_verdicts_follow_the_records(tmp_path: Path) -> None:
    results = tmp_path / "results"

    def write(gat_tests: tuple[float, ...], lip_tests: tuple[float, ...]) -> dict[str, str]:
        for (model, norm), tests in ((("gat", "none"), gat_tests), (("gat", "lip"), lip_tests)):
            for seed, t in enumerate(tests):
                write_record(results, make_record("table1", model=model, norm=norm, missing_rate=100, depth=4,
                                                  seed=seed, val=t, test=t))
        return {f.label: f.verdict for _, f in table1.findings(load_records(results, "table1"))}

    # Paired differences 10, 10, 10 points, against the paper's +1.5 (GAT-Lip 75.3 vs its best other, GAT-Pn 73.8)
    verdicts = write((0.60, 0.62, 0.61), (0.70, 0.72, 0.71))
    assert verdicts["Cora 100%, GAT-Lip leads"] == LARGER
    assert verdicts["CiteSeer 100%, GAT-Lip leads"] == NOT_RUN
    assert verdicts["Cora 100%, GAT-Lip vs GAT-Pn"] == NOT_RUN
    text = render_blocks(results)["claim-missing-vector"]
    assert ("Cora 100%, GAT-Lip leads: **larger than reported** — GAT-Lip 71.0 vs GAT 61.0; paired difference "
            "+10.0") in text
    spec = TABLES["table1"]
    for cell in build_cells(load_records(results, "table1"), spec):
        if cell.state == "ok":
            assert f"| {cell.row} | {cell.ours_text(True)} |" in text
    assert write((0.74, 0.76, 0.75), (0.70, 0.72, 0.71))["Cora 100%, GAT-Lip leads"] == REVERSED
    assert write((0.70, 0.72, 0.71), (0.75, 0.65, 0.72))["Cora 100%, GAT-Lip leads"] == TIE   # +5, -7, +1



def test_depth_trees_and_fig4_blocks(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for norm, curve in (("none", [0.3, 0.2, 0.1]), ("lip", [0.4, 0.9, 0.8])):
        hist = {"epoch": [1, 2, 3], "train": curve, "val": [0.1, 0.2, 0.3], "test": [0.1, 0.2, 0.3]}
        write_record(results, make_record("fig3", norm=norm, depth=30, history=hist, train=curve[-1]))
        write_record(results, make_record("fig6", norm=norm, depth=30, test=0.7 if norm == "lip" else 0.3))
        write_record(results, make_record("fig6", model="gt", norm=norm, depth=30,
                                          test=0.2 if norm == "lip" else 0.3))
    # Trees: the metric is the record's best_train (tracked during training), not its curve's max or best/last.
    for variant_norm, tracked in ((("gat", "lip"), 0.95), (("gat", "pairnorm"), 0.7), (("gcn", "none"), 0.3)):
        model, norm = variant_norm
        hist = {"epoch": [1, 2, 3], "train": [0.2, 0.5, 0.6], "val": [0.1] * 3, "test": [0.1] * 3}
        rec = make_record("fig5", model=model, norm=norm, dataset="trees", tree_depth=4, depth=5, history=hist,
                          train=0.6)
        rec["best_train"] = {"epoch": 3, "train": tracked, "test": 0.1}
        write_record(results, rec)
    for depth, (gat, lip) in ((2, (0.5, 0.6)), (10, (0.2, 0.7))):
        for norm, t in (("none", gat), ("lip", lip)):
            write_record(results, make_record("fig4", norm=norm, dataset="pubmed", missing_rate=100, depth=depth,
                                              val=t, test=t))
    blocks = render_blocks(results)
    depth = blocks["claim-depth"]
    assert "| 30 | 10.0 [1 seed] | 30.0 [1 seed] | 80.0 [1 seed] | 90.0 [1 seed] |" in depth
    # One seed per point: the comparisons are printed with their numbers, and judged "too few seeds".
    assert "- Fig. 3 Cora, GAT-Lip vs GAT: **too few seeds** — at 30 layers (deepest run for both) GAT-Lip best " \
           "train accuracy 90.0 vs GAT 30.0; paired difference +60.0, n=1 points." in depth
    assert "- Fig. 6 Cora, GAT-Lip vs GAT: **too few seeds**" in depth
    # GT-Lip 20.0 vs GT 30.0, both within 10 points of Cora's majority class (31.9 %): not comparable, first.
    assert "- Fig. 6 Cora, GT-Lip vs GT: **not comparable**" in depth and "floor 31.9 %" in depth
    assert "- ogbn-proteins: needs the OGB download." in depth and "- PubMed: not run in this budget." in depth
    trees = blocks["claim-trees"]
    assert "| GAT-Lip | 95.0 [1 seed] (α=1) |" in trees and "| GCN | 30.0 [1 seed] |" in trees
    assert "Tree depths not run in this budget: 2, 3, 5, 6, 7, 8, 9, 10" in trees
    # GAT-Lip at α fixed in advance; 200 of Alon & Yahav's 50,000 passes is under the budget floor: not comparable.
    assert ("- d=4, GAT-Lip vs GAT-Pn [α=1 fixed in advance]: **not comparable** — GAT-Lip 95.0 (α=1) vs GAT-Pn 70.0 "
            "[1 seed]") in trees and "not comparable: run at 0.4 % of the paper's budget (under 10 %)" in trees
    fig4 = blocks["claim-fig4"]
    assert "| 10 | 20.0 [1 seed] | 70.0 [1 seed] |" in fig4
    assert "- PubMed 100%, 200 epochs, GAT-Lip vs GAT: **too few seeds**" in fig4
    assert ("- PubMed 100%, 200 epochs, GAT-Lip improves with depth: **too few seeds** — 60.0 at 2 layers vs 70.0 "
            "at 10 layers") in fig4


def test_lip_beating_plain_without_training_properly_holds_only_in_part(tmp_path: Path) -> None:
    """Fig. 3: GAT-Lip above GAT but below 90% train accuracy; Fig. 6: GAT-Lip above GAT at 30 layers
    but more than 5 points under its own best depth -> "holds in part", with the bar named."""
    results = tmp_path / "results"
    for seed in range(3):   # three seeds with the same numbers: the paired differences have no spread
        for norm, curve in (("none", [0.1, 0.2, 0.2]), ("lip", [0.2, 0.3, 0.3])):
            hist = {"epoch": [1, 2, 3], "train": curve, "val": [0.1, 0.2, 0.3], "test": [0.1, 0.2, 0.3]}
            write_record(results, make_record("fig3", norm=norm, depth=30, history=hist, train=curve[-1], seed=seed))
        for depth, (gat, lip) in ((2, (0.80, 0.82)), (30, (0.20, 0.60))):
            for norm, t in (("none", gat), ("lip", lip)):
                write_record(results, make_record("fig6", norm=norm, depth=depth, val=t, test=t, seed=seed))
    depth_block = render_blocks(results)["claim-depth"]
    frame = pd.concat([load_records(results, "fig6"), load_records(results, "fig3")], ignore_index=True)
    verdicts = {c.quote.rsplit(" — ", 1)[1]: c.verdict for c in fig6.claims(frame)}
    assert verdicts["Fig. 3 Cora, GAT-Lip vs GAT"] == HOLDS_IN_PART
    assert verdicts["Fig. 6 Cora, GAT-Lip vs GAT"] == HOLDS_IN_PART
    assert verdicts["Fig. 6 Cora, GT-Lip vs GT"] == NOT_RUN  # no GT records
    assert "stays below 77.0 (5.0 points under its test 82.0 at its best depth by validation, 2 layers;" in depth_block


def test_the_near_best_bar_reads_the_best_depth_by_validation_not_test() -> None:
    """Fig. 6's bar: the depth whose validation is best (2 layers here), even where another depth tests higher."""
    from lipgnn.results.artifacts.lipschitznorm.fig6 import _near_best_bar
    from lipgnn.results.protocol import Selection

    def sel(val: float, test: float) -> Selection:
        runs = pd.DataFrame({"seed": [0], "sel_val": [val], "sel_test": [test], "diverged": [False]})
        return Selection(config_key="k", runs=runs, n_runs=1, n_diverged=0, val_mean=val, mean=test,
                         std=float("nan"), depth=2, n_configs=1)

    bar = _near_best_bar({2: sel(0.80, 0.70), 8: sel(0.60, 0.90)})
    assert bar is not None and bar.depth == 2 and bar.value == pytest.approx(0.70 - 0.05)


def test_a_point_whose_sweep_has_not_finished_is_marked_and_its_verdict_says_so(tmp_path: Path) -> None:
    """Fig. 6 with an lr grid: Cora has both lrs at every point; PubMed's GAT-Lip at 30 layers has one."""
    results = tmp_path / "results"
    for dataset in ("cora", "pubmed"):
        for lr in (0.005, 0.001):
            for norm, t in (("none", 0.3), ("lip", 0.6)):
                if (dataset, norm, lr) != ("pubmed", "lip", 0.001):
                    write_record(results, make_record("fig6", norm=norm, dataset=dataset, depth=30, lr=lr,
                                                      val=t, test=t))
    block = render_blocks(results)["claim-depth"]
    assert "| 30 | 30.0 [1 seed] | not run | not run | 60.0 [1 seed] |" in block                  # Cora
    assert "| 30 | 30.0 [1 seed] | not run | not run | 60.0 [1 seed] [partial: 1/2 runs] |" in block
    assert ("- Fig. 6 PubMed, GAT-Lip vs GAT: **under budget** — at 30 layers (deepest run for both) GAT-Lip test acc "
            "60.0 vs GAT 30.0; paired difference +30.0, n=1 points (partial grid at 30 layers: GAT-Lip 1/2 runs; "
            "may change when the sweep finishes).") in block
    assert "- Fig. 6 Cora, GAT-Lip vs GAT: **too few seeds** — at 30 layers (deepest run for both) GAT-Lip test acc " \
           "60.0 vs GAT 30.0; paired difference +30.0, n=1 points." in block


def test_a_verdict_whose_bar_comes_from_a_partial_point_says_so(tmp_path: Path) -> None:
    """Fig. 6: both lrs ran at 30 layers, but each Lip variant's best depth (2 layers) has one lr so far, so
    the "near its best depth" bar may still move. GAT-Lip beats GAT, so the bar decides its verdict, which
    names that point; GT-Lip loses to GT whatever the bar, so its verdict does not."""
    results = tmp_path / "results"
    for model, deep, shallow in (("gat", (0.2, 0.6), (0.80, 0.82)), ("gt", (0.5, 0.3), (0.70, 0.75))):
        for lr in (0.005, 0.001):
            for norm, t in zip(("none", "lip"), deep, strict=True):
                write_record(results, make_record("fig6", model=model, norm=norm, depth=30, lr=lr, val=t, test=t))
            if lr == 0.005:
                for norm, t in zip(("none", "lip"), shallow, strict=True):
                    write_record(results, make_record("fig6", model=model, norm=norm, depth=2, lr=lr, val=t,
                                                      test=t))
    block = render_blocks(results)["claim-depth"]
    # One seed, and the best depth's point is partial: the verdict is "under budget", and says why.
    assert ("- Fig. 6 Cora, GAT-Lip vs GAT: **under budget** — at 30 layers (deepest run for both) GAT-Lip test acc "
            "60.0 vs GAT 20.0; paired difference +40.0, n=1 points (partial grid at GAT-Lip's best depth, 2 layers: "
            "1/2 runs; may change when the sweep finishes).") in block
    assert "- Fig. 6 Cora, GT-Lip vs GT: **under budget** — at 30 layers (deepest run for both) GT-Lip test acc " \
           "30.0 vs GT 50.0; paired difference -20.0, n=1 points" in block


def test_corrupt_json_does_not_crash_and_is_counted(tmp_path: Path) -> None:
    results = tmp_path / "results"
    table3_records(results, lip_wins=True)
    (results / "runs" / "table3" / "broken.json").write_text('{"schema": 1, "run_id": "x", "conf')
    (results / "runs" / "fig2").mkdir(parents=True)
    (results / "runs" / "fig2" / "list.json").write_text("[1, 2]")
    (results / "runs" / "oddball").mkdir()
    (results / "runs" / "oddball" / "empty.json").write_text("")
    update_report(results)
    text = (results / "REPRODUCTION.md").read_text(encoding="utf-8")
    protocol = block(text, "protocol")
    assert "`runs/table3/`: 1 file(s) skipped" in protocol and "`runs/fig2/`: 1 file(s) skipped" in protocol
    # 2 variants x (2 + 1 diverged + 2) runs of 36 s each: 0.10 h.
    assert ("| table3 | 10 | 8 | 2 | 0 | cpu | 200 (3) | 0-2 (2-3 per configuration) | best_val | 0.10 | "
            "`aaaaaaaaaa` (1 commit); 0 -dirty |") in protocol
    assert "| fig2 | 0 |" in protocol and "| oddball | 0 |" in protocol and "| fig4 | not run in this budget |" \
        in protocol
    assert "70.0" in block(text, "claim-residual")


def test_script_check_and_update(tmp_path: Path) -> None:
    results = tmp_path / "results"

    def make_report(*args: str) -> subprocess.CompletedProcess[str]:
        return run_script("make_report", "--results-dir", str(results), *args)

    assert make_report("--check").returncode == 1
    assert not (results / "REPRODUCTION.md").exists()
    assert make_report().returncode == 0
    assert make_report("--check").returncode == 0
    fig2_records(results, 1e6, 2.0)
    assert make_report("--check").returncode == 1
    done = make_report()
    assert done.returncode == 0 and "updated" in done.stdout
    (results / "REPRODUCTION.md").write_text(f"{open_marker('protocol')}\n")
    failed = make_report()
    assert failed.returncode == 2 and "error:" in failed.stderr


# ------------------------------------------------------------------------- Fig. 6 protocol check


def protocol_record(norm: str, seed: int, last: tuple[float, float, float], best: tuple[float, float, float],
                    best_epoch: int, final_lr: float, formula: str = "paper", lr_floor_from: int = 2) -> dict:
    """A GT record of runs/fig6_protocol/: Cora, 30 layers, last-epoch selection; (train, val, test) points;
    4 epochs; the learning rate steps 1e-3 (epoch 1), 1e-4, then ``final_lr`` from epoch ``lr_floor_from`` on."""
    lrs = [1e-3 if epoch == 1 else 1e-4 if epoch < lr_floor_from else final_lr for epoch in range(1, 5)]
    record = make_record("fig6_protocol", model="gt", norm=norm, depth=30, seed=seed, lr=0.001, epochs=1000,
                         history={"epoch": [1, 2, 3, 4], "lr": lrs, "train": [0.95, 0.2, 0.2, last[0]],
                                  "val": [0.1, 0.1, 0.1, last[1]], "test": [0.1, 0.1, 0.1, last[2]]})
    record["config"]["train"]["selection"] = "last"
    if norm == "lip":
        record["config"]["norm"]["variant"] = formula
        record["run_id"] = f"{config_key(record['config'])}-s{seed}"
    record["last"] = {"epoch": 1000, "loss": 0.5, "train": last[0], "val": last[1], "test": last[2]}
    record["best"] = {"epoch": best_epoch, "loss": 0.6, "train": best[0], "val": best[1], "test": best[2]}
    return record


def test_protocol_check_reports_last_and_best_epoch_beside_fig6(tmp_path: Path) -> None:
    lip = [((0.90, 0.5, 0.60), (0.7, 0.8, 0.70), 100, 1e-5), ((0.80, 0.5, 0.64), (0.7, 0.8, 0.72), 300, 1e-6),
           ((0.85, 0.5, 0.62), (0.7, 0.8, 0.71), 250, 1e-6)]
    for seed, (last, best, epoch, lr) in enumerate(lip):
        write_record(tmp_path, protocol_record("lip", seed, last, best, epoch, lr, lr_floor_from=(2, 4, 4)[seed]))
    for seed, test in enumerate((0.30, 0.32)):
        write_record(tmp_path, protocol_record("none", seed, (0.3, 0.4, test), (0.3, 0.6, 0.35), 5, 1e-7))
        # The authors' formula: its own row, never pooled with eq. 19's runs (its validation is higher).
        write_record(tmp_path, protocol_record("lip", seed, (0.5, 0.9, test - 0.1), (0.5, 0.9, 0.2), 7, 1e-4,
                                               formula="reference"))
    write_record(tmp_path, make_record("fig6", model="gt", norm="lip", depth=30, test=0.386, val=0.4))
    write_record(tmp_path, make_record("fig6", model="gt", norm="lip", depth=30, test=0.9, val=0.9, dataset="pubmed"))
    text = render_blocks(tmp_path)["check-gt-protocol"]
    assert "Records: 7 in `runs/fig6_protocol/`" in text and "per-run selection last" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| GT")}
    # variant | runs | last-epoch test | best-val test | last train | median best epoch | median final lr |
    # median epoch from which the lr stays final | Fig. 6
    assert rows["GT-Lip"] == ("| GT-Lip | 3 | 62.0 ± 2.0 | 71.0 ± 1.0 | 85.0 ± 5.0 | 250 | 1.00e-06 | 4 | "
                              "38.6 [1 seed] |")
    assert rows["GT"] == f"| GT | 2 | 31.0 ± 1.4 | 35.0 ± 0.0 | 30.0 ± 0.0 | 5 | 1.00e-07 | 2 | {NOT_RUN} |"
    assert rows["GT-Lip (authors' formula)"] == ("| GT-Lip (authors' formula) | 2 | 21.0 ± 1.4 | 20.0 ± 0.0 | "
                                                 f"50.0 ± 0.0 | 7 | 1.00e-04 | 2 | {NOT_RUN} |")
    # Paired by seed (0 and 1): GT-Lip − GT = +30, +32: mean 31, 95% t-interval 31 ± 12.706 · 1.414 / √2.
    # 21.0 and 31.0 both sit within 10 points of Cora's majority class: not comparable, whatever the seeds.
    assert ("Cora, authors' protocol, GT-Lip (authors' formula) vs GT: **not comparable** — at 30 layers (deepest "
            "run for both) GT-Lip (authors' formula) last-epoch test acc 21.0 vs GT 31.0; paired difference -10.0 "
            "[-10.0, -10.0], n=2 points; not comparable: both arms within 10 points of the floor 31.9 %") in text
    assert ("Cora, authors' protocol, GT-Lip vs GT: **too few seeds** — at 30 layers (deepest run for both) GT-Lip "
            "last-epoch test acc 62.0 vs GT 31.0; paired difference +31.0 [+18.3, +43.7], n=2 points.") in text


def test_protocol_check_without_records_says_so(tmp_path: Path) -> None:
    text = render_blocks(tmp_path)["check-gt-protocol"]
    assert "Records: none under `runs/fig6_protocol/`" in text and "**Verdict: cannot be judged**" in text


def test_every_auto_block_of_the_committed_reports_is_written_by_an_artifact(tmp_path: Path) -> None:
    """A marker no artifact writes keeps whatever numbers it last held, silently stale after new records:
    every auto block in the committed report parts must be one that `make report` regenerates."""
    from lipgnn.results import registry
    from lipgnn.results.render.markers import block_names
    from lipgnn.results.report import MAIN_PAPER, report_path

    (tmp_path / "runs").mkdir()
    root = Path(__file__).resolve().parents[1] / "results"
    for paper in dict.fromkeys([MAIN_PAPER] + [a.paper for a in registry.artifacts() if a.report]):
        written = set(render_blocks(tmp_path, paper))
        orphans = set(block_names(report_path(root, paper).read_text(encoding="utf-8"))) - written
        assert not orphans, f"{paper}: auto blocks no artifact writes: {sorted(orphans)}"


# ------------------------------------------------------------------------------------- claims, rendered once


def _fake_artifacts(monkeypatch, report_blocks: dict[str, str] | None = None) -> dict[str, int]:
    """The registry replaced by one Guan & He artifact with two claims; returns its claims() call count."""
    from lipgnn.results import registry
    from lipgnn.results.artifact import Artifact
    from lipgnn.results.verdict import Claim

    calls = {"claims": 0}

    def claims(frame: pd.DataFrame) -> list[Claim]:
        calls["claims"] += 1
        return [Claim("guan_he", "§3.2", "energy grows | with depth", HOLDS, "ours 1→2", 5, "x.md#fake"),
                Claim("guan_he", "§4.2", "nonlocal decays slowly", NOT_RUN, "no records", 0, "x.md#fake")]

    fake = Artifact(name="fake", paper="guan_he", title="a fake artifact", experiments=("fake",),
                    report=lambda frame: dict(report_blocks or {"fake-table": "a table"}), claims=claims)
    monkeypatch.setattr(registry, "artifacts", lambda: (fake,))
    return calls


def test_claims_are_computed_once_and_rendered_by_one_renderer(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.results.engine import Loader
    from lipgnn.results.report import CLAIMS_BLOCK, MAIN_PAPER

    calls = _fake_artifacts(monkeypatch)
    loader = Loader(tmp_path)
    part = render_blocks(tmp_path, "guan_he", loader)
    index = render_blocks(tmp_path, MAIN_PAPER, loader)[CLAIMS_BLOCK]
    assert calls["claims"] == 1  # the paper's block and the main index share one computation
    assert list(part) == ["protocol", "fake-table", "fake-claims"]
    assert part["fake-claims"] == (
        '<a id="fake-claims"></a>\n\n| claim | where | paper\'s effect | our effect | verdict | evidence | runs | '
        "our budget vs the paper's |\n"
        "|:---|:---:|:---:|:---:|:---:|:---:|:---:|:---:|\n"
        "| “energy grows \\| with depth” | §3.2 | - | - | **holds** | ours 1→2 | 5 | not stated |\n"
        "| “nonlocal decays slowly” | §4.2 | - | - | **not run** | no records | 0 | not stated |\n")
    assert ("| Guan & He | §3.2 | [energy grows \\| with depth](#q-1) | - | - | **holds** | - | - | = | = | - | "
            "not stated | 5 | [fake](x.md#fake) |") in index
    assert "fake-claims" not in render_blocks(tmp_path, MAIN_PAPER, loader)  # the main part is the index
    render_blocks(tmp_path, "guan_he")  # a new load computes them afresh
    assert calls["claims"] == 2


def test_an_artifact_writing_its_own_claims_block_is_refused(tmp_path: Path, monkeypatch) -> None:
    _fake_artifacts(monkeypatch, {"fake-claims": "typed by the artifact"})
    with pytest.raises(ValueError, match="drop the block from its report"):
        render_blocks(tmp_path, "guan_he")


def test_every_claims_artifact_outside_the_main_part_has_its_claims_block_in_its_part() -> None:
    from lipgnn.results import registry
    from lipgnn.results.render.markers import block_names
    from lipgnn.results.report import CLAIMS_SUFFIX, MAIN_PAPER, report_path

    for artifact in registry.artifacts():
        if artifact.paper == MAIN_PAPER or artifact.claims is None or artifact.report is None:
            continue
        names = block_names(report_path(ROOT / "results", artifact.paper).read_text(encoding="utf-8"))
        assert f"{artifact.name}{CLAIMS_SUFFIX}" in names, artifact.name


# ------------------------------------------------------------------ the first screen and stale prose

REPORTS = {"REPRODUCTION.md": "REPRODUCTION.md", "reproduction/guan_he.md": "reproduction/guan_he.md",
           "reproduction/kim.md": "reproduction/kim.md"}


def test_the_first_screen_answers_what_reproduces() -> None:
    """Within its first 40 lines the entry point shows the tally per paper (raw and after Holm) and one row per
    artifact with claims (what the paper shows, our verdicts, seeds, our budget vs the paper's), then the index."""
    from lipgnn.results import registry

    text = (ROOT / "results" / "REPRODUCTION.md").read_text(encoding="utf-8")
    head = "\n".join(text.splitlines()[:40])
    assert "| paper | claims | verdicts | after Holm |" in head
    assert "| artifact | what the paper shows | our verdicts | seeds | our budget vs the paper's |" in head
    for artifact in registry.artifacts():
        if artifact.claims is not None:
            assert f"| [{artifact.name}](" in head, artifact.name
    assert text.index("## Claims index") < text.index("## Protocol and run inventory")


def test_stale_prose_outside_the_markers_is_flagged() -> None:
    """A verdict word or a dataset count in hand-written prose that contradicts the blocks is named."""
    from lipgnn.results.render.prose import stale_prose

    block = ("<!-- auto:x -->\n| “We observe that the Laplacian energy decays gradually” | §4.2 | **holds in part** | "
             "monotone in 2/5 datasets | 125 |\n<!-- /auto:x -->\n")
    stale = block + '"Decays gradually" holds; algebraic decay holds on one of the three datasets.\n'
    found = stale_prose({"g.md": stale})
    assert len(found) == 2 and "holds in part" in found[0] and "5 datasets" in found[1]
    fresh = block + '"Decays gradually" holds in part; algebraic decay holds on one of the five datasets.\n'
    assert stale_prose({"g.md": fresh}) == []
    assert stale_prose({"m.md": 'some verdicts read "too few seeds".\n' + block})   # no claim reads that
    # The reproduction scale's words: prose must say what the block says, and "tie" is no verdict any more.
    scale = ("<!-- auto:y -->\n“Table 3 — Cora 30 layers, GAT-Lip vs GAT” — **not reproduced**; 200 of 1000 epochs.\n"
             "<!-- /auto:y -->\n")
    found = stale_prose({"r.md": scale + '"Cora 30 layers, GAT-Lip vs GAT" holds; at 30 layers it is a tie.\n'})
    assert len(found) == 2 and "not reproduced" in found[0] and "calls a verdict a tie" in found[1]
    assert stale_prose({"r.md": scale + '"Cora 30 layers, GAT-Lip vs GAT" not reproduced, and tied W^Q.\n'}) == []


def test_the_committed_reports_prose_agrees_with_their_blocks() -> None:
    from lipgnn.results.render.prose import stale_prose

    files = {name: (ROOT / "results" / path).read_text(encoding="utf-8") for name, path in REPORTS.items()}
    assert stale_prose(files) == []
