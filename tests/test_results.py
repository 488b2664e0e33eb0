"""Tests of lipgnn.results: atomic record store, load_records, table protocol, tables/figures outputs."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import conf_with, pubmed_seed_0_only, run_script

from lipgnn.errors import ConfigError
from lipgnn.results import grid
from lipgnn.results.artifacts.lipschitznorm import fig5, table1, table2, table3
from lipgnn.results.engine import make_figures, make_tables
from lipgnn.results.paper_table import CSV_COLUMNS, build_cells, render_csv
from lipgnn.results.protocol import with_selected_metrics
from lipgnn.store import (
    COLUMNS,
    RECORD_COLUMNS,
    config_key,
    load_records,
    read_record,
    run_record_path,
    variant_label,
    write_failure_record,
    write_record,
)

TABLES = {"table1": table1.SPEC, "table2": table2.SPEC, "table3": table3.SPEC}


# ----------------------------------------------------------------------------------- synthetic records


@pytest.fixture(autouse=True)
def no_declared_grids(tmp_path_factory, monkeypatch) -> None:
    """Without grid files every synthetic record is inside its experiment's grid and "partial" is judged
    against the fullest cell (declared grids: tests/test_verdicts.py)."""
    monkeypatch.setattr(grid, "CONF_DIR", tmp_path_factory.mktemp("conf"))

_MODEL_DEFAULTS = {
    "gat": {"dropout": 0.6, "attn_dropout": 0.3}, "gt": {"dropout": 0.5, "attn_dropout": 0.3},
    "gcn": {"dropout": 0.5, "attn_dropout": 0.0}, "gin": {"dropout": 0.5, "attn_dropout": 0.0},
    "ggnn": {"dropout": 0.5, "attn_dropout": 0.0}, "gcnii": {"dropout": 0.6, "attn_dropout": 0.0},
}
_NORMS = {
    "none": {"name": "none"},
    "lip": {"name": "lip", "alpha": 1.0, "variant": "paper"},
    "pairnorm": {"name": "pairnorm", "scale": 1.0, "scale_individually": False},
    "layernorm": {"name": "layernorm", "mode": "graph", "affine": True},
}


def make_config(model: str = "gat", norm: str = "none", dataset: str = "cora", depth: int = 2, seed: int = 0,
                missing_rate: int | None = 0, tree_depth: int | None = None, lr: float = 0.005,
                hidden: int = 64, heads: int = 1, dropout: float | None = None, residual: bool = False,
                selection: str = "best_val", budget: str = "cpu", epochs: int = 200,
                experiment: str = "table1", root: str = "/data") -> dict:
    """A resolved config shaped like conf/config.yaml composed with its groups."""
    if dataset == "trees":
        ds = {"name": "trees", "kind": "trees", "tree_depth": tree_depth, "num_trees": 5000,
              "train_fraction": 0.8, "batch_size": 1024, "cache_dir": ".cache/lipgnn"}
    elif dataset.startswith("ogbn"):
        ds = {"name": dataset, "kind": "ogb", "root": root, "download": True}
    else:
        ds = {"name": dataset, "kind": "planetoid", "pyg_name": dataset.capitalize(), "root": root,
              "cache_dir": ".cache/lipgnn", "download": True}
        if missing_rate is not None:
            ds["missing_rate"] = missing_rate
    m = {"name": model, "hidden": hidden, "heads": heads, "head_aggregation": "concat",
         "residual": residual, "impl": "pyg", **_MODEL_DEFAULTS[model]}
    if dropout is not None:
        m["dropout"] = dropout
    return {
        "model": m, "norm": dict(_NORMS[norm]), "dataset": ds,
        "train": {"epochs": epochs, "lr": lr, "weight_decay": 5e-4, "scheduler": "none", "early_stopping": 0,
                  "selection": selection, "batch_size": 0, "eval_every": 1, "checkpoint_every": 0,
                  "grad_clip": 0.0},
        "logger": {"name": "none"}, "budget": {"name": budget},
        "depth": depth, "seed": seed, "device": "cpu", "results_dir": "results",
        "experiment_name": experiment, "overwrite": False, "log": {"grad_norms": False, "progress": False},
    }


def make_record(experiment: str = "table1", *, best: tuple[float, float, float] = (0.9, 0.8, 0.8),
                last: tuple[float, float, float] | None = None, status: str = "completed",
                history: dict | None = None, run_id: str | None = None, **cfg_kw) -> dict:
    """A run record per docs/ARCHITECTURE.md; ``best``/``last`` are (train, val, test) fractions."""
    cfg = make_config(experiment=experiment, **cfg_kw)
    last = last if last is not None else best
    if run_id is None:
        run_id = f"{config_key(cfg)}-s{cfg['seed']}"
    epochs = 3
    hist = history if history is not None else {
        "epoch": list(range(1, epochs + 1)), "loss": [1.5, 1.0, 0.7],
        "train": [best[0] / 2, best[0], last[0]], "val": [best[1] / 2, best[1], last[1]],
        "test": [best[2] / 2, best[2], last[2]],
    }
    return {
        "schema": 1, "run_id": run_id, "experiment": experiment, "status": status, "config": cfg,
        "seed": cfg["seed"], "metric": "acc", "history": hist,
        "best": {"epoch": 2, "loss": 1.0, "train": best[0], "val": best[1], "test": best[2]},
        "last": {"epoch": epochs, "loss": 0.7, "train": last[0], "val": last[1], "test": last[2]},
        "epochs_run": epochs, "wall_time_s": 1.25, "device": "cpu", "versions": {"torch": "2.13.0"},
        "git_commit": "0" * 40, "info": {}, "error": None,
    }


def _temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and (p.name.startswith(".") or p.name.endswith(".tmp"))]


# ----------------------------------------------------------------------------------------------- store


def test_write_record_roundtrip_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    record = make_record(run_id="r1")
    record["history"]["loss"][2] = float("nan")  # a diverged loss must still give strict JSON
    path = write_record(tmp_path, record)
    assert path == run_record_path(tmp_path, "table1", "r1") == tmp_path / "runs" / "table1" / "r1.json"
    assert sorted(p.name for p in path.parent.iterdir()) == ["r1.json"]
    assert _temp_files(tmp_path) == []
    text = path.read_text()
    assert "NaN" not in text
    back = json.loads(text)  # strict parse
    assert back["history"]["loss"] == [1.5, 1.0, None]
    assert read_record(path)["best"] == record["best"]


def test_interrupted_write_keeps_the_old_record_and_no_partial_file(tmp_path: Path, monkeypatch) -> None:
    path = write_record(tmp_path, make_record(run_id="r1", best=(0.5, 0.5, 0.5)))
    before = path.read_bytes()

    def crash(fd: int) -> None:  # the process "dies" after the temp file is written, before the rename
        raise OSError("simulated crash during fsync")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_record(tmp_path, make_record(run_id="r1", best=(0.9, 0.9, 0.9)))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _temp_files(tmp_path) == []
    # A hard kill can leave a temp file behind: readers must ignore it.
    (path.parent / ".r1.abc123.tmp").write_text('{"schema": 1, "run_id": "par')
    assert load_records(tmp_path)["run_id"].tolist() == ["r1"]


def _writer(results_dir: str, worker: int, n: int) -> None:
    for i in range(n):
        write_record(results_dir, make_record(run_id=f"w{worker}-{i:03d}", seed=i, depth=worker + 2))
        # Both workers also keep overwriting one shared run id (same target file).
        write_record(results_dir, make_record(run_id="shared", seed=worker, best=(0.1 * worker, 0.5, 0.5)))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 50)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    folder = tmp_path / "runs" / "table1"
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 101 and "shared.json" in names
    assert _temp_files(tmp_path) == []
    for path in folder.iterdir():
        json.loads(path.read_text())  # every file is complete JSON
    shared = read_record(folder / "shared.json")
    assert shared["seed"] in (0, 1)
    df = load_records(tmp_path)
    assert len(df) == 101
    assert sorted(df.loc[df["run_id"] != "shared", "depth"].value_counts().tolist()) == [50, 50]


def test_corrupt_and_foreign_files_are_skipped_and_named(tmp_path: Path, caplog) -> None:
    write_record(tmp_path, make_record(run_id="good"))
    folder = tmp_path / "runs" / "table1"
    bad = {
        "truncated.json": '{"schema": 1, "run_id": "x", "conf',
        "alist.json": "[1, 2, 3]",
        "foreign.json": '{"name": "some other tool"}',
        "noschema.json": '{"run_id": "abc", "status": "completed"}',
        "empty.json": "",
        "future.json": '{"schema": 99, "run_id": "f"}',
    }
    for name, text in bad.items():
        (folder / name).write_text(text)
    (folder / ".hidden.json").write_text("{")
    (folder / "x.json.tmp").write_text("{")
    with caplog.at_level(logging.WARNING, logger="lipgnn.store"):
        df = load_records(tmp_path)
    assert df["run_id"].tolist() == ["good"]
    messages = "\n".join(r.getMessage() for r in caplog.records)
    for name in bad:
        assert name in messages
    assert ".hidden.json" not in messages and "x.json.tmp" not in messages
    assert read_record(folder / "alist.json") is None


def test_load_records_columns_and_values(tmp_path: Path) -> None:
    empty = load_records(tmp_path)
    assert empty.empty and list(empty.columns) == list(COLUMNS)
    assert list(COLUMNS[: len(RECORD_COLUMNS)]) == [
        "run_id", "experiment", "status", "model", "norm", "dataset", "depth", "seed", "residual",
        "missing_rate", "tree_depth", "lr", "hidden", "heads", "dropout", "budget", "metric",
        "best_epoch", "best_train", "best_val", "best_test", "last_train", "last_val", "last_test",
        "epochs_run", "wall_time_s", "path", "history",
    ]
    p1 = write_record(tmp_path, make_record(
        "table3", run_id="a", model="gat", norm="lip", dataset="pubmed", depth=15, seed=3, residual=True,
        missing_rate=None, lr=0.01, hidden=128, heads=4, dropout=0.2, budget="paper",
        best=(0.91, 0.8, 0.77), last=(0.95, 0.78, 0.75), selection="last"))
    write_record(tmp_path, make_record(
        "fig5", run_id="b", model="ggnn", norm="pairnorm", dataset="trees", tree_depth=6, depth=7))
    df = load_records(tmp_path).set_index("run_id")
    a = df.loc["a"]
    assert (a.experiment, a.status, a.model, a.norm, a.dataset) == ("table3", "completed", "gat", "lip", "pubmed")
    assert (a.depth, a.seed, a.residual, a.hidden, a.heads, a.budget) == (15, 3, True, 128, 4, "paper")
    assert a.missing_rate == 0 and math.isnan(a.tree_depth)  # absent -> 0 / NaN
    assert (a.lr, a.dropout, a.metric, a.best_epoch) == (0.01, 0.2, "acc", 2)
    assert (a.best_train, a.best_val, a.best_test) == (0.91, 0.8, 0.77)
    assert (a.last_train, a.last_val, a.last_test) == (0.95, 0.78, 0.75)
    assert (a.epochs_run, a.wall_time_s, a.path) == (3, 1.25, str(p1))
    assert a.history["val"] == [0.4, 0.8, 0.78]
    assert (a.selection, a.variant, a.epochs) == ("last", "GAT-Lip-res", 200)
    b = df.loc["b"]
    assert (b.tree_depth, b.dataset, b.variant, b.depth) == (6.0, "trees", "GGNN-Pn", 7)
    only = load_records(tmp_path, "fig5")
    assert only["run_id"].tolist() == ["b"]
    assert load_records(tmp_path, "fig5", history=False)["history"].tolist() == [{}]


def test_config_key_ignores_seed_and_paths_only() -> None:
    base = make_config(seed=0)
    assert config_key(base) == config_key(make_config(seed=7, root="/elsewhere"))
    assert config_key(base) != config_key(make_config(seed=0, depth=3))
    assert config_key(base) != config_key(make_config(seed=0, lr=0.01))
    assert config_key(base) != config_key(make_config(seed=0, missing_rate=100))


def test_failure_record(tmp_path: Path) -> None:
    rec = make_record(run_id="f")
    path = write_failure_record(tmp_path, rec, ValueError("boom\nsecond line"))
    back = read_record(path)
    assert back["status"] == "failed" and back["error"] == "ValueError: boom second line"
    assert load_records(tmp_path)["status"].tolist() == ["failed"]
    with pytest.raises(ConfigError):
        run_record_path(tmp_path, "../escape", "x")


def test_variant_labels() -> None:
    cases = {
        ("gat", "none", False): "GAT", ("gat", "pairnorm", False): "GAT-Pn", ("gat", "layernorm", False): "GAT-Ln",
        ("gat", "lip", False): "GAT-Lip", ("gat", "none", True): "GAT-res", ("gat", "lip", True): "GAT-Lip-res",
        ("gt", "none", False): "GT", ("gt", "lip", False): "GT-Lip", ("gt", "layernorm", False): "GT-Ln",
        ("gt", "pairnorm", False): "GT-Pn", ("gcn", "none", False): "GCN", ("gcn", "pairnorm", False): "GCN-Pn",
        ("gin", "none", False): "GIN", ("ggnn", "none", False): "GGNN", ("gcnii", "none", False): "GCNII",
        ("gcnii", "none", True): "GCNII",
    }
    for args, label in cases.items():
        assert variant_label(*args) == label


# ----------------------------------------------------------------------------------------------- paper


def test_paper_values_as_printed() -> None:
    assert table1.PAPER["GAT-Lip"][("cora", 100)].text == "75.3 ± 0.9 (11)"
    assert table1.PAPER["GCN"][("citeseer", 100)].text == "31.3 ± 2.7 (2)"
    assert table2.PAPER["GCNII"][("ogbn-arxiv", 0)].text == "72.74 (-)*"
    assert table2.PAPER["GAT-Lip"][("ogbn-arxiv", 0)].text == "74.62 ± 1.1 (8)"
    assert table3.PAPER["GAT-Lip-res"][("cora", 15)].text == "80.2 ± 1.1"
    assert fig5.PAPER_TREE_DEPTH10 == {"GAT-Lip": 68.3, "GAT-Pn": 47.8}


# The paper's rows as printed (LaTeX stripped), an independent copy of the facts the artifacts encode.
PRINTED = {
    "table1": {
        "GCN": "82.5 ± 1.2 (2) 58.8 ± 3.5 (2) 69.5 ± 2.1 (2) 31.3 ± 2.7 (2) 77.9 ± 1.4 (2) 44.9 ± 4.4 (2)",
        "GGNN": "81.8 ± 2.0 (2) 68.2 ± 2.5 (6) 68.5 ± 1.9 (3) 40.5 ± 1.4 (5) 78.4 ± 2.1 (4) 56.6 ± 1.9 (4)",
        "GAT": "82.3 ± 2.3 (2) 65.3 ± 2.1 (4) 69.3 ± 1.6 (2) 42.8 ± 1.6 (4) 77.4 ± 0.5 (6) 63.1 ± 0.7 (4)",
        "GAT-Pn": "78.8 ± 0.6 (4) 73.8 ± 1.2 (12) 67.2 ± 0.8 (4) 51.7 ± 1.1 (10) 77.6 ± 1.6 (8) 70.4 ± 1.1 (12)",
        "GAT-Lip": "83.1 ± 0.5 (5) 75.3 ± 0.9 (11) 69.1 ± 1.5 (3) 50.9 ± 1.9 (9) 78.9 ± 1.3 (5) 73.3 ± 1.4 (15)",
    },
    "table2": {"GCNII": "72.74 (-)* 74.9 ± 0.4 (14) 73.9 ± 0.3 (16)",
               "GAT-Lip": "74.62 ± 1.1 (8) 75.3 ± 0.9 (11) 73.3 ± 1.4 (15)"},
    "table3": {"GAT": "38.2 ± 1.7 29.5 ± 3.6 68.9 ± 1.5 28.2 ± 3.1",
               "GAT-res": "76.1 ± 1.2 63.5 ± 2.1 76.2 ± 1.1 63.8 ± 3.3",
               "GAT-Lip": "79.4 ± 0.7 69.3 ± 4.1 76.4 ± 1.5 67.2 ± 2.1",
               "GAT-Lip-res": "80.2 ± 1.1 69.4 ± 2.8 77.3 ± 1.0 68.7 ± 1.8"},
}


def test_paper_values_match_the_printed_rows() -> None:
    for name, rows in PRINTED.items():
        spec = TABLES[name]
        assert tuple(rows) == spec.rows
        for row, printed in rows.items():
            expected = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", printed)]
            ours = [x for c in spec.columns for v in [spec.paper[row][c]] for x in (v.mean, v.std, v.depth)
                    if x is not None]
            assert ours == expected, (name, row)


# ---------------------------------------------------------------------------------------------- tables


def _cell(cells, row: str, column: str):
    return next(c for c in cells if c.row == row and c.column == column)


def test_table_cell_selects_by_validation_and_reports_test(tmp_path: Path) -> None:
    common = {"model": "gat", "norm": "lip", "dataset": "cora", "missing_rate": 100}
    # Config A (depth 4): best mean val (0.80) but lower test. Config B (depth 11): higher test, lower val.
    for seed, test in enumerate([0.70, 0.72, 0.74]):
        write_record(tmp_path, make_record(depth=4, seed=seed, best=(0.9, 0.80, test), **common))
    for seed, test in enumerate([0.90, 0.91, 0.92]):
        write_record(tmp_path, make_record(depth=11, seed=seed, best=(0.9, 0.75, test), **common))
    # Config C: same depth as A, other lr; one seed has a huge val but the mean val (0.79) loses.
    for seed, (val, test) in enumerate([(0.99, 0.5), (0.69, 0.5), (0.69, 0.5)]):
        write_record(tmp_path, make_record(depth=4, lr=0.01, seed=seed, best=(0.9, val, test), **common))
    df = load_records(tmp_path, "table1")
    cell = _cell(build_cells(df, TABLES["table1"]), "GAT-Lip", "Cora 100%")
    # Hand computation: mean(70, 72, 74) = 72.0; sample std (ddof=1) = sqrt(((-2)^2 + 0 + 2^2) / 2) = 2.0.
    assert cell.ours_mean == pytest.approx(72.0) and cell.ours_std == pytest.approx(2.0)
    assert (cell.ours_depth, cell.n_runs, cell.n_diverged) == (4, 3, 0)
    # 95% t-interval: 72 ± t(0.975, 2) · 2 / √3 = 72 ± 4.303 · 1.155 = 72 ± 5.0.
    assert cell.ours_text(True) == "72.0 ± 2.0 (4) n=3 [67.0, 77.0]"
    assert cell.paper_text() == "75.3 ± 0.9 (11)"
    # The best-TEST configuration (depth 11, 91.0) must not have been chosen.
    assert cell.ours_mean != pytest.approx(91.0)

    csv = pd.read_csv(pd.io.common.StringIO(render_csv(build_cells(df, TABLES["table1"]))))
    row = csv[(csv["row"] == "GAT-Lip") & (csv["column"] == "Cora 100%")].iloc[0]
    assert (row.ours_mean, row.ours_std, row.n_runs, row.ours_depth) == (72.0, 2.0, 3, 4)
    assert row.paper == "75.3 ± 0.9 (11)" and row.selection == "best_val"


def test_selection_rule_last_uses_last_epoch_metrics(tmp_path: Path) -> None:
    # Under "last", depth 3 wins (last val 0.7 > 0.6) although depth 2 has the better best-epoch val.
    for seed in range(2):
        write_record(tmp_path, make_record(model="gcn", depth=2, seed=seed, selection="last",
                                           best=(0.9, 0.9, 0.80), last=(0.9, 0.6, 0.40)))
        write_record(tmp_path, make_record(model="gcn", depth=3, seed=seed, selection="last",
                                           best=(0.9, 0.8, 0.60), last=(0.9, 0.7, 0.50 + 0.02 * seed)))
    cell = _cell(build_cells(load_records(tmp_path), TABLES["table1"]), "GCN", "Cora 0%")
    assert cell.ours_mean == pytest.approx(51.0) and cell.ours_std == pytest.approx(math.sqrt(2.0))
    assert cell.ours_depth == 3 and cell.selection == "last"


def test_diverged_runs_are_counted_not_averaged(tmp_path: Path) -> None:
    common = {"model": "gat", "norm": "none", "dataset": "pubmed", "depth": 30, "experiment": "table3"}
    write_record(tmp_path, make_record(seed=0, best=(0.5, 0.6, 0.30), **common))
    write_record(tmp_path, make_record(seed=1, best=(0.5, 0.6, 0.34), **common))
    # Diverged: its best-so-far metrics would pull the mean up if averaged.
    write_record(tmp_path, make_record(seed=2, best=(0.9, 0.9, 0.90), status="diverged", **common))
    # A diverged run whose record says completed but whose metric is not finite.
    nan_run = make_record(seed=3, **common)
    nan_run["best"]["test"] = float("nan")
    write_record(tmp_path, nan_run)
    # Failed runs are ignored altogether.
    write_failure_record(tmp_path, make_record(seed=4, **common), "CUDA out of memory")
    # All seeds of GAT-res PubMed 30 diverged.
    for seed in range(2):
        write_record(tmp_path, make_record(seed=seed, residual=True, status="diverged",
                                           best=(float("nan"),) * 3, **common))
    cells = build_cells(load_records(tmp_path, "table3"), TABLES["table3"])
    cell = _cell(cells, "GAT", "PubMed 30 layers")
    assert cell.ours_mean == pytest.approx(32.0) and cell.ours_std == pytest.approx(100 * math.sqrt(0.0008))
    assert (cell.n_runs, cell.n_diverged) == (4, 2)
    assert cell.ours_text(False) == "32.0 ± 2.8 n=2 [6.6, 57.4] [2/4 div.]"  # 32 ± 12.706 · 2.828 / √2
    assert "1 failed runs ignored" in cell.note
    dead = _cell(cells, "GAT-res", "PubMed 30 layers")
    # Two runs where GAT's cell has four non-failed ones (the failed run does not count): partial.
    assert dead.state == "diverged" and dead.ours_text(False) == "diverged (2/2) [partial: 2/4 runs]"
    assert math.isnan(dead.ours_mean)
    assert _cell(cells, "GAT-Lip", "Cora 15 layers").ours_text(False) == "not run"


def test_a_cell_whose_sweep_has_not_finished_is_marked_partial(tmp_path: Path) -> None:
    common = {"model": "gat", "dataset": "cora", "depth": 15, "experiment": "table3"}
    # GAT: the full grid, 2 lrs x 2 seeds. GAT-Lip: the sweep stopped after 3 of those 4 runs.
    for lr in (0.005, 0.001):
        for seed in (0, 1):
            write_record(tmp_path, make_record(norm="none", lr=lr, seed=seed, best=(0.9, 0.7, 0.70), **common))
            if (lr, seed) != (0.001, 1):  # lr 0.005 has the better validation score, so it is selected
                val = 0.81 if lr == 0.005 else 0.8
                write_record(tmp_path, make_record(norm="lip", lr=lr, seed=seed, best=(0.9, val, 0.80), **common))
    cells = build_cells(load_records(tmp_path, "table3"), TABLES["table3"])
    full, part = _cell(cells, "GAT", "Cora 15 layers"), _cell(cells, "GAT-Lip", "Cora 15 layers")
    assert full.ours_text(False) == "70.0 ± 0.0 n=2 [70.0, 70.0]" and not full.partial
    assert (part.grid_runs, part.full_grid_runs) == (3, 4)
    assert part.ours_text(False) == "80.0 ± 0.0 n=2 [80.0, 80.0] [partial: 3/4 runs]"
    assert "partial grid: 3 of the 4 runs" in part.note
    assert _cell(cells, "GAT-res", "Cora 15 layers").ours_text(False) == "not run"
    frame = pd.read_csv(pd.io.common.StringIO(render_csv(cells)))
    row = frame[(frame["row"] == "GAT-Lip") & (frame["column"] == "Cora 15 layers")].iloc[0]
    assert (row.grid_runs, row.full_grid_runs) == (3, 4)
    make_tables(tmp_path, names=("table3",))
    assert "- [partial: k/K runs]" in (tmp_path / "tables" / "table3.md").read_text()


def test_each_cell_holds_only_its_own_dataset_and_column(tmp_path: Path) -> None:
    # Same variant at two depths and two datasets (one spelled as a loader would): four distinct cells.
    for dataset, depth, test in (("cora", 15, 0.70), ("cora", 30, 0.30), ("PubMed", 15, 0.50), ("pubmed", 30, 0.10)):
        write_record(tmp_path, make_record(model="gat", norm="none", dataset=dataset, depth=depth,
                                           experiment="table3", best=(0.9, 0.8, test)))
    cells = build_cells(load_records(tmp_path, "table3"), TABLES["table3"])
    texts = {c.column: c.ours_text(False) for c in cells if c.row == "GAT"}
    assert texts == {"Cora 15 layers": "70.0 [1 seed]", "Cora 30 layers": "30.0 [1 seed]",
                     "PubMed 15 layers": "50.0 [1 seed]", "PubMed 30 layers": "10.0 [1 seed]"}
    assert {c.grid_runs for c in cells if c.row == "GAT"} == {1}


def test_partial_points_get_hollow_markers_in_figures(tmp_path: Path) -> None:
    from lipgnn.results.artifacts.lipschitznorm.fig6 import figure as fig6

    common = {"model": "gat", "dataset": "cora", "experiment": "fig6", "missing_rate": None}
    for depth in (2, 10):
        for lr in (0.005, 0.001):
            write_record(tmp_path, make_record(norm="none", depth=depth, lr=lr, **common))
            if (depth, lr) != (10, 0.001):
                write_record(tmp_path, make_record(norm="lip", depth=depth, lr=lr, **common))
    fig = fig6(load_records(tmp_path, "fig6"))
    hollow = [(line.get_markeredgecolor(), list(line.get_xdata())) for ax in fig.axes for line in ax.get_lines()
              if line.get_markerfacecolor() in ("white", "w", (1.0, 1.0, 1.0, 1.0))]
    assert hollow == [("#d62728", [10.0])]     # GAT-Lip (red) at 10 layers only
    assert "hollow marker: partial point" in fig.texts[0].get_text()
    complete = tmp_path / "complete"
    write_record(complete, make_record(norm="none", depth=2, **common))
    assert "hollow" not in fig6(load_records(complete, "fig6")).texts[0].get_text()


def test_csv_has_required_columns(tmp_path: Path) -> None:
    make_tables(tmp_path)
    for name in ("table1", "table2", "table3"):
        frame = pd.read_csv(tmp_path / "tables" / f"{name}.csv")
        assert list(frame.columns[:6]) == ["row", "column", "ours_mean", "ours_std", "n_runs", "paper"]
        assert list(frame.columns) == list(CSV_COLUMNS)
        spec = TABLES[name]
        assert len(frame) == len(spec.rows) * len(spec.columns)
    t2 = pd.read_csv(tmp_path / "tables" / "table2.csv")
    assert t2.loc[t2["column"] == "ogbn-arxiv 0%", "note"].str.startswith("needs the OGB download").all()
    assert t2.loc[t2["column"] == "Cora 100%", "note"].str.startswith("not run").all()


# ------------------------------------------------------------------------------------- end to end


def _tiny_result_set(results_dir: Path) -> None:
    rng = np.random.default_rng(0)

    def acc(base: float) -> tuple[float, float, float]:
        v = float(np.clip(base + rng.normal(0, 0.01), 0, 1))
        return (min(1.0, v + 0.1), v, v - 0.01)

    for seed in range(2):
        for model, norm in (("gcn", "none"), ("ggnn", "none"), ("gat", "none"), ("gat", "pairnorm"),
                            ("gat", "lip")):
            for depth in (2, 4):
                write_record(results_dir, make_record("table1", model=model, norm=norm, dataset="cora",
                                                      missing_rate=100, depth=depth, seed=seed,
                                                      best=acc(0.6 + 0.01 * depth)))
        write_record(results_dir, make_record("table2", model="gcnii", dataset="pubmed", missing_rate=100,
                                              depth=16, seed=seed, best=acc(0.73)))
        for residual in (False, True):
            write_record(results_dir, make_record("table3", model="gat", norm="lip", residual=residual,
                                                  dataset="cora", depth=15, seed=seed, best=acc(0.78)))
        for norm in ("none", "lip"):
            grads = [[10.0 ** (e / 2 + layer / 4) if norm == "none" else 1.0 + 0.1 * layer for layer in range(4)]
                     for e in range(5)]
            hist = {"epoch": list(range(1, 6)), "loss": [1.0] * 5, "train": [0.2, 0.3, 0.4, 0.5, 0.6],
                    "val": [0.2] * 5, "test": [0.2] * 5, "grad_norms": grads}
            for exp in ("fig2", "fig3"):
                for depth in (2, 4):
                    write_record(results_dir, make_record(exp, model="gat", norm=norm, depth=depth,
                                                          seed=seed, history=hist))
            for depth in (2, 5):
                write_record(results_dir, make_record("fig4", model="gat", norm=norm, dataset="pubmed",
                                                      missing_rate=100, depth=depth, seed=seed,
                                                      best=acc(0.7 if norm == "lip" else 0.4)))
        for model in ("gcn", "gin", "ggnn", "gat"):
            for norm in ("none", "pairnorm") + (("lip",) if model == "gat" else ()):
                for d in (2, 3):
                    write_record(results_dir, make_record("fig5", model=model, norm=norm, dataset="trees",
                                                          tree_depth=d, depth=d + 1, seed=seed,
                                                          best=acc(1.0 / d)))
        for model in ("gat", "gt"):
            for norm in ("none", "layernorm", "pairnorm", "lip"):
                for depth in (2, 5):
                    write_record(results_dir, make_record("fig6", model=model, norm=norm, dataset="cora",
                                                          depth=depth, seed=seed, best=acc(0.8 - 0.01 * depth)))
    write_record(results_dir, make_record("fig4", model="gat", dataset="pubmed", missing_rate=100, depth=10,
                                          seed=0, status="diverged", best=(float("nan"),) * 3))


EXPECTED = sorted([f"table{i}.{ext}" for i in (1, 2, 3) for ext in ("md", "tex", "csv")]
                  + [f"fig{i}.{ext}" for i in range(2, 7) for ext in ("png", "pdf")])


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_make_tables_and_figures_write_every_file_deterministically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lipgnn.config import CONF_DIR

    # the scripts run as command lines (with the project's grids): the API path below reads the same grids
    monkeypatch.setattr(grid, "CONF_DIR", Path(CONF_DIR))
    results = tmp_path / "results"
    _tiny_result_set(results)
    printed = ""
    for script in ("make_tables", "make_figures"):
        done = run_script(script, "--results-dir", str(results))
        assert done.returncode == 0, done.stderr
        printed += done.stdout
    every = {**_outputs(results / "tables"), **_outputs(results / "figures")}
    assert set(EXPECTED) <= set(every)  # the other papers' artifacts write their files too
    first = {name: data for name, data in every.items() if name in EXPECTED}
    assert sorted(first) == EXPECTED
    assert all(f"wrote {results / 'tables' / n}" in printed for n in first if n.startswith("table"))
    assert all(f"wrote {results / 'figures' / n}" in printed for n in first if n.startswith("fig"))
    assert all(len(b) > 0 for b in first.values())
    # No timestamps or tool versions embedded (the sources of non-reproducible bytes).
    for name, data in first.items():
        if name.endswith(".png"):
            assert b"Software" not in data and b"tIME" not in data, name
        if name.endswith(".pdf"):
            assert b"/CreationDate" not in data and b"/ModDate" not in data, name
    # Rerun (the API path this time) into another folder: byte-identical files. All tables; two figures
    # covering an image with a log colour bar and error bars with diverged markers (every figure is
    # rerun by the slow test below).
    make_tables(results, tmp_path / "again")
    make_figures(results, tmp_path / "again", names=("fig2", "fig4"))
    again = {k: v for k, v in _outputs(tmp_path / "again").items() if k in EXPECTED}
    assert len(again) == 13 and again == {k: first[k] for k in again}
    md = first["table1.md"].decode()
    assert "| GAT-Lip |" in md and "75.3 ± 0.9 (11)" in md and "budget cpu" in md and "seeds 0-1" in md
    assert "needs the OGB download" in first["table2.md"].decode()
    # Different records give different files (the comparison above can fail): a point of fig4's declared grid.
    write_record(results, make_record("fig4", model="gat", norm="lip", dataset="pubmed", missing_rate=100,
                                      depth=5, seed=0, best=(0.9, 0.8, 0.7)))
    make_figures(results, tmp_path / "changed", names=("fig4",))
    assert (tmp_path / "changed" / "fig4.png").read_bytes() != first["fig4.png"]


@pytest.mark.slow
def test_every_figure_is_byte_identical_when_rerun(tmp_path: Path) -> None:

    _tiny_result_set(tmp_path / "results")
    make_figures(tmp_path / "results", tmp_path / "a")
    make_figures(tmp_path / "results", tmp_path / "b")
    a, b = _outputs(tmp_path / "a"), _outputs(tmp_path / "b")
    assert len(a) == 10 and a == b


def test_figures_from_no_records_still_render(tmp_path: Path) -> None:

    paths = make_figures(tmp_path)
    names = {p.name for p in paths}
    assert {f"fig{i}.{e}" for i in range(2, 7) for e in ("pdf", "png")} <= names
    assert all(p.stat().st_size > 0 for p in paths)


def test_fig4_points_follow_the_table_protocol(tmp_path: Path) -> None:
    from lipgnn.results.plotting import by_depth as _by_depth

    common = {"model": "gat", "norm": "lip", "dataset": "pubmed", "missing_rate": 100}
    for seed, test in enumerate([0.60, 0.64]):
        write_record(tmp_path, make_record("fig4", depth=5, seed=seed, best=(0.9, 0.7, test), **common))
        write_record(tmp_path, make_record("fig4", depth=5, lr=0.1, seed=seed, best=(0.9, 0.6, 0.99), **common))
    write_record(tmp_path, make_record("fig4", depth=10, seed=0, status="diverged", **common))
    runs = with_selected_metrics(load_records(tmp_path, "fig4"))
    points = _by_depth(runs)
    assert points.xs == [5.0] and points.means == pytest.approx([62.0])
    assert points.stds == pytest.approx([100 * math.sqrt(0.0008)])
    assert points.all_div == [10.0] and points.seeds == [2]
    assert points.point_runs == [4]     # both configurations' two seeds were compared at depth 5


def test_a_custom_variant_never_takes_the_papers_row_label(tmp_path: Path) -> None:
    record = make_record("table3", model="gat", norm="lip", residual=True, depth=15)
    record["config"]["norm"]["alpha"] = 2.0
    record["run_id"] = f"{config_key(record['config'])}-s0"
    write_record(tmp_path, record)
    write_record(tmp_path, make_record("table3", model="gat", norm="lip", residual=True, depth=15))
    assert sorted(load_records(tmp_path, "table3")["variant"]) == ["GAT-Lip-res", "GAT-Lip-res [norm.alpha=2.0]"]
    cell = _cell(build_cells(load_records(tmp_path, "table3"), TABLES["table3"]), "GAT-Lip-res", "Cora 15 layers")
    assert cell.n_runs == 1     # the custom run is not in the paper's row


def test_latex_captions_leave_the_table_number_to_latex(tmp_path: Path) -> None:
    make_tables(tmp_path)
    for name in ("table1", "table2", "table3"):
        caption = next(line for line in (tmp_path / "tables" / f"{name}.tex").read_text().splitlines()
                       if line.startswith(r"\caption{"))
        assert not caption.startswith(r"\caption{Table"), caption


def test_titles_say_mean_and_std_only_when_a_point_has_several_seeds(tmp_path: Path) -> None:
    from lipgnn.results.artifacts.lipschitznorm.fig4 import figure as fig4

    for norm in ("none", "lip"):
        write_record(tmp_path, make_record("fig4", model="gat", norm=norm, dataset="pubmed", missing_rate=100,
                                           depth=2))
    title = fig4(load_records(tmp_path, "fig4")).axes[0].get_title()
    assert "one seed per point" in title and "mean ± std" not in title
    labels = fig4(load_records(tmp_path, "fig4")).axes[0].get_legend_handles_labels()[1]
    assert "paper Table 1, GAT-Lip: 73.3 (15 layers)" in labels      # the paper's reference is drawn
    write_record(tmp_path, make_record("fig4", model="gat", norm="lip", dataset="pubmed", missing_rate=100,
                                       depth=2, seed=1))
    assert "mean ± std over seeds" in fig4(load_records(tmp_path, "fig4")).axes[0].get_title()


def test_a_figure_point_is_partial_against_its_declared_grid_not_the_fullest_point(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fig. 6's cpu grid puts 6 runs in each Cora and PubMed point (lr 0.005 and 0.001, seeds 0-2), and with
    PubMed at seed 0 only 2 in each PubMed point:
    with one run per point so far, every point is partial, although each is as full as the fullest."""
    from lipgnn.config import CONF_DIR
    from lipgnn.results.grid import declared_full
    from lipgnn.results.protocol import full_grid_size

    monkeypatch.setattr(grid, "CONF_DIR", Path(CONF_DIR))  # the project's own grids, not this module's empty one

    runs = pd.DataFrame([{"experiment": "fig6", "budget": "cpu", "dataset": "cora", "variant": v, "depth": d}
                         for v in ("GAT", "GAT-Lip") for d in (2, 10)])
    keys = ["dataset", "variant", "depth"]
    assert full_grid_size(runs, keys) == 1
    assert declared_full(runs, "fig6", keys) == 6
    assert declared_full(runs.assign(dataset="pubmed"), "fig6", keys) == 6
    conf_with(monkeypatch, tmp_path, "fig6_cpu", pubmed_seed_0_only)  # each dataset counts its own sweeps
    assert declared_full(runs, "fig6", keys) == 6
    assert declared_full(runs.assign(dataset="pubmed"), "fig6", keys) == 2
    assert declared_full(runs.assign(experiment="adhoc"), "adhoc", keys) == 1  # no declared grid: the fullest


def test_declared_sweeps_are_those_of_the_experiments_own_records_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweeps an artifact counts come from the budgets its own experiment's records ran under: another
    experiment's budget adds nothing, ``budgets=`` narrows them, and fig4 counts each epoch budget's sweeps apart
    (200 epochs: lr x seeds 0-4, the main sweep; 1000 epochs: lr x dropout x seeds 0-4, an extra)."""
    from lipgnn.config import CONF_DIR
    from lipgnn.results.artifacts.lipschitznorm.fig4 import declared_runs
    from lipgnn.results.grid import declared_sweeps, expected_runs

    monkeypatch.setattr(grid, "CONF_DIR", Path(CONF_DIR))
    runs = pd.DataFrame([{"experiment": "fig4", "budget": "cpu"}, {"experiment": "fig6", "budget": "paper"}])
    names = [s.name for s in declared_sweeps(runs, "fig4")]
    assert names == ["grid/fig4_cpu.yaml", "grid/fig4_cpu.yaml extra[0]"]  # 200 epochs; the 1000-epoch extra
    assert declared_sweeps(runs, "fig4", budgets=("paper",)) == []
    assert [s.name for s in declared_sweeps(runs, "fig6")] == ["experiment/fig6.yaml"]  # the paper's design
    assert declared_sweeps(runs.iloc[0:0], "fig4") == [] and expected_runs(runs.iloc[0:0], "fig4") is None
    # 200 epochs: lr x seeds 0-4; 1000 epochs: lr x dropout x seeds 0-4 at every depth
    assert expected_runs(runs, "fig4", variant="GAT-Lip", depth=15) == 2 * 5 + 2 * 2 * 5
    assert declared_runs(runs, 200.0, "GAT-Lip", 15) == 2 * 5
    assert declared_runs(runs, 1000.0, "GAT-Lip", 15) == 2 * 2 * 5
    assert declared_runs(runs, 1000.0, "GAT-Lip", 10) == 2 * 2 * 5
    assert declared_runs(runs, 1000.0, "GAT-Lip") == 2 * 2 * 5  # the largest over depths
    assert declared_runs(runs, 7.0, "GAT-Lip") is None


def test_a_font_cache_without_matplotlibs_own_fonts_is_rebuilt_before_saving(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    """A cache written by another install lists no bundled fonts; math text would fall back silently."""
    import matplotlib
    from matplotlib import font_manager

    from lipgnn.results.plotting import ensure_bundled_fonts

    bundled = Path(matplotlib.get_data_path()).resolve() / "fonts" / "ttf"
    good = list(font_manager.fontManager.ttflist)
    assert ensure_bundled_fonts() is False  # a healthy cache is left alone
    stale = [f for f in good if Path(f.fname).resolve().parent != bundled]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", stale)
    monkeypatch.setattr(matplotlib, "get_cachedir", lambda: str(tmp_path))
    font_manager.fontManager._findfont_cached.cache_clear()
    with pytest.raises(ValueError):
        font_manager.findfont("cmr10", fallback_to_default=False)
    assert ensure_bundled_fonts() is True
    assert Path(font_manager.findfont("cmr10", fallback_to_default=False)).resolve().parent == bundled
    # As a fresh cache: the same fonts, matplotlib's own listed before the system's, so a family both
    # provide (DejaVu Sans) resolves to the bundled file, as the committed figures embed it.
    assert {f.fname for f in font_manager.fontManager.ttflist} == {f.fname for f in good}
    assert Path(font_manager.findfont("DejaVu Sans", fallback_to_default=False)).resolve().parent == bundled
    assert len(list(tmp_path.glob("fontlist-v*.json"))) == 1  # written back for later processes
