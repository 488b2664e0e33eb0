"""The selection protocol shared by every table cell, figure point and report number (the paper's §10).

1. failed runs (crashes) are ignored;
2. per run, the validation and test metrics are those of its ``config.train.selection`` rule: ``best_val``
   (metrics at the epoch of best validation, the paper's text) or ``last`` (last epoch, the authors' code);
3. runs are grouped by configuration = the whole config but the seed (``config_key``);
4. a run is *diverged* when its record says so or its selected val/test metric is not finite; diverged runs
   are excluded from the means and counted; a configuration whose seeds all diverged cannot be selected;
5. the configuration with the best mean VALIDATION metric over its non-diverged seeds is selected; on an
   exact tie of that mean the SHALLOWER configuration wins (fewer layers reach it: the simpler model), and
   within one depth the configuration whose config hash (``config_key``) sorts first, an arbitrary but fixed
   order so the same records always select the same cell;
6. its TEST metric is reported as mean ± sample standard deviation (ddof=1) over its non-diverged seeds;
7. a sweep gives every cell the same grid, so a cell with fewer runs than the fullest cell is *partial*
   (its sweep was stopped, or runs failed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd


def with_selected_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``sel_val``/``sel_test`` (per the run's selection rule) and ``diverged``; drop failed runs and runs
    outside the experiment's declared grid (``in_grid``, set by the engine's loader)."""
    keep = df["status"] != "failed"
    if "in_grid" in df:
        keep &= df["in_grid"].astype(bool)
    out = df[keep].copy()
    last = (out["selection"] == "last").to_numpy(dtype=bool)
    out["sel_val"] = np.where(last, out["last_val"].to_numpy(dtype=float), out["best_val"].to_numpy(dtype=float))
    out["sel_test"] = np.where(last, out["last_test"].to_numpy(dtype=float), out["best_test"].to_numpy(dtype=float))
    finite = np.isfinite(out["sel_val"].to_numpy(dtype=float)) & np.isfinite(out["sel_test"].to_numpy(dtype=float))
    out["diverged"] = (out["status"] == "diverged").to_numpy(dtype=bool) | ~finite
    return out


@dataclass
class Selection:
    """The selected configuration of a group of runs and its aggregated metrics (fractions, not %)."""

    config_key: str
    runs: pd.DataFrame          # every non-failed run of the selected configuration
    n_runs: int
    n_diverged: int
    val_mean: float
    mean: float                 # of ``value`` over non-diverged seeds
    std: float                  # sample std (ddof=1); NaN with one seed
    depth: int | None
    n_configs: int              # configurations compared
    n_point_runs: int = 0       # non-failed runs of every configuration compared (the cell's grid)


def select_best(runs: pd.DataFrame, value: str = "sel_test", score: str = "sel_val") -> Selection | None:
    """Select the configuration with the best mean ``score`` (validation) and aggregate ``value`` (test).

    ``runs`` must come from ``with_selected_metrics``. Returns None when no configuration has a
    non-diverged run. Ties of the mean ``score``: the shallower configuration, then the smaller ``config_key``
    (the module docstring's rule 5); a configuration without one recorded depth sorts as depth -1.
    """
    candidates = []
    for key, group in runs.groupby("config_key", sort=True):
        ok = group[~group["diverged"]]
        if ok.empty:
            continue
        depth = depth_of(group)
        candidates.append((-float(ok[score].mean()), depth if depth is not None else -1, str(key), group))
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[:3])   # best mean score, then shallower, then the smaller config hash
    neg_val, _, key, group = candidates[0]
    ok = group[~group["diverged"]]
    values = ok[value].to_numpy(dtype=float)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return Selection(key, group, len(group), int(group["diverged"].sum()), -neg_val,
                     float(np.mean(values)), std, depth_of(group), len(candidates), len(runs))


def full_grid_size(runs: pd.DataFrame, keys: list[str]) -> int:
    """Runs in the fullest group of ``keys`` (a table cell or figure point) among non-failed ``runs``.

    A sweep gives every cell one grid of configurations and seeds, so a group with fewer runs is one
    whose sweep has not finished. Read from the records, since they are all a table is built from.
    """
    if runs.empty:
        return 0
    return int(runs.groupby(keys, dropna=False, sort=False).size().max())


#: What a complete point has: one run count for every point, or per point ``(variant, depth) -> runs`` where the
#: declared sweeps give points of one table different seed counts (:func:`lipgnn.results.grid.declared_per_point`).
Full = int | Callable[[str, int], int]


def full_at(full: Full, variant: str, depth: int | None) -> int:
    """The run count a complete point of ``variant`` at ``depth`` has under ``full``."""
    return full if isinstance(full, int) else full(variant, int(depth) if depth is not None else 0)


def is_partial(n_runs: int, full: int) -> bool:
    """A cell or point with runs, but fewer than the fullest one (``full_grid_size``): its sweep has not
    finished."""
    return 0 < n_runs < full


def partial_text(n_runs: int, full: int) -> str:
    """`` [partial: k/K runs]`` for a partial cell or point (``is_partial``), else ``""``."""
    return f" [partial: {n_runs}/{full} runs]" if is_partial(n_runs, full) else ""


def depth_of(group: pd.DataFrame) -> int | None:
    """The depth shared by every run of ``group``, or None when they differ or none is recorded."""
    depths = group["depth"].dropna().unique()
    return int(depths[0]) if len(depths) == 1 else None


def at(df: pd.DataFrame, column: str, value: float) -> pd.DataFrame:
    """Rows of ``df`` whose numeric ``column`` equals ``value``."""
    return df[df[column] == float(value)]


def of_dataset(df: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Rows of ``df`` of ``dataset`` (case-insensitive)."""
    return df[df["dataset"].astype(str).str.lower() == dataset]


def depths(df: pd.DataFrame, column: str = "depth") -> list[int]:
    """Sorted distinct values of a numeric column, as ints."""
    return sorted(int(d) for d in df[column].dropna().unique()) if not df.empty else []
