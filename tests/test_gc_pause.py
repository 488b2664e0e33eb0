"""The cyclic collector paused during a training process's start-up (lipgnn.train.gc_pause)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import compose_cfg
from omegaconf import OmegaConf

from lipgnn import cli
from lipgnn.runs import run
from lipgnn.train import gc_pause


@pytest.fixture
def collector() -> Iterator[None]:
    """Leave the interpreter's collector as the test found it: enabled, nothing frozen by the test."""
    was_enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    gc_pause._paused = gc_pause._resumed = False
    yield
    gc_pause._paused = gc_pause._resumed = False
    if gc.get_freeze_count() > frozen:
        gc.unfreeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.fixture
def freezes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls to gc.freeze. Whether a step froze is read from the calls, not from the freeze count
    alone: another thread of the test process (a network probe, a library's worker) can free frozen objects
    at any moment, and the permanent generation shrinks with them."""
    calls: list[int] = []
    freeze = gc.freeze

    def counting_freeze() -> None:
        calls.append(1)
        freeze()

    monkeypatch.setattr(gc, "freeze", counting_freeze)
    return calls


def test_pause_turns_the_collector_off_and_resume_freezes_then_turns_it_on(
    collector: None, freezes: list[int]
) -> None:
    gc.enable()
    frozen = gc.get_freeze_count()
    gc_pause.pause()
    assert not gc.isenabled() and gc_pause.is_paused()
    gc_pause.resume()
    assert gc.isenabled() and not gc_pause.is_paused()
    assert len(freezes) == 1 and gc.get_freeze_count() > frozen
    gc_pause.resume()  # a second resume does nothing
    assert gc.isenabled() and len(freezes) == 1


def test_resume_without_pause_changes_nothing(collector: None, freezes: list[int]) -> None:
    gc.enable()
    gc_pause.resume()
    assert gc.isenabled() and not freezes


def test_a_collector_the_caller_turned_off_stays_off(collector: None) -> None:
    gc.disable()
    gc_pause.pause()
    assert not gc_pause.is_paused()
    gc_pause.resume()
    assert not gc.isenabled()


def test_a_run_turns_the_collector_back_on_before_it_loads_its_data(
    collector: None, tmp_path: Path, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data and the model are created with the collector on and outside the frozen set (a sweep's
    later jobs can collect them), and training runs with it on."""
    import lipgnn.data
    import lipgnn.train.trainer as trainer_mod

    seen: dict[str, bool] = {}
    load, fit = lipgnn.data.load, trainer_mod.Trainer.fit

    def spy_load(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen["load"] = gc.isenabled()
        seen["frozen"] = gc.get_freeze_count() > 0
        return load(*args, **kwargs)

    def spy_fit(self, model, task):  # type: ignore[no-untyped-def]
        seen["fit"] = gc.isenabled()
        # gc.get_objects() lists generations 0-2 only, not the permanent generation that freeze() fills
        seen["model_collectable"] = any(obj is model for obj in gc.get_objects())
        return fit(self, model, task)

    monkeypatch.setattr(lipgnn.data, "load", spy_load)
    monkeypatch.setattr(trainer_mod.Trainer, "fit", spy_fit)
    gc.enable()
    gc_pause.pause()
    record = run(compose_cfg(["model=gcn", "depth=2", "train.epochs=1", "log.progress=false",
                              f"results_dir={tmp_path}"]))
    assert record["status"] == "completed"
    assert seen["load"] and seen["fit"], "the data must load and training must run with the collector on"
    assert seen["frozen"] and seen["model_collectable"], "the model must stay out of the frozen set"
    assert gc.isenabled() and not gc_pause.is_paused()


def test_the_pause_runs_once_per_process(collector: None, freezes: list[int]) -> None:
    """A sweep's later jobs find the modules imported; pausing and freezing again would freeze the previous
    job's uncollected cycles for good."""
    gc.enable()
    gc_pause.pause()
    gc_pause.resume()
    assert len(freezes) == 1
    gc_pause.pause()
    assert gc.isenabled() and not gc_pause.is_paused()
    gc_pause.resume()
    assert len(freezes) == 1


def test_train_py_composes_with_the_collector_on_and_pauses_before_the_heavy_imports(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Composing a sweep's jobs leaves garbage in proportion to the jobs, so it runs with the collector on;
    the task function pauses it before importing the training code."""
    from hydra.types import RunMode

    import lipgnn.runs as run_mod

    states: dict[str, bool] = {}
    hydra_train = cli._hydra_train
    monkeypatch.setattr(cli, "check_command_line", lambda argv: states.setdefault("compose", gc.isenabled()))
    monkeypatch.setattr(cli, "_hydra_train", lambda: states.setdefault("hydra", gc.isenabled()))
    gc.enable()
    cli.train_main()
    assert states == {"compose": True, "hydra": True}

    hydra_config = SimpleNamespace(get=lambda: SimpleNamespace(mode=RunMode.RUN))
    monkeypatch.setattr(cli, "HydraConfig", hydra_config)

    def fake_run(cfg: object, **kwargs: object) -> dict:
        states["run"] = gc.isenabled()
        return {}

    monkeypatch.setattr(run_mod, "run", fake_run)
    hydra_train(OmegaConf.create({}))  # a passed config goes straight to the task function
    assert states["run"] is False and gc_pause.is_paused()
