"""Whole training runs (``train.py``) with ``model.impl=fused`` against ``model.impl=pyg``.

What a user waits for: start-up (imports, data loading), ``epochs`` training steps with the model's own
dropouts and an evaluation forward every epoch. Each pair runs the two implementations back to back
in fresh processes, alternating which goes first, into a throw-away results folder; the wall time and
the child processes' CPU time (user + system) of every run are recorded.
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
E2E_IMPLS: tuple[str, ...] = ("pyg", "fused")
TRAIN_SCRIPT = Path(__file__).resolve().parents[2] / "train.py"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train_run(impl: str, overrides: Sequence[str] = E2E_OVERRIDES) -> tuple[float, float]:
    """One ``python train.py ... model.impl=<impl>`` in a fresh process; returns (wall s, CPU s)."""
    with tempfile.TemporaryDirectory(prefix="lipgnn-e2e-") as tmp:
        cmd = [sys.executable, str(TRAIN_SCRIPT), *overrides, f"model.impl={impl}", f"results_dir={tmp}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
               "WANDB_MODE": "offline"}
        cpu0, start = _children_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"train.py model.impl={impl} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return wall, cpu


def run_pairs(pairs: int, log: Callable[[str], None] = print,
              overrides: Sequence[str] = E2E_OVERRIDES) -> dict[str, tuple[list[float], list[float]]]:
    """``pairs`` interleaved (pyg, fused) runs; returns ``{impl: (wall times, CPU times)}``."""
    out: dict[str, tuple[list[float], list[float]]] = {impl: ([], []) for impl in E2E_IMPLS}
    for p in range(pairs):
        order = E2E_IMPLS if p % 2 == 0 else E2E_IMPLS[::-1]
        for impl in order:
            wall, cpu = train_run(impl, overrides)
            out[impl][0].append(wall)
            out[impl][1].append(cpu)
            log(f"  train.py pair {p + 1}/{pairs} model.impl={impl}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return out
