"""``lipgnn verify``: committed records of every kind rerun through the run layer into a temporary folder; a record of
this code and machine reruns identically; another thread count is never "identical"; a difference is located and
weighed against its cell's seed spread and its tables and verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, TINY_TREES

from lipgnn.config import compose
from lipgnn.runs import run
from lipgnn.store import read_record, run_record_path, write_record
from lipgnn.verify import Impact, main, sample, verify

#: one cheap committed record of each job kind
ONE_OF_EACH = {"training": "fig6_nonlocal/gt-none-cora-L30-s1-ab0716bf39",
               "gh_depth": "gh_depth/san-none-cora-L64-s3-d02d2c124c",
               "energy": "gh_energy/san-preln-xavier-cora-raw-L2-s4-47f2a6090f",
               "kim": "kim_bounds/kim_bounds-pinf-n100-cpu-s1-feb43b9005"}


def test_one_committed_record_of_each_kind_reruns_into_a_temporary_folder(data_root: Path, tmp_path: Path) -> None:
    results = ROOT / "results"
    before = {name: (results / "runs" / f"{name}.json").read_bytes() for name in ONE_OF_EACH.values()}
    assert main([*ONE_OF_EACH.values(), "--results-dir", str(results), "--out", str(tmp_path), "--no-impact"]) == 0
    report = json.loads((tmp_path / "verify.json").read_text())
    assert [(r["record"], r["kind"]) for r in report["rows"]] == [(v, k) for k, v in ONE_OF_EACH.items()]
    for row in report["rows"]:
        assert row["outcome"] != "not rerun" and row["threads"]["rerun"] == (row["threads"]["record"] or 1)
        assert row["code"]["commits"] is not None  # the record's commit is in this checkout's history
    assert report["summary"]["rerun"] == 4 and "| `kim_bounds/" in (tmp_path / "verify.md").read_text()
    assert {name: (results / "runs" / f"{name}.json").read_bytes() for name in ONE_OF_EACH.values()} == before


def _fresh(tmp_path: Path) -> dict:
    return run(compose([*TINY_TREES, "train.epochs=3", "train.num_threads=1", f"results_dir={tmp_path}"]))


def test_a_record_of_this_code_reruns_identically_and_never_identical_at_another_thread_count(tmp_path: Path) -> None:
    record = read_record(run_record_path(tmp_path, "default", _fresh(tmp_path)["run_id"]))
    (same,) = verify([record], tmp_path, impact=False)
    assert same["outcome"] == "identical" and same["first_difference"] is None and same["machine"] == []
    (other,) = verify([record], tmp_path, threads=2, impact=False)
    assert other["threads"] == {"record": 1, "rerun": 2} and other["outcome"] != "identical"


def test_a_difference_is_located_and_weighed_against_the_seed_spread(tmp_path: Path) -> None:
    record = read_record(run_record_path(tmp_path, "default", _fresh(tmp_path)["run_id"]))
    for seed in (1, 2):  # the cell's other seeds
        run(compose([*TINY_TREES, "train.epochs=3", "train.num_threads=1", f"seed={seed}",
                     f"results_dir={tmp_path}"]))
    tampered = json.loads(json.dumps(record))
    tampered["history"]["loss"][1] += 1.0
    tampered["best"]["test"] = record["best"]["test"] + 0.5
    write_record(tmp_path, tampered)
    (row,) = verify([tampered], tmp_path)
    assert row["outcome"] == "different" and row["first_epoch"] == record["history"]["epoch"][1]
    assert row["machine"] == [] and row["cause"] in ("same code and machine", "code changed")  # code: a dirty tree
    assert row["metric"]["delta"] == pytest.approx(-0.5) and row["metric"]["seed_std"] is not None
    assert row["metric"]["in_spreads"] == pytest.approx(0.5 / row["metric"]["seed_std"])
    assert read_record(run_record_path(tmp_path, "default", record["run_id"])) == tampered  # not replaced


def test_replace_writes_the_rerun_over_the_record(tmp_path: Path) -> None:
    record = read_record(run_record_path(tmp_path, "default", _fresh(tmp_path)["run_id"]))
    tampered = {**record, "git_commit": record["git_commit"] + "-dirty"}
    write_record(tmp_path, tampered)
    assert main(["--dirty", "--results-dir", str(tmp_path), "--replace", "--no-impact"]) == 0
    assert read_record(run_record_path(tmp_path, "default", record["run_id"]))["git_commit"] == record["git_commit"]


def test_a_table_cell_changed_by_a_rerun_is_named() -> None:
    """A record of Table 2's selected Cora configuration (8 layers): its test accuracy moved changes the table."""
    impact = Impact(ROOT / "results")
    record = read_record(ROOT / "results" / "runs" / "table2" / "gat-lip-cora-m100-L8-s2-fa3f3811b3.json")
    assert impact.changes(record) == []  # the record itself changes nothing
    moved = {**record, "best": {**record["best"], "test": 0.0}}
    assert "table2: table cell" in impact.changes(moved)


def test_sample_picks_across_experiments_cheapest_first_within_the_budget() -> None:
    def rec(experiment: str, seconds: float, status: str = "completed") -> dict:
        return {"experiment": experiment, "run_id": f"{experiment}-{seconds}", "wall_time_s": seconds,
                "status": status}

    records = [rec("a", 2), rec("a", 4), rec("a", 1, "diverged"), rec("b", 20), rec("b", 6), rec("c", 1000)]
    # estimates (1.5 x wall + 10 s): a 13, 16, diverged 11.5; b 19, 40; c 1510
    assert [r["run_id"] for r in sample(records, 4, budget_s=200)] == ["a-2", "b-6", "a-4", "b-20"]
    assert [r["run_id"] for r in sample(records, 10, budget_s=45)] == ["a-2", "b-6", "a-1"]
