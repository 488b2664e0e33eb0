"""Fig. 6 from hand-built records: a point is partial against its own dataset's declared sweep, here a copy of
conf/ in which Cora's extra seeds (conf/grid/fig6_cpu_seeds.yaml) are declared and PubMed's
(fig6_cpu_seeds_pubmed.yaml) are not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import conf_with, pubmed_seed_0_only

from lipgnn.results.artifacts.lipschitznorm import fig6
from lipgnn.results.engine import Loader
from lipgnn.results.verdict import TOO_FEW_SEEDS, UNDER_BUDGET
from lipgnn.store import config_key, write_record


def fig6_record(dataset: str, norm: str, depth: int, lr: float, seed: int, val: float, test: float) -> dict:
    cfg = {
        "model": {"name": "gat", "hidden": 64, "heads": 1, "residual": False, "dropout": 0.6, "attn_dropout": 0.3,
                  "impl": "fused"},
        "norm": {"name": "lip", "alpha": 1.0, "formula": "paper"} if norm == "lip" else {"name": "none"},
        "dataset": {"name": dataset, "kind": "planetoid"},
        "train": {"epochs": 200, "lr": lr, "selection": "best_val"}, "budget": {"name": "cpu"},
        "depth": depth, "seed": seed, "experiment_name": "fig6",
    }
    point = {"epoch": 200, "loss": 0.5, "train": 0.9, "val": val, "test": test}
    return {"run_id": f"{config_key(cfg)}-s{seed}", "experiment": "fig6", "status": "completed", "config": cfg,
            "seed": seed, "metric": "acc", "history": {}, "best": dict(point), "last": dict(point),
            "epochs_run": 200, "wall_time_s": 1.0, "device": "cpu", "versions": {}, "git_commit": "e" * 40,
            "info": {}, "error": None}


def cora_seeds_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the grid reader at a copy of conf/ whose fig6 grid has PubMed at seed 0 only and no extra seeds for
    the 30-layer cells."""
    conf_with(monkeypatch, tmp_path, "fig6_cpu", lambda grid: pubmed_seed_0_only(grid, keep_extras=False))


def test_fig6_points_are_partial_against_their_own_datasets_sweep(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every declared run of GAT and GAT-Lip at 30 layers: Cora with seeds 0-2 (6 runs a point), PubMed with seed 0
    (2 runs a point). Neither dataset's points are partial; PubMed's comparison has one seed ("too few seeds"),
    not "under budget" for lacking Cora's seeds. Cora's GAT-Lip with one lr missing is partial (5 of 6)."""
    cora_seeds_only(monkeypatch, tmp_path)
    for dataset, seeds in (("cora", (0, 1, 2)), ("pubmed", (0,))):
        for norm, base in (("none", 0.3), ("lip", 0.6)):
            for lr in (0.005, 0.001):
                for seed in seeds:
                    score = base + 0.01 * seed + (0.05 if lr == 0.001 else 0.0)
                    write_record(tmp_path, fig6_record(dataset, norm, 30, lr, seed, score, score))
    block = fig6.report(Loader(tmp_path).frame(fig6.ARTIFACT))["claim-depth"]
    assert not re.search(r"\[partial: \d", block)
    pubmed = next(line for line in block.splitlines() if line.startswith("- Fig. 6 PubMed, GAT-Lip vs GAT:"))
    assert f"**{TOO_FEW_SEEDS}**" in pubmed and UNDER_BUDGET not in pubmed
    cora = next(line for line in block.splitlines() if line.startswith("- Fig. 6 Cora, GAT-Lip vs GAT:"))
    assert f"**{UNDER_BUDGET}**" not in cora and TOO_FEW_SEEDS not in cora

    (tmp_path / "runs" / "fig6" / f"{fig6_record('cora', 'lip', 30, 0.005, 2, 0, 0)['run_id']}.json").unlink()
    block = fig6.report(Loader(tmp_path).frame(fig6.ARTIFACT))["claim-depth"]
    assert "[partial: 5/6 runs]" in block and "[partial: 1/2" not in block


def test_a_point_whose_sweep_declares_more_seeds_does_not_make_the_others_partial(tmp_path: Path) -> None:
    """PubMed's 30-layer points declare seeds 0-4 (fig6_cpu_seeds_d30*.yaml), its 20-layer points seeds 0-2: each
    point is complete against its own declared count, not the fullest point's."""
    from lipgnn.results.grid import declared_per_point
    from lipgnn.results.protocol import with_selected_metrics

    for norm, base in (("none", 0.4), ("lip", 0.7)):
        for depth, seeds in ((30, range(5)), (20, range(3))):
            for lr in (0.005, 0.001):
                for seed in seeds:
                    score = base + 0.01 * seed + (0.02 if lr == 0.001 else 0.0)
                    write_record(tmp_path, fig6_record("pubmed", norm, depth, lr, seed, score, score))
    frame = Loader(tmp_path).frame(fig6.ARTIFACT)
    runs = with_selected_metrics(frame[frame["experiment"] == "fig6"])
    full = declared_per_point(runs, "fig6", ["dataset", "variant", "depth"])
    assert (full("GAT-Lip", 30), full("GAT", 30), full("GAT-Lip", 20), full("GT-Lip", 30)) == (10, 10, 6, 10)
    block = fig6.report(frame)["claim-depth"]
    assert not re.search(r"\[partial: \d", block)
    line = next(x for x in block.splitlines() if x.startswith("- Fig. 6 PubMed, GAT-Lip vs GAT:"))
    assert "n=5 points" in line and UNDER_BUDGET not in line

    (tmp_path / "runs" / "fig6" / f"{fig6_record('pubmed', 'lip', 30, 0.005, 4, 0, 0)['run_id']}.json").unlink()
    block = fig6.report(Loader(tmp_path).frame(fig6.ARTIFACT))["claim-depth"]
    assert "[partial: 9/10 runs]" in block and "/6 runs]" not in block
    line = next(x for x in block.splitlines() if x.startswith("- Fig. 6 PubMed, GAT-Lip vs GAT:"))
    assert f"**{UNDER_BUDGET}**" in line and "GAT-Lip 9/10" in line


def test_fig6_draws_a_panel_only_for_datasets_with_runs(tmp_path: Path) -> None:
    """No empty panels: Cora's records give one panel; the datasets without runs are named in the title."""
    for norm in ("none", "lip"):
        write_record(tmp_path, fig6_record("cora", norm, 2, 0.005, 0, 0.7, 0.7))
    fig = fig6.figure(Loader(tmp_path).frame(fig6.ARTIFACT))
    assert [ax.get_title() for ax in fig.axes] == ["Cora"]
    assert "not shown: PubMed: not run" in fig._suptitle.get_text()
    assert "ogbn-arxiv: needs the OGB download" in fig._suptitle.get_text()
