"""``python train.py`` end to end, as a user runs it (subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_TREES, files_under, run_cli


def test_help_lists_groups_and_examples(tmp_path: Path) -> None:
    out = run_cli(["--help"], tmp_path)
    assert out.returncode == 0
    assert "model: gat, gcn, gcnii, ggnn, gin, gt" in out.stdout
    assert "norm: layernorm, lip, none, pairnorm" in out.stdout
    assert "python train.py model=gat norm=lip" in out.stdout
    assert files_under(tmp_path) == []


def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    out = run_cli(["model=gt", "norm=lip", "depth=30", "--cfg", "job"], tmp_path)
    assert out.returncode == 0
    assert "depth: 30" in out.stdout and "name: gt" in out.stdout and "name: lip" in out.stdout
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(("args", "message"), [
    (["depth=0"], "depth=0 is invalid"),
    (["model=gcn", "norm=lip"], "norm=lip needs an attention model"),
    (["dataset.missing_rate=-1"], "missing_rate=-1 is invalid"),
    (["device=gpu7"], "device='gpu7' is unknown"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    out = run_cli(args, tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: ") and message in lines[0]
    assert files_under(tmp_path) == []


def test_unknown_group_value_lists_valid_ones(tmp_path: Path) -> None:
    out = run_cli(["model=transformer"], tmp_path)
    assert out.returncode != 0
    assert "Could not find 'model/transformer'" in out.stderr
    for name in ("gat", "gcn", "gt"):
        assert f"\t{name}\n" in out.stderr
    assert files_under(tmp_path) == []


def test_missing_dataset_is_one_line_naming_the_folder(tmp_path: Path) -> None:
    empty = tmp_path / "nodata"
    empty.mkdir()
    out = run_cli(["dataset=citeseer", f"dataset.root={empty}", "dataset.download=false",
                   f"dataset.cache_dir={tmp_path / 'cache'}"], tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert str(empty) in lines[0] and "ind.citeseer" in lines[0]
    assert not (tmp_path / "results").exists()


def test_a_run_writes_one_complete_record_and_a_summary_line(tmp_path: Path) -> None:
    out = run_cli([*TINY_TREES, "model=gat", "norm=lip", "train.epochs=3", "results_dir=res"], tmp_path)
    assert out.returncode == 0, out.stderr
    records = files_under(tmp_path / "res" / "runs")
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["status"] == "completed" and record["epochs_run"] == 3
    assert record["config"]["norm"]["name"] == "lip" and record["config"]["dataset"]["tree_depth"] == 2
    assert len(record["history"]["epoch"]) == 3
    assert f"[completed] {record['run_id']}" in out.stdout
    # nothing else is written: no Hydra outputs/ folder, no .hydra snapshot, no checkpoint left behind
    assert {p.relative_to(tmp_path).parts[0] for p in files_under(tmp_path)} == {"res"}
    assert not (tmp_path / "res" / "checkpoints").exists() or files_under(tmp_path / "res" / "checkpoints") == []
