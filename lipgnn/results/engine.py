"""The results engine: load each artifact's records once and write its tables and figures.

``make tables`` / ``make figures`` call ``make_tables`` / ``make_figures``, which loop over the registry.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lipgnn.results import registry
from lipgnn.results.artifact import Artifact
from lipgnn.results.grid import check_grid
from lipgnn.store import load_records


class Loader:
    """Record frames of one ``results_dir``, each experiment read once (with or without histories)."""

    def __init__(self, results_dir: str | os.PathLike, budget: str | None = None) -> None:
        self.results_dir = Path(results_dir)
        self.budget = budget
        self._frames: dict[tuple[str, bool], pd.DataFrame] = {}

    def experiment(self, experiment: str, history: bool = False) -> pd.DataFrame:
        key = (experiment, history)
        if key not in self._frames:
            if history is False and (experiment, True) in self._frames:
                self._frames[key] = self._frames[(experiment, True)]
            else:
                df = load_records(self.results_dir, experiment, history=history)
                if self.budget is not None and not df.empty:
                    df = df[df["budget"].astype(str) == self.budget]
                check = check_grid(df)
                self._frames[key] = df.assign(in_grid=check.in_grid, declared_epochs=check.declared_epochs)
        return self._frames[key]

    def frame(self, artifact: Artifact) -> pd.DataFrame:
        """The records of ``artifact.experiments``, concatenated (one row per record), with ``in_grid`` (inside
        the experiment's declared grid) and ``declared_epochs`` (its epoch budget there; NaN outside)."""
        frames = [self.experiment(e, artifact.needs_history) for e in artifact.experiments]
        if len(frames) == 1:
            return frames[0]
        full = [f for f in frames if not f.empty]
        return pd.concat(full, ignore_index=True) if full else frames[0]


def selected(kind: str, only: tuple[str, ...] | None) -> list[Artifact]:
    """The registry's artifacts with a ``kind`` output, restricted to ``only`` when given."""
    chosen = [a for a in registry.artifacts() if getattr(a, kind) is not None]
    if only:
        unknown = sorted(set(only) - {a.name for a in chosen})
        if unknown:
            raise ValueError(f"no {kind} artifact named {', '.join(unknown)}; known: "
                             f"{', '.join(a.name for a in chosen)}")
        chosen = [a for a in chosen if a.name in only]
    return chosen


def make_tables(results_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                names: tuple[str, ...] | None = None, budget: str | None = None) -> list[Path]:
    """Write ``<out_dir>/<artifact>.{md,tex,csv}`` (default ``results_dir/tables``); return the paths."""
    out = Path(out_dir) if out_dir is not None else Path(results_dir) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    loader = Loader(results_dir, budget)
    written = []
    for artifact in selected("table", names):
        for suffix, text in artifact.table(loader.frame(artifact)).items():
            path = out / f"{artifact.name}.{suffix}"
            path.write_text(text, encoding="utf-8", newline="\n")
            written.append(path)
    return written


def make_figures(results_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                 names: tuple[str, ...] | None = None) -> list[Path]:
    """Write ``<out_dir>/<artifact>.{png,pdf}`` (default ``results_dir/figures``); return the paths."""
    import matplotlib  # only figures need it (slow to import)
    import matplotlib.pyplot as plt

    from lipgnn.results.plotting import RC, save_figure

    out = Path(out_dir) if out_dir is not None else Path(results_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    loader = Loader(results_dir)
    written = []
    with matplotlib.rc_context(RC):
        for artifact in selected("figure", names):
            fig = artifact.figure(loader.frame(artifact))
            written += save_figure(fig, out / artifact.name)
            plt.close(fig)  # artifacts drawn with pyplot stay open until closed (a no-op for a bare Figure)
    return written
