"""Shared fixtures: composing configs like train.py does, and the offline data root."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from lipgnn.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[1]
# Processed datasets go to a per-session cache, never into the repository or the read-only data root.
os.environ.setdefault("LIPGNN_CACHE", tempfile.mkdtemp(prefix="lipgnn-test-cache-"))
os.environ.setdefault("WANDB_MODE", "offline")
# One intra-op thread (here and in the train.py subprocesses): OpenMP threads contending for 2 busy cores
# are an order of magnitude slower than one thread, and results stay bit-reproducible.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


def _data_root() -> Path | None:
    # LIPGNN_DATA (the Makefile sets it), else the repository's own data/ folder.
    for candidate in (os.environ.get("LIPGNN_DATA"), str(ROOT / "data")):
        if candidate and (Path(candidate) / "Cora" / "raw" / "ind.cora.graph").exists():
            return Path(candidate)
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--torch-device", default="cpu", choices=("cpu", "cuda"),
        help="default device of the tensors tests create; `--torch-device cuda` runs the layer tests on a GPU, "
             "where the fused layers take their eager (non-numba) path")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--torch-device") == "cuda":
        if not torch.cuda.is_available():
            raise pytest.UsageError("--torch-device cuda: torch.cuda.is_available() is False")
        # Tensors a test makes without naming a device land on the GPU, so the same assertions (against PyG,
        # against hand-computed values, gradchecks) exercise the CUDA path.
        torch.set_default_device("cuda")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--torch-device") != "cuda":
        return
    skip = pytest.mark.skip(reason="tests the compiled CPU loops; CUDA tensors take their eager twins")
    for item in items:
        params = item.callspec.params.values() if hasattr(item, "callspec") else ()
        if item.get_closest_marker("cpu_only") or any(isinstance(v, str) and v == "numba" for v in params):
            item.add_marker(skip)


DATA_ROOT = _data_root()
if DATA_ROOT is not None:
    os.environ["LIPGNN_DATA"] = str(DATA_ROOT)

# A run small enough for a test: TREES depth 2 (4 leaves), 64 trees, 3 layers of width 8.
TINY_TREES = ["dataset=trees", "dataset.tree_depth=2", "dataset.num_trees=64", "depth=3", "model.hidden=8",
              "model.dropout=0", "model.attn_dropout=0", "log.progress=false"]


def conf_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, grid: str, edit: Callable[[DictConfig], None]) -> Path:
    """Point the results' grid reader at a copy of conf/ whose ``grid/<grid>.yaml`` is changed in place by ``edit``
    (e.g. an extra sub-sweep removed), for tests whose hand-written records assume fewer declared runs than the
    project's grid has."""
    from lipgnn.results import grid as grid_reader

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    path = conf / "grid" / f"{grid}.yaml"
    cfg = OmegaConf.load(path)
    edit(cfg)
    path.write_text("# @package _global_\n" + OmegaConf.to_yaml(cfg))
    monkeypatch.setattr(grid_reader, "CONF_DIR", conf)
    return conf


def pubmed_seed_0_only(grid: DictConfig, keep_extras: bool = True) -> None:
    """fig6's grid with PubMed at seed 0 only (Cora keeps seeds 0-2)."""
    main = grid.hydra.sweeper.params
    pubmed = {**main, "dataset": "pubmed", "seed": 0}
    main.dataset = "cora"
    grid.hydra.sweeper.extra = [pubmed, *(grid.hydra.sweeper.extra if keep_extras else [])]


def compose_cfg(overrides: Sequence[str] = ()) -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.fixture
def make_cfg() -> Callable[..., DictConfig]:
    return lambda *overrides: compose_cfg(overrides)


@pytest.fixture
def data_root() -> Path:
    if DATA_ROOT is None:
        pytest.skip("Planetoid files absent (set LIPGNN_DATA to a folder holding Cora/raw/...)")
    return DATA_ROOT


def run_cli(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python train.py <args>`` in ``cwd`` (a subprocess, as a user would run it)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)



def run_script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python scripts/<name>.py <args>`` (a subprocess: tests import the package, never a script)."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args], capture_output=True,
                          text=True, timeout=timeout)

def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def single_thread() -> Iterator[None]:
    """One intra-op thread for a module of tiny graphs, where more threads only add contention."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def interrupted_at(monkeypatch: pytest.MonkeyPatch, epoch: int):
    """Runs inside the block are interrupted (KeyboardInterrupt, as Ctrl-C) at ``epoch`` through the trainer's
    fault hook ``lipgnn.train.faults.maybe_kill``."""
    from lipgnn.train import faults

    def press(run_id: str, at: int) -> None:
        if at == epoch:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(faults, "maybe_kill", press)
        yield
