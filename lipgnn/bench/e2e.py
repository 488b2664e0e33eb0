"""Whole training runs (``train.py``) with ``model.impl=fused`` against ``model.impl=pyg``.

What a user waits for: start-up (imports, data loading), ``epochs`` training steps with the model's own
dropouts and an evaluation forward every epoch. Each pair runs the two implementations back to back
in fresh processes, alternating which goes first, into a throw-away results folder; the wall time and
the child processes' CPU time (user + system) of every run are recorded.

Caches are warm, as for every run after a user's first: the processed dataset lives in a cache folder
shared by the runs (filled in this process before the first one), and numba's on-disk cache of the
compiled loops is filled in this process too (:func:`warm_kernels`; it persists beside
the modules of ``lipgnn/nn/fused/*kernels.py``). The first fused run of a fresh clone also compiles those loops:
:func:`cold_run` measures that once, with numba's cache pointed at an empty folder.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: The run the issue's target is stated for: 30-layer GAT-Lip on PubMed, the authors' dropouts (the
#: model defaults), 20 epochs with evaluation every epoch, one thread.
E2E_OVERRIDES: tuple[str, ...] = ("model=gat", "norm=lip", "depth=30", "dataset=pubmed", "train.epochs=20",
                                  "train.num_threads=1", "log.progress=false")
#: The runs of one pair: name -> (model.impl, extra overrides). ``fused_rcm`` adds the opt-in node
#: relabelling (``dataset.reorder=rcm``, lipgnn/data/reorder.py), which is a different run of the same model.
E2E_RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pyg": ("pyg", ()), "fused": ("fused", ()), "fused_rcm": ("fused", ("dataset.reorder=rcm",)),
}
TRAIN_SCRIPT = Path(__file__).resolve().parents[2] / "train.py"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train_run(impl: str, overrides: Sequence[str] = E2E_OVERRIDES, env: dict[str, str] | None = None,
              ) -> tuple[float, float]:
    """One ``python train.py ... model.impl=<impl>`` in a fresh process; returns (wall s, CPU s)."""
    with tempfile.TemporaryDirectory(prefix="lipgnn-e2e-") as tmp:
        cmd = [sys.executable, str(TRAIN_SCRIPT), *overrides, f"model.impl={impl}", f"results_dir={tmp}"]
        child_env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
                     "WANDB_MODE": "offline", **(env or {})}
        cpu0, start = _children_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=child_env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"train.py model.impl={impl} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return wall, cpu


def warm_dataset(cache_dir: str, overrides: Sequence[str] = E2E_OVERRIDES) -> None:
    """Process the run's dataset into ``cache_dir`` (what a user's first run leaves behind)."""
    from lipgnn.config import compose
    from lipgnn.data import load

    cfg = compose([o for o in overrides if o.startswith("dataset=")] + [f"dataset.cache_dir={cache_dir}"])
    load(cfg.dataset, 0)


def warm_kernels() -> None:
    """Compile (or load) every compiled loop a fused GAT/GT training run uses, float32, train and eval
    mode, so that numba's on-disk cache holds them before the timed runs."""
    from types import SimpleNamespace

    import torch

    from lipgnn.models import build_model

    gen = torch.Generator().manual_seed(0)
    x, edge_index = torch.randn(50, 6, generator=gen), torch.randint(0, 50, (2, 200), generator=gen)
    spec = SimpleNamespace(num_features=6, num_classes=3, input="dense", vocab_sizes=(), edge_dim=None)
    for name in ("gat", "gt"):
        for norm in ("lip", "none"):
            cfg = SimpleNamespace(name=name, hidden=8, heads=1, dropout=0.6, attn_dropout=0.3, impl="fused")
            model = build_model(cfg, SimpleNamespace(name=norm), spec, 3)
            model(x, edge_index).sum().backward()
            model.eval()
            with torch.no_grad():
                model(x, edge_index)
    # The dropout that large graphs' locality order uses (lipgnn.nn.fused.locality), and the one-head layer
    # that large graphs take (lipgnn.nn.fused.gat_one_head); 50 nodes stay below both.
    from lipgnn.nn.fused import CSRGraph, elementwise_kernels, gat_one_head

    elementwise_kernels.dropout_rows_(x, torch.empty_like(x), torch.arange(x.size(0)), 0, 0.5)
    weight, att = torch.randn(8, 6, requires_grad=True), torch.randn(1, 8, requires_grad=True)
    graph = CSRGraph.from_edge_index(edge_index, 50)
    # GAT and GAT-Lip share the loops' signatures (``lip`` is a value, not a type), so one call compiles both
    gat_one_head.one_head_gat(x, weight, att, att, None, graph, 0.2, 1.0, attn_dropout=0.5).sum().backward()


def run_pairs(pairs: int, log: Callable[[str], None] = print, overrides: Sequence[str] = E2E_OVERRIDES,
              cache_dir: str | None = None) -> dict[str, tuple[list[float], list[float]]]:
    """``pairs`` interleaved rounds of :data:`E2E_RUNS` on warm caches (the order reversed every other
    round); returns ``{name: (wall times, CPU times)}``."""
    names = tuple(E2E_RUNS)
    out: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    with tempfile.TemporaryDirectory(prefix="lipgnn-e2e-cache-") as tmp:
        cache = cache_dir or tmp
        warm_dataset(cache, overrides)
        warm_kernels()
        env = {"LIPGNN_CACHE": cache}
        for p in range(pairs):
            for name in names if p % 2 == 0 else names[::-1]:
                impl, extra = E2E_RUNS[name]
                wall, cpu = train_run(impl, (*overrides, *extra), env)
                out[name][0].append(wall)
                out[name][1].append(cpu)
                label = " ".join((f"model.impl={impl}", *extra))
                log(f"  train.py round {p + 1}/{pairs} {label}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return out


def cold_run(log: Callable[[str], None] = print, overrides: Sequence[str] = E2E_OVERRIDES) -> tuple[float, float]:
    """One fused run whose compiled loops are compiled from scratch (``NUMBA_CACHE_DIR`` an empty folder),
    the dataset cache warm: what a fresh clone's first fused run costs; returns (wall s, CPU s)."""
    with tempfile.TemporaryDirectory(prefix="lipgnn-e2e-cache-") as cache, \
            tempfile.TemporaryDirectory(prefix="lipgnn-e2e-numba-") as numba_cache:
        warm_dataset(cache, overrides)
        wall, cpu = train_run("fused", overrides, {"LIPGNN_CACHE": cache, "NUMBA_CACHE_DIR": numba_cache})
    log(f"  train.py model.impl=fused, numba cache cold: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return wall, cpu
