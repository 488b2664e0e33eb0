"""Fig. 6's nonlocal extra rows (gh_fig6_nonlocal): the configs compose to nonlocal GAT/GT on Fig. 6's protocol,
the declared grid is what the sweep runs, and the artifact labels, selects and marks points from hand-built records."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from omegaconf import OmegaConf

from lipgnn.results.artifacts.guan_he import gh_fig6_nonlocal as nl
from lipgnn.results.grid import declared_grid


def _config(model: str, norm: str, depth: int, lr: float, nl_on: bool = False, **model_keys) -> dict:
    return {"model": {"name": model, "residual": False, "layer_norm": "none", "score": "dot", "tie_qk": False,
                      "nonlocal": nl_on, "nonlocal_source": "x", "nonlocal_grad": True, "hidden": 64,
                      "heads": 1, **model_keys},
            "norm": {"name": norm, **({"alpha": 1.0, "formula": "paper", "layernorm": "none"} if norm == "lip"
                                      else {})},
            "dataset": {"name": "cora"}, "budget": {"name": "cpu"}, "train": {"epochs": 200, "lr": lr},
            "depth": depth}


def _record(experiment: str, cfg: dict, val: float, test: float, status: str = "completed", seed: int = 0) -> dict:
    variant = {"gat": "GAT", "gt": "GT"}[cfg["model"]["name"]] + ("-Lip" if cfg["norm"]["name"] == "lip" else "")
    key = f"{experiment}-{variant}-{cfg['model']['nonlocal']}-{cfg['depth']}-{cfg['train']['lr']}"
    return {"experiment": experiment, "status": status, "config": cfg, "config_key": key, "variant": variant,
            "dataset": cfg["dataset"]["name"], "budget": cfg["budget"]["name"], "depth": float(cfg["depth"]),
            "lr": cfg["train"]["lr"], "seed": float(seed), "hidden": 64.0, "heads": 1.0, "selection": "best_val",
            "best_val": val, "best_test": test, "last_val": val, "last_test": test, "in_grid": True}


def test_label_names_the_rows_and_leaves_out_other_configurations() -> None:
    assert nl.label(_config("gat", "none", 2, 0.005)) == "GAT"
    assert nl.label(_config("gt", "lip", 2, 0.005, nl_on=True)) == "nonlocal GT-Lip"
    assert nl.label(_config("gat", "lip", 2, 0.005, nl_on=True)) == "nonlocal GAT-Lip"
    assert nl.label(_config("gat", "none", 2, 0.005, residual=True)) is None
    assert nl.label(_config("gt", "none", 2, 0.005, layer_norm="post")) == "Post-LN GT"
    assert nl.label(_config("gat", "none", 2, 0.005, True, layer_norm="post")) == "nonlocal Post-LN GAT"
    assert nl.label(_config("gt", "none", 2, 0.005, layer_norm="pre")) is None
    assert nl.label(_config("gt", "none", 2, 0.005, score="l2")) is None
    assert nl.label(_config("gt", "none", 2, 0.005, nl_on=True, nonlocal_source="xv")) is None
    assert nl.label({**_config("gat", "lip", 2, 0.005), "norm": {"name": "lip", "alpha": 2.0}}) is None
    assert nl.label(_config("gat", "pairnorm", 2, 0.005)) is None


def test_frame_selects_the_lr_by_validation_and_keeps_every_diverged_point() -> None:
    rows = [
        _record("fig6_nonlocal", _config("gat", "none", 2, 0.005, True), 0.50, 0.40),
        _record("fig6_nonlocal", _config("gat", "none", 2, 0.001, True), 0.60, 0.30),   # best val -> test 30
        _record("fig6_nonlocal", _config("gt", "none", 30, 0.005, True), math.nan, math.nan, "diverged"),
        _record("fig6_nonlocal", _config("gt", "none", 30, 0.001, True), math.nan, math.nan, "diverged"),
        _record("fig6_nonlocal", _config("gt", "lip", 30, 0.001, True), 0.7, 0.6),     # one of two lrs run
        _record("fig6", _config("gat", "none", 2, 0.005), 0.81, 0.80),
        _record("fig6", _config("gat", "none", 2, 0.001, True), 0.99, 0.99),           # nonlocal outside its folder
        _record("fig6_nonlocal", _config("gat", "none", 2, 0.005), 0.99, 0.99),        # reference outside fig6
        _record("fig6", _config("gat", "none", 2, 0.005, residual=True), 0.99, 0.99),  # not a Fig. 6 row
        _record("fig6_nonlocal", _config("gt", "none", 30, 0.005, True, layer_norm="post"), 0.7, 0.65),
        _record("fig6", _config("gt", "none", 30, 0.005, layer_norm="post"), 0.99, 0.99),  # Post-LN outside its folder
    ]
    t = nl.frame(pd.DataFrame(rows))
    assert list(t["variant"]) == ["GAT", "nonlocal GAT", "nonlocal GT", "nonlocal GT-Lip", "nonlocal Post-LN GT"]
    assert t.iloc[-1]["group"] == nl.BEYOND and t.iloc[-1]["test_acc"] == pytest.approx(65.0)
    gat = t[t["variant"] == "nonlocal GAT"].iloc[0]
    assert gat["lr"] == 0.001 and gat["test_acc"] == pytest.approx(30.0) and gat["val_acc"] == pytest.approx(60.0)
    assert gat["group"] == nl.BEYOND and t.iloc[0]["group"] == nl.REFERENCE_GROUP
    gt = t[t["variant"] == "nonlocal GT"].iloc[0]
    assert gt["runs"] == 2 and gt["diverged"] == 2 and math.isnan(gt["test_acc"]) and math.isnan(gt["lr"])
    block = nl.report(pd.DataFrame(rows))[f"{nl.NAME}-table"]
    # Every point is declared at seeds 0-2 (fig6_nonlocal_cpu_seeds.yaml): 2 lrs x 3 seeds a point.
    assert "| nonlocal GT | beyond the papers | – | diverged (2/2) [partial: 2/6 runs] |" in block
    # Declared runs are counted per row: the Post-LN sweep's GT points are not the nonlocal GT row's.
    assert "| nonlocal Post-LN GT | beyond the papers | – | 65.0 [partial: 1/6 runs] |" in block
    # fig6 declares two lrs too, and on Cora seeds 0-2 (fig6_cpu_seeds.yaml)
    assert "| GAT | reference | 80.0 [partial: 1/6 runs] | – |" in block
    assert "beyond the papers" in nl.table(pd.DataFrame(rows))["md"]
    # The declared grid asks for two lrs; the GT-Lip point ran one.
    assert "| nonlocal GT-Lip | beyond the papers | – | 60.0 [partial: 1/6 runs] |" in block


def test_no_records_is_not_run() -> None:
    assert nl.report(pd.DataFrame())[f"{nl.NAME}-table"].strip() == "not run"
    assert nl.frame(pd.DataFrame()).empty


def test_the_declared_cpu_grid_is_fig6s_protocol_for_four_nonlocal_variants() -> None:
    grid = declared_grid("fig6_nonlocal", "cpu")
    # 32 points, each at seeds 0-2 (seeds 1-2: conf/grid/fig6_nonlocal_cpu_seeds.yaml)
    assert len(grid.points) == 32 * 3 and {s.epochs for s in grid.sweeps} == {200}
    assert sorted({p["seed"] for p in grid.points}) == [0, 1, 2]
    seed0 = [p for p in grid.points if p["seed"] == 0]
    points = [p for p in seed0 if p.get("model.layer_norm", "none") == "none"]
    assert len(points) == 16
    assert {p["model.name"] for p in points} == {"gat", "gt"} and {p["norm.name"] for p in points} == {"none", "lip"}
    assert all(p["model.nonlocal"] is True and p["dataset.name"] == "cora" for p in points)
    # The Post-LN sweep: GAT and GT in LN(x + f(x)), with and without the factor, no LipschitzNorm.
    postln = [p for p in seed0 if p.get("model.layer_norm") == "post"]
    assert len(postln) == 16 and {p["norm.name"] for p in postln} == {"none"}
    assert sum(p.get("model.nonlocal") is True for p in postln) == 8
    assert {p["train.lr"] for p in points} == {0.005, 0.001} and 30 in {p["depth"] for p in points}
    paper = declared_grid("fig6_nonlocal", "paper")
    assert {p["model.head_aggregation"] for p in paper.points} == {"concat"}  # nonlocal needs concat


def test_variants_compose_to_fig6s_models_with_nonlocal_on() -> None:
    from lipgnn.config import compose

    for variant, model, norm in (("gat_nonlocal", "gat", "none"), ("gt_lip_nonlocal", "gt", "lip")):
        cfg = compose(["experiment=fig6_nonlocal", "budget=cpu", f"variant={variant}", "depth=30"])
        assert cfg.experiment_name == "fig6_nonlocal" and cfg.model.impl == "auto"
        assert cfg.model.name == model and cfg.norm.name == norm and cfg.model["nonlocal"] is True
        assert cfg.model.hidden == 64 and cfg.model.heads == 1 and not cfg.model.residual
        assert nl.label(OmegaConf.to_container(cfg, resolve=True)) == ("nonlocal GAT" if model == "gat"
                                                                       else "nonlocal GT-Lip")
