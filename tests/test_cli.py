"""``python train.py`` end to end, as a user runs it (subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_TREES, compose_cfg, files_under, run_cli


def test_help_lists_groups_and_examples(tmp_path: Path) -> None:
    out = run_cli(["--help"], tmp_path)
    assert out.returncode == 0
    # Hydra lists the typed schemas (base_*) of each group beside its options.
    (models,) = [line for line in out.stdout.splitlines() if line.startswith("model: ")]
    assert {"gat", "gcn", "gcnii", "ggnn", "gin", "gt", "san", "pyg_stack"} <= set(models[7:].split(", "))
    assert "norm: base_layernorm, base_lip, base_norm, base_pairnorm, layernorm, lip, none, pairnorm" in out.stdout
    assert "python train.py model=gat norm=lip" in out.stdout
    assert files_under(tmp_path) == []


def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    out = run_cli(["model=gt", "norm=lip", "depth=30", "--cfg", "job"], tmp_path)
    assert out.returncode == 0
    assert "depth: 30" in out.stdout and "name: gt" in out.stdout and "name: lip" in out.stdout
    # resolved: where the record goes, not the ${results_root:...} interpolation
    assert "results_dir: outputs" in out.stdout and "${" not in out.stdout
    assert files_under(tmp_path) == []


def test_where_prints_the_record_checkpoint_and_data_paths_without_running(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from lipgnn.config import compose
    from lipgnn.identity import run_id

    args = ["experiment=table3", "depth=15", "seed=2", f"dataset.root={tmp_path / 'data'}"]
    out = run_cli(["--where", *args], tmp_path)
    assert out.returncode == 0, out.stderr
    rid = run_id(OmegaConf.to_container(compose(args), resolve=True))
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines())
    assert lines["record"].strip() == f"results/runs/table3/{rid}.json"
    assert lines["checkpoint"].strip() == f"results/checkpoints/table3/{rid}/checkpoint.ckpt"
    assert lines["data root"].split()[0] == str(tmp_path / "data")
    assert files_under(tmp_path) == []
    bad = run_cli(["--where", "depth=0"], tmp_path)
    assert bad.returncode == 2 and "depth=0 is out of range" in bad.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["depth=0"], "depth=0 is out of range"),
    (["model=gcn", "norm=lip"], "norm=lip needs an attention model"),
    (["dataset.missing_rate=-1"], "missing_rate=-1.0 is out of range"),
    (["device=gpu7"], "device='gpu7' is unknown"),
    (["overwrite=no"], "overwrite='no' is not a boolean"),
    (["+model.foo=3"], "model.foo is not a config key"),
    (["hydra/launcher=slurm"], "needs a SLURM cluster"),
    # Every job of a sweep is checked before the first one starts.
    (["-m", "dataset=trees", "train.lr=0.01,-1"], "train.lr=-1.0 is out of range"),
    (["dataset=trees", "results_dir=blocker/res"], "results_dir=blocker/res is not writable"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "blocker").write_text("")  # a file where results_dir wants a folder
    # An empty PATH: no sbatch, whatever this machine has installed (python is started by its full path).
    out = run_cli(args, tmp_path, env={"PATH": ""})
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: ") and message in lines[0]
    assert files_under(tmp_path) == [tmp_path / "blocker"]


def test_unknown_group_value_lists_valid_ones(tmp_path: Path) -> None:
    out = run_cli(["model=transformer"], tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("error: In 'config': Could not find 'model/transformer'; available: gat, gcn, ")
    assert out.stderr.count("\n") == 1 and "base_model" not in out.stderr
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


def test_summarize_gives_mean_and_std_per_configuration_and_a_curves_png(tmp_path: Path, capsys) -> None:
    import csv

    from omegaconf import OmegaConf

    from lipgnn.cli import main
    from lipgnn.identity import run_id
    from lipgnn.store import write_record

    for norm, seed, test in (("none", 0, 0.30), ("none", 1, 0.40), ("lip", 0, 0.70), ("lip", 1, 0.80)):
        config = OmegaConf.to_container(compose_cfg(["model=gat", f"norm={norm}", f"seed={seed}"]), resolve=True)
        history = {"epoch": [1, 2], "val": [0.1, 0.2], "test": [0.1, test], "train": [0.1, 0.2], "loss": [1, 1]}
        write_record(tmp_path, {"run_id": run_id(config), "experiment": "mysweep", "status": "completed",
                                "config": config, "seed": seed, "history": history,
                                "best": {"epoch": 2, "val": 0.2, "test": test}, "last": {"epoch": 2, "test": test}})
    assert main(["summarize", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "summary" / "summary.csv").open()))
    by_norm = {row["norm"]: row for row in rows}
    assert len(rows) == 2 and by_norm["none"]["runs"] == "2"
    # Hand-computed: mean 35.0, sample std of (30, 40) = 7.07...
    assert by_norm["none"]["test @ best val (%)"] == "35.0 ± 7.1" and by_norm["lip"]["last test (%)"] == "75.0 ± 7.1"
    assert by_norm["lip"]["differs in"] == "norm.alpha=1.0, norm.formula=paper"
    # a real Markdown table: a header row, its |---| rule, one row per configuration
    markdown = (tmp_path / "summary" / "summary.md").read_text().splitlines()
    assert markdown[0].startswith("| experiment") and set(markdown[1]) <= set("|:- ") and len(markdown) == 4
    assert (tmp_path / "summary" / "curves.png").stat().st_size > 0
    assert main(["summarize", str(tmp_path / "empty")]) == 2


def test_summarize_shows_integers_as_integers(tmp_path: Path) -> None:
    """identity_config makes every number a float; the table shows the values as the config wrote them."""
    import csv

    from omegaconf import OmegaConf

    from lipgnn.cli import main
    from lipgnn.identity import run_id
    from lipgnn.store import write_record

    for depth, epochs in ((10, 12), (30, 12), (30, 20)):
        config = OmegaConf.to_container(compose_cfg(["model=gat", f"depth={depth}", f"train.epochs={epochs}"]),
                                        resolve=True)
        write_record(tmp_path, {"run_id": run_id(config), "experiment": "mysweep", "status": "completed",
                                "config": config, "seed": 0, "history": {"epoch": [1], "test": [0.5]},
                                "best": {"epoch": 1, "val": 0.5, "test": 0.5}, "last": {"epoch": 1, "test": 0.5}})
    assert main(["summarize", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "summary" / "summary.csv").open()))
    assert sorted((row["depth"], row["differs in"], row["test @ best val (%)"]) for row in rows) == [
        ("10", "train.epochs=12", "50.0"), ("30", "train.epochs=12", "50.0"), ("30", "train.epochs=20", "50.0")]
    assert ".0" not in (tmp_path / "summary" / "summary.md").read_text().replace("50.0", "")
