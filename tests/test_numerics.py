"""The numeric environment (lipgnn.numerics): every record names each library's instruction-set level and the threads
it used; numerics=portable pins them at process start and is refused where it is not in effect."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import TINY_TREES, files_under, run_cli

from lipgnn import numerics
from lipgnn.config import compose
from lipgnn.errors import ConfigError
from lipgnn.identity import run_id
from lipgnn.runs import run
from lipgnn.verify import verify

#: masks beyond the portable pins: glibc's own AVX-512 code paths (memcpy, libm) and MKL's instruction cap
EXTRA_MASKS = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512BW,-AVX512CD,-AVX512DQ,-AVX512VL",
               "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def test_a_record_names_its_levels_and_the_thread_count_it_used(tmp_path: Path) -> None:
    """``train.num_threads=auto`` is stored as the count it resolved to, which a rerun composes; the run id is the one
    the config with ``auto`` gives (threads are not part of what a run is)."""
    cfg = compose([*TINY_TREES, "train.epochs=1", "train.num_threads=auto", f"results_dir={tmp_path}"])
    record = run(cfg)
    used = record["num_threads"]
    assert isinstance(used, int) and used >= 1 and record["config"]["train"]["num_threads"] == used
    assert run_id(record["config"]) == record["run_id"] == run_id(cfg)
    env = record["numerics"]
    assert env["mode"] == record["config"]["numerics"] == "native" and env["threads"]["torch"] == used
    assert env["cpu"]["model"] and set(env["levels"]) == {"aten", "mkl", "onednn", "numpy", "openblas", "numba"}
    assert env["levels"] == numerics.levels()


def test_portable_numerics_is_refused_where_it_is_not_in_effect(tmp_path: Path) -> None:
    """The pins act only when set before the libraries load: a job asking for them in a process started without them
    is refused in one line, before anything is written."""
    assert numerics.active_mode() == "native"
    with pytest.raises(ConfigError, match=r"^numerics=portable, but this process runs native numerics"):
        run(compose([*TINY_TREES, "train.epochs=1", "numerics=portable", f"results_dir={tmp_path / 'res'}"]))
    assert not (tmp_path / "res").exists()


def test_the_command_line_or_the_environment_asks_for_portable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(numerics.ENV, raising=False)
    assert numerics.requested(["model=gat"]) == "native"
    assert numerics.requested(["-m", "numerics=portable", "seed=0,1"]) == "portable"
    monkeypatch.setenv(numerics.ENV, "portable")
    assert numerics.requested([]) == "portable" and compose([]).numerics == "portable"


def _portable_run(tmp_path: Path, folder: str, extra_env: dict[str, str]) -> dict:
    env = {**extra_env, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    out = run_cli(["model=gat", "norm=lip", "model.impl=fused", *TINY_TREES, "train.epochs=5", "train.num_threads=1",
                   "numerics=portable", f"results_dir={folder}"],
                  tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    (path,) = files_under(tmp_path / folder / "runs")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_a_portable_record_reruns_identically_with_the_hosts_avx512_masked(tmp_path: Path) -> None:
    """``numerics=portable`` on the command line restarts train.py with the pins; a rerun with AVX-512 masked further
    (glibc's hardware capabilities, MKL's instruction cap) gives the same history bit for bit."""
    assert os.environ.get(numerics.ENV) is None
    first = _portable_run(tmp_path, "a", {})
    masked = _portable_run(tmp_path, "b", EXTRA_MASKS)
    for record in (first, masked):
        assert record["numerics"]["mode"] == "portable" and record["config"]["numerics"] == "portable"
        assert record["numerics"]["levels"]["aten"] == "AVX2" and record["numerics"]["levels"]["mkl"] == "COMPATIBLE"
        assert record["numerics"]["levels"]["numba"].startswith("haswell (x86-64-v3")
    assert first["run_id"] == masked["run_id"] and first["history"] == masked["history"]
    # lipgnn verify, from this native process, reruns the portable record in a portable child: identical
    (row,) = verify([first], tmp_path / "a", impact=False)
    assert row["numerics"] == "portable" and row["outcome"] == "identical" and row["machine"] == []
