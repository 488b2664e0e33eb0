"""The failure map's artifact, from hand-built records: the pre-registered reading rule (fails below 50 %,
rescued only when the paired interval clears 0), partial points, the 200-epoch column from Table 3's grid, and
that the experiment's declared grid starts with the primary comparison's point."""

from __future__ import annotations

import pandas as pd
from omegaconf import OmegaConf

from lipgnn.results.artifacts.lipschitznorm import failure_map as fm
from lipgnn.store.records import flatten_record, records_frame

DEFAULTS = {"dropout": 0.6, "attn_dropout": 0.3}


def record(norm: str, test: float, seed: int, *, depth: int = 30, lr: float = 0.005, epochs: int = 1000,
           dropout: dict | None = None, experiment: str = "failure_map") -> dict:
    cfg = {"model": {"name": "gat", "hidden": 64, "heads": 1, "residual": False, **(dropout or DEFAULTS)},
           "norm": {"name": norm}, "dataset": {"name": "cora"}, "depth": depth, "seed": seed,
           "train": {"epochs": epochs, "lr": lr, "selection": "best_val", "scheduler": "none"},
           "budget": {"name": "cpu"}}
    point = {"epoch": 10, "train": 0.5, "val": test, "test": test}
    return {"run_id": f"{norm}-{depth}-{lr}-{epochs}-s{seed}", "experiment": experiment, "status": "completed",
            "config": cfg, "best": point, "last": point, "epochs_run": epochs,
            "history": {"grad_norms": [[1.0, 2.0e3 if norm == "none" else 0.5]]}}


def frame(gat: list[float], lip: list[float], **kw) -> pd.DataFrame:
    rows = [flatten_record(record("none", v, s, **kw)) for s, v in enumerate(gat)]
    rows += [flatten_record(record("lip", v, s, **kw)) for s, v in enumerate(lip)]
    return records_frame(rows)


def test_rescue_needs_gat_failing_lip_training_and_the_interval_above_zero() -> None:
    p = fm.primary(frame([0.30, 0.31, 0.29, 0.32, 0.30], [0.70, 0.72, 0.69, 0.71, 0.70]))
    assert p is not None and p.gat_fails and not p.lip_fails and p.rescued
    assert fm.PRIMARY == {"depth": 30, "lr": 0.005, "dropout": "authors'"}
    assert p.grad_gat == 2.0e3 and p.grad_lip == 1.0
    # GAT-Lip above 50 % on average, but one seed below GAT: the paired interval holds 0, so no rescue.
    p = fm.primary(frame([0.30, 0.31, 0.29, 0.32, 0.45], [0.95, 0.90, 0.29, 0.31, 0.30]))
    assert p is not None and p.gat_fails and not p.lip_fails and not p.rescued
    # GAT at 50 % or more trains: nothing to rescue, whatever GAT-Lip does.
    p = fm.primary(frame([0.50, 0.52, 0.51, 0.53, 0.50], [0.80, 0.81, 0.79, 0.82, 0.80]))
    assert p is not None and not p.gat_fails and not p.rescued


def test_partial_points_are_not_read() -> None:
    df = frame([0.30, 0.31], [0.70, 0.72])
    p = fm.primary(df)
    assert p is not None and not p.complete
    assert "partial (2 paired seeds)" in fm.report(df)["failure_map"]
    assert fm.claims(df)[0].verdict == "not run"


def test_the_200_epoch_column_comes_from_table3_records_and_the_sentence_names_the_points() -> None:
    long = frame([0.30, 0.31, 0.29, 0.32, 0.30], [0.70, 0.72, 0.69, 0.71, 0.70])
    short = frame([0.75, 0.74, 0.76, 0.73, 0.75], [0.74, 0.76, 0.75, 0.74, 0.73], epochs=200, experiment="table3")
    df = pd.concat([long, short], ignore_index=True)
    text = fm.report(df)["failure_map"]
    row = next(line for line in text.splitlines() if line.startswith("| 30 | 0.005 | authors'"))
    assert "30.4" in row and "74.6" in row and "both train" in row
    sentence = fm.verdict_sentence(df)
    assert "rescues it at: 30 layers, lr 0.005, dropout authors'" in sentence
    assert "1 of 8 points read" in sentence
    assert "changes the reading at 30 layers, lr 0.005, dropout authors' (both train at 200" in fm.budget_sentence(df)


def test_the_declared_grid_launches_the_primary_point_first() -> None:
    grid = OmegaConf.load("conf/grid/failure_map_cpu.yaml").hydra.sweeper.params
    first = {key: str(value).split(",")[0] for key, value in grid.items()}
    assert first["depth"] == "30" and first["train.lr"] == "0.005" and first["dropout"] == "default"
    experiment = OmegaConf.load("conf/experiment/failure_map.yaml")
    assert experiment.train.epochs == 1000 and experiment.train.early_stopping == 0


def test_the_primary_claim_is_read_on_the_reproduction_scale_against_the_papers_effect() -> None:
    (claim,) = fm.claims(frame([0.30, 0.31, 0.29, 0.32, 0.30], [0.70, 0.72, 0.69, 0.71, 0.70]))
    assert claim.verdict == "reproduces" and claim.scale is not None and claim.scale.paper == fm.paper_effect(30)
    (claim,) = fm.claims(frame([0.60, 0.61, 0.59, 0.62, 0.60], [0.62, 0.63, 0.61, 0.64, 0.62]))
    assert claim.verdict == "smaller than reported"
    # Both arms within ten points of Cora's majority class: never decisive.
    (claim,) = fm.claims(frame([0.30, 0.31, 0.29, 0.32, 0.30], [0.36, 0.37, 0.35, 0.38, 0.36]))
    assert claim.verdict == "not comparable" and "floor" in claim.evidence


def test_pubmeds_second_point_is_chosen_on_cora_validation_never_on_test() -> None:
    """The secondary PubMed point is the Cora 30-layer point where GAT's mean validation accuracy is best; a point
    with a better test but a worse validation score is not chosen."""
    rows = []
    none = {"dropout": 0.0, "attn_dropout": 0.0}
    for seed in range(3):
        for lr, dropout, val, test in ((0.005, None, 0.40, 0.80), (0.001, none, 0.70, 0.60)):
            for norm in ("none", "lip"):
                rec = record(norm, test, seed, lr=lr, dropout=dropout)
                rec["best"] = {**rec["best"], "val": val}
                rows.append(flatten_record(rec))
    df = records_frame(rows)
    chosen = fm.best_gat_point(df)
    assert chosen is not None and (chosen.lr, chosen.dropout) == (0.001, "none")
    tags = {p.label: what for what, p in fm.secondary_points(df) if p.dataset == "pubmed"}
    assert tags["30 layers, lr 0.001, dropout none"] == "PubMed, GAT's best Cora validation point"
    assert tags["30 layers, lr 0.005, dropout authors'"] == "PubMed, the paper's defaults"


def test_the_residual_rows_pair_gat_res_with_gat_lip_res() -> None:
    rows = []
    for seed, (res, lip_res) in enumerate(((0.60, 0.70), (0.61, 0.72), (0.62, 0.71))):
        for norm, value in (("none", res), ("lip", lip_res)):
            rec = record(norm, value, seed)
            rec["config"]["model"]["residual"] = True
            rows.append(flatten_record(rec))
    df = records_frame(rows)
    (residual,) = [p for what, p in fm.secondary_points(df) if what == "Cora, residual" and p.diff.n]
    assert residual.arms == ("GAT-res", "GAT-Lip-res") and residual.diff.n == 3
    assert abs(residual.diff.mean - 0.10) < 1e-9
    table = fm.secondary_table(fm.secondary_points(df))
    assert "GAT-res 61.0" in table and "+5.9 (63.5 vs 69.4)" in table


def test_the_block_names_the_commit_and_cpu_of_every_record() -> None:
    rows = []
    for seed in range(2):
        rec = record("none", 0.3, seed)
        rec["git_commit"] = "aaaaaaa1"
        rows.append(flatten_record(rec))
        rec = record("lip", 0.7, seed)
        rec["git_commit"] = "bbbbbbb2"
        rec["numerics"] = {"cpu": {"model": "Some CPU", "simd_flags": ["avx", "avx2", "avx512f"]}}
        rec["config"]["train"]["num_threads"] = 1
        rows.append(flatten_record(rec))
    df = records_frame(rows)
    sentence = fm.machines_sentence(df)
    assert "2 at commit `aaaaaaa` on CPU not recorded" in sentence
    assert "2 at commit `bbbbbbb` on Some CPU, AVX-512" in sentence
    no_avx512 = {"numerics": {"cpu": {"model": "Other", "simd_flags": ["avx2"]}}}
    from lipgnn.store.records import cpu_label

    assert cpu_label(no_avx512) == "Other, AVX2" and cpu_label({}) is None
