"""glibc malloc settings of the training process (lipgnn.train.allocator, train.malloc_tuning)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import compose_cfg

from lipgnn.identity import identity_config
from lipgnn.runs import run
from lipgnn.train import allocator


class FakeLibc:
    """Records mallopt calls; refuses the parameters in ``refuse``."""

    def __init__(self, refuse: tuple[int, ...] = ()) -> None:
        self.calls: list[tuple[int, int]] = []
        self.refuse = refuse

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 0 if param in self.refuse else 1


@pytest.fixture
def untuned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_tuned", False)


def test_settings_are_the_documented_values_and_fit_a_c_int() -> None:
    # mallopt takes a C int: a value of 2**31 or more would wrap (4 GiB becomes 0, trimming on every free)
    assert dict(allocator.MALLOC_SETTINGS) == {-3: 32 << 20, -1: (1 << 31) - 1, -2: 256 << 20}
    assert all(0 < value < 2**31 for _, value in allocator.MALLOC_SETTINGS)


def test_tune_applies_every_setting_once(untuned: None) -> None:
    libc = FakeLibc()
    assert allocator.tune_malloc(libc) is True and allocator.is_tuned()
    assert libc.calls == list(allocator.MALLOC_SETTINGS)
    assert allocator.tune_malloc(libc) is True and len(libc.calls) == 3  # idempotent: not applied again


def test_a_refused_setting_reports_untuned(untuned: None) -> None:
    libc = FakeLibc(refuse=(-1,))
    assert allocator.tune_malloc(libc) is False and not allocator.is_tuned()
    assert len(libc.calls) == 3  # the others are still tried


def test_no_glibc_changes_nothing(untuned: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert allocator._glibc() is None
    assert allocator.tune_malloc() is False and not allocator.is_tuned()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_this_glibc_accepts_the_settings(untuned: None) -> None:
    libc = allocator._glibc()
    if libc is None:
        pytest.skip("not glibc")
    assert allocator.tune_malloc(libc) is True


def test_the_setting_is_not_part_of_a_runs_identity() -> None:
    base = {"seed": 0, "model": {"name": "gat"}, "train": {"lr": 0.005, "malloc_tuning": True}}
    off = {**base, "train": {"lr": 0.005, "malloc_tuning": False}}
    legacy = {**base, "train": {"lr": 0.005}}  # records written before the key existed
    assert identity_config(base) == identity_config(off) == identity_config(legacy)


def test_runs_record_whether_the_process_was_tuned(tmp_path: Path, data_root: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_tuned", False)
    monkeypatch.setattr(allocator, "_glibc", lambda: FakeLibc())
    common = ["model=gcn", "depth=2", "train.epochs=1", "log.progress=false"]
    off = run(compose_cfg([*common, "train.malloc_tuning=false", f"results_dir={tmp_path / 'a'}"]))
    assert off["malloc_tuned"] is False and not allocator.is_tuned()
    on = run(compose_cfg([*common, f"results_dir={tmp_path / 'b'}"]))  # the default
    assert on["malloc_tuned"] is True and on["run_id"] == off["run_id"]
    # process-wide: a later job that asks for glibc's defaults still runs tuned, and says so
    again = run(compose_cfg([*common, "train.malloc_tuning=false", "overwrite=true",
                             f"results_dir={tmp_path / 'a'}"]))
    assert again["malloc_tuned"] is True
