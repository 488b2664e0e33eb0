"""Run records through W&B: a ``logger=wandb`` run uploads the record's exact bytes, and ``lipgnn pull-wandb``
(``lipgnn.results.wandb_records``) brings them back into a results folder. No network here: the upload is checked
in W&B's offline run folder, the pull against an object with the public API's shape (``runs`` → ``files`` →
``download``), fed with records this code wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import TINY_TREES, compose_cfg

from lipgnn.cli import main as lipgnn_main
from lipgnn.results.wandb_records import PullError, describe, pull_records
from lipgnn.runs import run
from lipgnn.store import record_text, run_record_path, write_record
from lipgnn.train.loggers import RECORD_FILE


def test_a_wandb_run_uploads_the_bytes_of_its_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    record = run(compose_cfg([*TINY_TREES, "logger=wandb", "train.epochs=2", f"results_dir={tmp_path}",
                              "logger.project=lipgnn-test", "experiment_name=pulled"]))
    local = run_record_path(tmp_path, "pulled", record["run_id"])
    (uploaded,) = (tmp_path / "wandb").glob(f"offline-run-*/files/{RECORD_FILE}")
    assert uploaded.read_bytes() == local.read_bytes()


# ---------------------------------------------------------------------------------------------- the pull
class FakeFile:
    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    def download(self, root: str = ".", replace: bool = False) -> None:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / self.name).write_text(self.text, encoding="utf-8")


class FakeRun:
    def __init__(self, job_type: str, files: dict[str, str]) -> None:
        self.job_type = job_type
        self._files = [FakeFile(name, text) for name, text in files.items()]

    def files(self, names: list[str] | None = None) -> list[FakeFile]:
        return [f for f in self._files if not names or f.name in names]


class FakeApi:
    """Runs oldest first, as ``wandb.Api().runs`` lists them by default (``order="+created_at"``)."""

    def __init__(self, runs: list[FakeRun]) -> None:
        self._runs, self.asked = runs, []

    def runs(self, path: str) -> list[FakeRun]:
        self.asked.append(path)
        return self._runs


def _record(run_id: str, experiment: str = "table3", status: str = "completed", test: float = 0.5) -> dict:
    return {"run_id": run_id, "experiment": experiment, "status": status, "seed": 0, "config": {"depth": 2},
            "history": {"loss": [1.0, 0.5]}, "best": {"val": 0.4, "test": test, "epoch": 2},
            "last": {"test": test}}


def _wandb_run(record: dict, job_type: str | None = None) -> FakeRun:
    return FakeRun(job_type or record["experiment"], {"output.log": "x", RECORD_FILE: record_text(record)})


def test_pull_writes_new_records_with_the_bytes_the_run_wrote(tmp_path: Path) -> None:
    original = tmp_path / "cluster"
    path = write_record(original, _record("gat-a"))
    api = FakeApi([_wandb_run(_record("gat-a")), _wandb_run(_record("gat-b", "fig2"))])
    counts = pull_records("team/lipgnn", tmp_path / "results", api=api)
    assert api.asked == ["team/lipgnn"]
    assert counts["new"] == 2 and sum(counts.values()) == 2
    assert run_record_path(tmp_path / "results", "table3", "gat-a").read_bytes() == path.read_bytes()
    assert run_record_path(tmp_path / "results", "fig2", "gat-b").exists()
    # Pulling again changes nothing.
    again = pull_records("team/lipgnn", tmp_path / "results", api=api)
    assert again["unchanged"] == 2 and again["new"] == again["replaced"] == 0


def test_pull_keeps_the_newest_attempt_of_a_rerun(tmp_path: Path) -> None:
    api = FakeApi([_wandb_run(_record("gat-a", test=0.1)), _wandb_run(_record("gat-a", test=0.9))])
    counts = pull_records("team/lipgnn", tmp_path, api=api)
    assert counts["new"] == 1 and counts["older attempt"] == 1
    assert '"test": 0.9' in run_record_path(tmp_path, "table3", "gat-a").read_text()


def test_pull_never_silently_replaces_a_local_result(tmp_path: Path) -> None:
    write_record(tmp_path, _record("gat-a", test=0.3))
    write_record(tmp_path, _record("gat-b", status="failed"))
    api = FakeApi([_wandb_run(_record("gat-a", test=0.7)), _wandb_run(_record("gat-b"))])
    counts = pull_records("team/lipgnn", tmp_path, api=api)
    # A differing local record stays; a failed one is replaced by the finished run.
    assert counts["kept local"] == 1 and counts["replaced"] == 1
    assert '"test": 0.3' in run_record_path(tmp_path, "table3", "gat-a").read_text()
    assert '"status": "completed"' in run_record_path(tmp_path, "table3", "gat-b").read_text()
    assert "--overwrite replaces them" in describe(counts, tmp_path)
    counts = pull_records("team/lipgnn", tmp_path, api=api, overwrite=True)
    assert counts["replaced"] == 1 and counts["unchanged"] == 1
    assert '"test": 0.7' in run_record_path(tmp_path, "table3", "gat-a").read_text()


def test_pull_skips_what_is_not_a_record_of_the_asked_experiment(tmp_path: Path) -> None:
    runs = [
        FakeRun("table3", {"output.log": "x"}),  # a W&B run without a record (not a lipgnn run, or an old one)
        FakeRun("table3", {RECORD_FILE: "{not json"}),
        FakeRun("table3", {RECORD_FILE: '{"hello": 1}'}),
        _wandb_run(_record("gat-c", "fig2")),
        _wandb_run(_record("gat-d", "fig2"), job_type="table3"),  # job type says table3, the record says fig2
        _wandb_run(_record("gat-e", "default")),
        _wandb_run(_record("gat-a")),
    ]
    counts = pull_records("team/lipgnn", tmp_path, "table3", api=FakeApi(runs))
    assert (counts["no record file"], counts["unreadable"], counts["other experiment"], counts["new"]) == (1, 2, 3, 1)
    assert [p.name for p in tmp_path.rglob("*.json")] == ["gat-a.json"]
    # Without --experiment, ad-hoc runs stay out of results/ as train.py keeps them out.
    counts = pull_records("team/lipgnn", tmp_path / "all", api=FakeApi(runs))
    assert counts["ad-hoc run"] == 1 and counts["new"] == 3
    assert "--experiment default --results-dir outputs" in describe(counts, tmp_path)
    assert pull_records("team/lipgnn", tmp_path / "adhoc", "default", api=FakeApi(runs))["new"] == 1


@pytest.mark.parametrize("project", ["lipgnn", "team/", "/lipgnn", "a/b/c"])
def test_a_project_path_that_is_not_entity_slash_project_is_refused(tmp_path: Path, project: str) -> None:
    with pytest.raises(PullError, match="must be written entity/project"):
        pull_records(project, tmp_path, api=FakeApi([]))


def test_the_cli_says_in_one_line_when_wandb_cannot_be_reached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from lipgnn.results import wandb_records

    class Unreachable:
        def runs(self, path: str) -> list:
            raise ConnectionError("Max retries exceeded with url: /graphql\n(Caused by NameResolutionError)")

    monkeypatch.setattr(wandb_records, "_api", Unreachable)
    assert lipgnn_main(["pull-wandb", "team/lipgnn", "--results-dir", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot list the runs of W&B project team/lipgnn") and err.count("\n") == 1
    assert "wandb login" in err and not (tmp_path / "res").exists()

    monkeypatch.setattr(wandb_records, "_api", lambda: FakeApi([_wandb_run(_record("gat-a"))]))
    assert lipgnn_main(["pull-wandb", "team/lipgnn", "--results-dir", str(tmp_path / "res")]) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'res'}: 1 new"
    shutil.rmtree(tmp_path / "res")


def test_a_pull_that_loses_the_network_midway_writes_nothing(tmp_path: Path) -> None:
    class Broken(FakeFile):
        def download(self, root: str = ".", replace: bool = False) -> None:
            raise ConnectionError("Read timed out.")

    runs = [_wandb_run(_record("gat-a")), FakeRun("table3", {}), _wandb_run(_record("gat-b"))]
    runs[1]._files = [Broken(RECORD_FILE, "")]
    with pytest.raises(PullError, match="lost W&B while reading run 1 of team/lipgnn: Read timed out.; nothing was"):
        pull_records("team/lipgnn", tmp_path / "res", api=FakeApi(runs))
    assert not (tmp_path / "res").exists()
