"""The run layer (lipgnn.runs): every job kind goes through one path, keeps the committed records' ids and
computes what the committed records hold."""

from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from lipgnn.config import compose
from lipgnn.errors import ConfigError, RunInProgress
from lipgnn.runs import job_id, job_kind, run
from lipgnn.runs.layer import run_lock

#: every experiment whose records no training sweep of train.py wrote before the run layer, and its kind
KINDS = {"gh_collapse": "gh_collapse", "gh_depth": "gh_depth", "gh_energy": "energy", "depth_energy": "training",
         "kim_bounds": "kim", "kim_divergence": "kim", "kim_invertibility": "kim", "lip_estimates": "kim"}
#: a cheap unit of work: kim_invertibility with a batch of 4 and 3 iterations
CHEAP_KIM = ["experiment=kim_invertibility", "kim.unit=l2-c0.5", "kim.batch=4", "kim.iters=3"]


def _committed(experiment: str) -> set[str]:
    return {path.stem for path in (ROOT / "results" / "runs" / experiment).glob("*.json")}


@pytest.mark.parametrize("experiment", sorted(KINDS))
def test_each_experiment_declares_its_kind(experiment: str) -> None:
    assert job_kind(compose([f"experiment={experiment}"])).name == KINDS[experiment]


def test_exactly_one_module_writes_run_records() -> None:
    """write_record / write_failure_record (lipgnn.store) are called by the run layer only; the W&B pull and
    the id migration, which copy existing records, write through its import_record (the same lock and writer)."""
    tools = {"lipgnn/store/__init__.py"}
    callers = set()
    for path in [*sorted((ROOT / "lipgnn").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py")), ROOT / "train.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("write_record", "write_failure_record"):
                    callers.add(str(path.relative_to(ROOT)))
    assert callers - tools == {"lipgnn/runs/layer.py"}


def test_no_kind_branches_on_an_experiment_name() -> None:
    """A kind is plumbing: what an experiment computes registers itself where its science lives
    (lipgnn.lipschitz.experiments for the kim kind), so no module of the run layer names an experiment (a kind may
    share its own name with one)."""
    from lipgnn.runs.registry import KINDS

    job_kind("training")  # registers the suite's kinds
    experiments = {path.stem for path in (ROOT / "conf" / "experiment").glob("*.yaml")} - set(KINDS)
    assert {"kim_bounds", "lip_estimates", "gh_energy"} <= experiments
    for path in sorted((ROOT / "lipgnn" / "runs").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)} & experiments
        assert not named, f"{path.relative_to(ROOT)} names the experiment(s) {sorted(named)}"


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^kind=nope is not a job kind; use one of: energy, gh_collapse, gh_depth, "
                                          r"kim, training$"):
        run(compose(["kind=nope", "train.epochs=1"]))


def test_training_needs_an_epoch_and_other_kinds_do_not(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"train.epochs=0 trains nothing"):
        run(compose(["model=gcn", "train.epochs=0", f"results_dir={tmp_path}"]))
    assert not (tmp_path / "runs").exists()
    record = run(compose([*CHEAP_KIM, "train.epochs=0", f"results_dir={tmp_path}"]))
    assert record["status"] == "completed" and len(record["diagnostics"]["errors"]) == 3


def test_a_unit_is_skipped_when_done_and_locked_while_running(tmp_path: Path) -> None:
    cfg = compose([*CHEAP_KIM, f"results_dir={tmp_path}"])
    first = run(cfg)
    assert first["run_id"] == job_id(cfg) and first["config"]["batch"] == 4 and len(first["diagnostics"]["errors"]) == 3
    assert run(cfg)["skipped"] is True
    again = compose([*CHEAP_KIM, f"results_dir={tmp_path}", "overwrite=true"])
    with run_lock(tmp_path, "kim_invertibility", job_id(cfg)), \
            pytest.raises(RunInProgress, match="is being run by another process"):
        run(again)
    assert run(again).get("skipped") is None


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("overrides", [["dataset=pyg", "dataset.cls=NotAClass"],
                                       ["dataset=pyg", "dataset.cls=os.system"], ["dataset.root=<file>"]])
def test_a_bad_dataset_value_is_one_line_and_writes_nothing(tmp_path: Path, overrides: list[str]) -> None:
    """The dataset is checked before the run's lock: a refused run leaves no lock file, record or folder."""
    from lipgnn.errors import LipgnnError

    regular = tmp_path / "a-file"
    regular.write_text("not a folder")
    results = tmp_path / "res"
    cfg = compose(["model=gcn", "train.epochs=1", f"results_dir={results}",
                   *(o.replace("<file>", str(regular)) for o in overrides)])
    with pytest.raises(LipgnnError) as refused:
        run(cfg)
    assert "\n" not in str(refused.value) and ("dataset.cls" in str(refused.value) or "is a file" in str(refused.value))
    assert not results.exists()


def test_the_lock_file_is_removed_when_its_run_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Completed, failed (an exception in the job) or refused (a dataset missing at load time): locks/ keeps no file
    of a run that ended, so it does not grow by one file per run id."""
    from lipgnn.errors import DatasetNotFoundError

    cfg = compose([*CHEAP_KIM, f"results_dir={tmp_path}"])
    run(cfg)
    kind = job_kind(cfg)
    monkeypatch.setattr(type(kind), "compute", lambda self, job: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run(compose([*CHEAP_KIM, "seed=1", f"results_dir={tmp_path}"]))

    def missing(self: Any, job: Any) -> None:
        raise DatasetNotFoundError("Cora not found")

    monkeypatch.setattr(type(kind), "compute", missing)
    with pytest.raises(DatasetNotFoundError):
        run(compose([*CHEAP_KIM, "seed=2", f"results_dir={tmp_path}"]))
    assert [f for f in _files(tmp_path) if f.startswith("locks")] == []
    assert [f.rsplit("-", 2)[-2] for f in _files(tmp_path / "runs")] == ["s0", "s1"]  # the failure record of s1


def test_a_unit_not_in_the_budget_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"kim.unit=l2-c0.3 is not a unit of kim_invertibility at budget=cpu; use "
                                          r"one of: l2-c0.5, l2-c0.7"):
        run(compose(["experiment=kim_invertibility", "kim.unit=l2-c0.3"]))


@pytest.mark.parametrize(("argv", "message"), [
    (["-m", "experiment=kim_invertibility", "kim.unit=l2-c0.5,l2-c0.3"], r"kim.unit=l2-c0.3 is not a unit"),
    (["-m", "model=gcn", "train.epochs=1,0"], r"train.epochs=0 trains nothing"),
])
def test_a_sweep_stops_before_launching_on_a_jobs_kind_check(argv: list[str], message: str) -> None:
    """train.py -m checks every job with its kind's own rules before Hydra launches any, as a single run does."""
    from lipgnn.sweep import check_command_line

    with pytest.raises(ConfigError, match=message):
        check_command_line(argv)


def test_sweep_status_lists_a_kinds_jobs_by_their_ids() -> None:
    from lipgnn.sweep import sweep_status

    status = sweep_status("kim_invertibility", ROOT / "results", ["budget=cpu"])
    assert len(status.rows) == 27 and {state for _, state in status.rows} == {"completed"}
    assert status.outside == []


def test_summarize_reads_every_kinds_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lipgnn.cli import main

    for experiment in KINDS:
        folder = tmp_path / "runs" / experiment
        folder.mkdir(parents=True)
        for path in sorted((ROOT / "results" / "runs" / experiment).glob("*.json"))[:2]:
            shutil.copy(path, folder / path.name)
    assert main(["summarize", str(tmp_path), "--out", str(tmp_path / "summary")]) == 0
    import pandas as pd

    table = pd.read_csv(tmp_path / "summary" / "summary.csv")
    assert set(table["experiment"]) == set(KINDS)  # every kind's records listed, none dropped


def _grid(experiment: str) -> set[str]:
    """The ids of every job of the experiment's cpu sweep (its main sweep and every extra one)."""
    from lipgnn.sweep import expand_sweep

    return {job_id(cfg) for cfg in expand_sweep(experiment, ["budget=cpu"])}


@pytest.mark.slow
@pytest.mark.parametrize("experiment", sorted(KINDS))
def test_the_cpu_grid_produces_every_committed_record_id(experiment: str) -> None:
    committed = _committed(experiment)
    outside = committed - _grid(experiment)
    assert committed and not outside, f"{len(outside)} committed {experiment} records outside its cpu grid"


#: epochs of a training history compared number for number against a record made on another CPU: float32 rounding
#: that differs with the instruction set compounds over training (a few parts in a million by epoch 12 between an
#: AVX2 and an AVX-512 host, 1.5e-4 by epoch 39), so later epochs and the trained model's numbers are compared in
#: structure only; ``lipgnn verify`` is the tool that says whether a record reproduces on this machine.
EXACT_EPOCHS = 10


def _close(new: Any, old: Any, where: str = "", *, numbers: bool = True) -> None:
    """Equal structure; numbers within float rounding where ``numbers`` (the committed records ran on another CPU),
    else of the same type and finiteness."""
    if isinstance(old, dict):
        assert set(new) == set(old), where
        for key in old:
            _close(new[key], old[key], f"{where}.{key}", numbers=numbers)
    elif isinstance(old, list):
        assert len(new) == len(old), where
        history = where.startswith("history")
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            _close(a, b, f"{where}[{i}]", numbers=numbers and not (history and i >= EXACT_EPOCHS))
    elif isinstance(old, float) and not math.isinf(old):
        if numbers:
            assert new == pytest.approx(old, rel=1e-4, abs=1e-9), where
        else:
            assert isinstance(new, float) and math.isfinite(new) == math.isfinite(old), where
    elif numbers or not isinstance(old, int | float) or isinstance(old, bool):
        assert new == old, where
    else:
        assert isinstance(new, int | float), where


@pytest.mark.parametrize(("experiment", "overrides", "keys"), [
    ("gh_energy", ["dataset=cora", "depth=2", "seed=0", "variant=san_preln", "model.init=xavier"], ("diagnostics",)),
    ("kim_bounds", ["kim.unit=pinf-n100", "seed=0"], ("diagnostics",)),
    ("lip_estimates", ["budget=cpu", "kim.unit=gat_lip-L2", "seed=0"], ("diagnostics",)),
    ("gh_depth", ["budget=cpu", "dataset=cora", "depth=2", "seed=0", "variant=san_preln", "log.progress=false"],
     ("history", "best", "last", "epochs_run", "diagnostics")),
])
def test_the_run_layer_recomputes_a_committed_unit_of_each_kind(experiment: str, overrides: list[str],
                                                                keys: tuple[str, ...], tmp_path: Path,
                                                                data_root: Path) -> None:
    """The run layer, given ``experiment=<x> ...`` (what ``python train.py`` hands it; the command line itself is
    tested in tests/test_sweep.py), writes the committed record's run id and numbers into a temporary results
    folder: the energy kind, a kim unit (Kim et al.'s App. I ascent at N = 100), and a 2-layer gh_depth run
    (100 epochs)."""
    run(compose([f"experiment={experiment}", *overrides, f"results_dir={tmp_path}", "log.progress=false"]))
    (path,) = (tmp_path / "runs" / experiment).glob("*.json")
    old = json.loads((ROOT / "results" / "runs" / experiment / path.name).read_text())
    new = json.loads(path.read_text())
    for key in keys:
        if key == "diagnostics":
            new[key].pop("train_time_s", None), old[key].pop("train_time_s", None)
        # A trained model's numbers follow its whole history: compared in structure only (EXACT_EPOCHS).
        _close(new[key], old[key], key, numbers=key == "history" or "history" not in keys)


def test_gh_depth_jobs_train_on_the_data_layers_random_split_with_their_variants_schedule(data_root: Path) -> None:
    """gh_depth's cpu grid pairs each SAN variant with its learning-rate schedule (Pre-LN lr 1e-3 without warm-up;
    Post-LN and nonlocal 1e-4 after a warm-up) and trains on the data layer's random 60/20/20 split."""
    from lipgnn.data import load
    from lipgnn.data.splits import random_split
    from lipgnn.sweep import sweep_jobs

    jobs = {tuple(sorted(job)) for job in sweep_jobs("gh_depth", ["budget=cpu", "depth=2", "seed=1"])}
    schedules = set()
    for job in jobs:
        cfg = compose(list(job))
        schedules.add((str(cfg.model.layer_norm), bool(cfg.model["nonlocal"]), int(cfg.train.epochs),
                       float(cfg.train.lr), int(cfg.train.warmup_epochs)))
    assert schedules == {(ln, nl, epochs, lr, warmup) for epochs, warmup in ((100, 20), (500, 50), (1000, 100))
                         for ln, nl, lr, warmup in (("pre", False, 1e-3, 0), ("post", False, 1e-4, warmup),
                                                    ("post", True, 1e-4, warmup))}
    cfg = compose(["experiment=gh_depth", "budget=cpu", "variant=san_nonlocal", "depth=2", "seed=1"])
    assert (cfg.dataset.split, cfg.dataset.train_per_class, cfg.train.weight_decay) == ("random", None, 5e-4)
    (data,) = list(load(cfg.dataset, 1).eval_batches())
    expected = random_split(data.y, "cora", 1, train_per_class=None, train_fraction=0.6, val_fraction=0.2,
                            test_fraction=0.2)
    for mask, want in zip((data.train_mask, data.val_mask, data.test_mask), expected, strict=True):
        assert mask.equal(want)
    assert [int(m.sum()) for m in expected] == [1625, 542, 541]


def test_the_layer_converts_the_config_once_and_passes_the_types_down(tmp_path: Path, data_root: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The data, the model and the trainer are built from the schema's dataclasses that the run layer made once
    (:func:`lipgnn.config.typed`), not from the untyped node."""
    import dataclasses

    import lipgnn.config
    import lipgnn.data
    import lipgnn.models
    import lipgnn.train.trainer

    seen: dict[str, Any] = {}
    conversions = []
    typed, load, build = lipgnn.config.typed, lipgnn.data.load, lipgnn.models.build_model
    init = lipgnn.train.trainer.Trainer.__init__

    def count(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if not dataclasses.is_dataclass(cfg):
            conversions.append(cfg)
        return typed(cfg, *args, **kwargs)

    def spy(name: str, fn: Any) -> Any:
        def wrapped(first: Any, *args: Any, **kwargs: Any) -> Any:
            seen[name] = first
            return fn(first, *args, **kwargs)
        return wrapped

    def trainer_init(self: Any, train_cfg: Any, *args: Any, **kwargs: Any) -> None:
        seen["trainer"] = train_cfg
        init(self, train_cfg, *args, **kwargs)

    cfg = compose(["model=gcn", "train.epochs=1", f"results_dir={tmp_path}", "log.progress=false"])
    monkeypatch.setattr(lipgnn.config, "typed", count)
    monkeypatch.setattr(lipgnn.data, "load", spy("load", load))
    monkeypatch.setattr(lipgnn.models, "build_model", spy("model", build))
    monkeypatch.setattr(lipgnn.train.trainer.Trainer, "__init__", trainer_init)
    record = run(cfg)
    assert record["status"] == "completed"
    assert {name: type(value).__name__ for name, value in seen.items()} == {
        "load": "PlanetoidConfig", "model": "ModelConfig", "trainer": "TrainConfig"}
    assert len(conversions) == 1


def test_an_imported_record_waits_for_no_running_job(tmp_path: Path) -> None:
    """A record tool (the W&B pull, the id migration) writes through the run id's lock: never beside a job of that
    id that is running, and atomically otherwise."""
    from lipgnn.runs import import_record
    from lipgnn.store import read_record, run_record_path

    record = {"run_id": "gcn-none-cora-L2-s0-0123456789", "experiment": "unit", "status": "completed"}
    with run_lock(tmp_path, "unit", record["run_id"]), \
            pytest.raises(RunInProgress, match="is being run by another process"):
        import_record(tmp_path, record)
    path = run_record_path(tmp_path, "unit", record["run_id"])
    assert not path.exists()
    assert import_record(tmp_path, record) == path and read_record(path)["status"] == "completed"


class _Handed(Exception):
    """Raised by a kind's spied compute once it has the job: nothing is computed."""


def _config_nodes(value: Any, where: str = "job") -> list[str]:
    """Where ``value`` (a Job, its dataclasses, mappings and lists) holds an OmegaConf node."""
    import dataclasses

    from omegaconf import DictConfig, ListConfig

    if isinstance(value, DictConfig | ListConfig):
        return [where]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [hit for f in dataclasses.fields(value) for hit in _config_nodes(getattr(value, f.name),
                                                                               f"{where}.{f.name}")]
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _config_nodes(v, f"{where}[{k!r}]")]
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in _config_nodes(v, f"{where}[{i}]")]
    return []


@pytest.mark.parametrize(("overrides", "node", "schema"), [
    (["model=gcn"], None, None),
    (["experiment=gh_energy", "budget=cpu", "dataset=cora", "depth=2", "variant=san_preln"], "energy", "EnergyConfig"),
    (["experiment=kim_bounds", "kim.unit=pinf-n100"], "kim", "KimBoundsConfig"),
    (["experiment=fig5", "budget=cpu", "dataset.tree_depth=2", "variant=gat"], "trees_protocol",
     "TreesProtocolConfig"),
])
def test_a_kind_is_handed_typed_settings_only(overrides: list[str], node: str | None, schema: str | None,
                                             tmp_path: Path, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Job a kind computes from holds the schema's dataclasses and no config node: the ``energy``, ``kim`` and
    ``trees_protocol`` nodes as their schemas' dataclasses too."""
    from lipgnn.runs.registry import Job

    cfg = compose([*overrides, f"results_dir={tmp_path}", "log.progress=false"])
    kind = job_kind(cfg)
    handed: list[Job] = []

    def compute(job: Job) -> dict[str, Any]:
        handed.append(job)
        raise _Handed

    monkeypatch.setattr(kind, "compute", compute)
    with pytest.raises(_Handed):
        run(cfg)
    (job,) = handed
    assert _config_nodes(job) == [] and type(job.settings).__name__ == "RootConfig"
    if node is not None:
        assert type(getattr(job.settings, node)).__name__ == schema
    if node == "trees_protocol":
        assert {type(b).__name__ for b in job.settings.trees_protocol.block.values()} == {"TreesBlockConfig"}
