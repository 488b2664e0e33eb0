"""How far each verdict's runs are from the protocol the paper states: the claims index's "paper protocol" column.

The yardstick per artifact is ``docs/paper_protocol.yaml`` (:data:`PROTOCOL_FILE`), which points at where the
paper's protocol is encoded (the paper grid, ``hydra.sweeper.design`` of ``conf/experiment/<experiment>.yaml``,
or Kim et al.'s ``paper`` budgets) or states it with the paper's words. The distance is computed from the
records, never typed:

- epochs: the records' ``train.epochs`` against the paper's (``200 of 1000 epochs``); for Alon & Yahav's TREES
  the unit is passes and a run's cap is its ``train.epochs`` (``150-500 of 50000 passes``);
- seeds: the seeds per configuration against the paper grid's seed axis (``3-5 of 5 seeds``);
- grid: the hyper-parameter configurations compared per cell against the paper grid's (:data:`HYPER_AXES`);
- datasets, where the paper states them and the records name theirs;
- Kim et al.: every budget key whose ``cpu`` value differs from the ``paper`` one (``steps 200 of 1000``).

Nothing differs: ``paper protocol``. An artifact beyond the papers says so.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from lipgnn.identity import get_dotted
from lipgnn.results.grid import CONF_DIR, declared_grid

PROTOCOL_FILE = Path(__file__).resolve().parents[2] / "docs" / "paper_protocol.yaml"
PAPER_PROTOCOL = "paper protocol"
#: The hyper-parameter axes a paper grid sweeps per cell (the rest of a point names the cell or the seed).
HYPER_AXES = ("model.hidden", "model.heads", "model.head_aggregation", "model.attn_dropout", "model.dropout",
              "train.lr")
#: Record columns that name a cell (a table cell or a figure point).
CELL_COLUMNS = ("variant", "dataset", "missing_rate", "depth", "tree_depth")
#: The cell columns a paper grid sweeps, by their grid key: a figure's x axis, or a selection axis where an entry
#: says so (``select: [depth]``: Tables 1-2 select the depth per cell).
CELL_AXES = {"depth": "depth", "tree_depth": "dataset.tree_depth"}
#: How an axis is named in a distance text.
AXIS_NAMES = {"model.hidden": "hidden", "model.heads": "heads", "model.head_aggregation": "head aggregation",
              "model.attn_dropout": "attention dropout", "model.dropout": "dropout", "train.lr": "lr",
              "depth": "depth", "dataset.tree_depth": "tree depth"}


def _norm(value: Any) -> str:
    """A grid or config value as comparable text: numbers by value (``0``, ``0.2``), the rest as written."""
    if isinstance(value, bool):
        return str(value)
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


@cache
def protocols(path: Path = PROTOCOL_FILE) -> dict[str, dict[str, Any]]:
    """The YAML's entries per artifact name (empty when the file is absent)."""
    if not path.exists():
        return {}
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return {str(k): dict(v) for k, v in (data or {}).items()}  # type: ignore[union-attr]


def paper_side(entry: dict[str, Any], conf_dir: Path | None = None) -> dict[str, Any]:
    """The paper's numbers of one entry: ``epochs``, ``seeds``, ``configs`` (per cell: the product of the values
    of every selection axis, ``HYPER_AXES`` and the entry's ``select`` axes), ``values`` (each axis's paper values,
    the cell axes too), ``datasets``, ``unit``, ``select`` (absent when not stated)."""
    out: dict[str, Any] = {"unit": entry.get("unit", "epochs"), "select": tuple(entry.get("select", ()))}
    if "grid" in entry:
        grid = declared_grid(str(entry["grid"]), "paper", conf_dir)
        if grid is not None:
            points = grid.points
            seeds = {p.get("seed") for p in points if "seed" in p}
            if seeds:
                out["seeds"] = len(seeds)
            epochs = [s.epochs for s in grid.sweeps if math.isfinite(s.epochs)]
            if epochs:
                out["epochs"] = max(epochs)
            values = {axis: {_norm(v) for v in {p[axis] for p in points if axis in p}}
                      for axis in (*HYPER_AXES, *CELL_AXES.values())}
            out["values"] = {axis: v for axis, v in values.items() if v}
            configs = 1
            for axis in (*HYPER_AXES, *(CELL_AXES[a] for a in out["select"])):
                configs *= max(1, len(values.get(axis, ())))
            out["configs"] = configs
    for key in ("epochs", "seeds", "datasets"):
        if key in entry:
            out[key] = entry[key]
    return out


def _range(values: list[float]) -> str:
    lo, hi = int(min(values)), int(max(values))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _ours(frame: pd.DataFrame) -> pd.DataFrame:
    """The completed runs inside the declared grid (what the verdicts read)."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    keep = frame["status"].astype(str) != "failed" if "status" in frame else pd.Series(True, index=frame.index)
    if "in_grid" in frame:
        keep &= frame["in_grid"].astype(bool)
    return frame[keep]


def training_distance(frame: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    """The parts in which the runs of ``frame`` fall short of ``paper`` (see the module docstring)."""
    runs = _ours(frame)
    if runs.empty:
        return []
    parts = []
    unit = paper.get("unit", "epochs")
    if "epochs" in paper and paper["epochs"] and "epochs" in runs:
        epochs = [float(e) for e in runs["epochs"].dropna()]
        if epochs and min(epochs) < float(paper["epochs"]):
            cap = "pass cap " if unit == "passes" else ""
            parts.append(f"{cap}{_range(epochs)} of {int(paper['epochs'])} {unit}")
    if "seeds" in paper and "config_key" in runs and "seed" in runs:
        per_config = runs.groupby("config_key")["seed"].nunique().tolist()
        if per_config and min(per_config) < int(paper["seeds"]):
            parts.append(f"{_range(per_config)} of {int(paper['seeds'])} seeds")
        elif per_config and max(per_config) > int(paper["seeds"]):
            parts.append(f"{_range(per_config)} seeds (the paper's {int(paper['seeds'])})")
    if paper.get("configs", 1) > 1 and "config_key" in runs:
        selected = set(paper.get("select", ()))
        cells = [c for c in CELL_COLUMNS if c in runs and c not in selected]
        per_cell = runs.groupby(cells, dropna=False)["config_key"].nunique().tolist() if cells else []
        if per_cell and max(per_cell) < int(paper["configs"]):
            parts.append(f"{_range(per_cell)} of {int(paper['configs'])} configurations per cell")
    if "datasets" in paper and "dataset" in runs:
        n = runs["dataset"].nunique()
        if n < int(paper["datasets"]):
            parts.append(f"{n} of {int(paper['datasets'])} datasets")
    return parts


def outside_grid(runs: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    """Every selection-axis value our ``runs`` used that the paper's grid does not hold, named with the grid
    (``attention dropout 0.3 (2 of 4 configurations) outside the paper's {0, 0.2, 0.5}``)."""
    values = paper.get("values", {})
    runs = _ours(runs)
    if runs.empty or "config" not in runs:
        return []
    configs = runs.drop_duplicates("config_key") if "config_key" in runs else runs
    parts = []
    for axis in (*HYPER_AXES, *(CELL_AXES[a] for a in paper.get("select", ()))):
        grid = values.get(axis)
        if not grid:
            continue
        ours = [_norm(get_dotted(c, axis)) for c in configs["config"]]
        outside = sorted({v for v in ours if v not in grid and v != "None"})
        if outside:
            n = sum(v in outside for v in ours)
            parts.append(f"{AXIS_NAMES.get(axis, axis)} {', '.join(outside)} ({n} of {len(ours)} configurations) "
                         f"outside the paper's {{{', '.join(sorted(grid, key=_sort_key))}}}")
    return parts


def coverage(frame: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    """The figure axes (depth, tree depth) the paper sweeps, where our runs cover fewer of its values:
    ``depth 2-15 (4 of 7 values; paper 2-30)``."""
    runs = _ours(frame)
    parts = []
    for column, axis in CELL_AXES.items():
        grid = paper.get("values", {}).get(axis)
        if not grid or len(grid) < 2 or column in paper.get("select", ()) or column not in runs:
            continue
        ours = sorted({_norm(v) for v in runs[column].dropna()}, key=_sort_key)
        if ours and len(set(ours) & grid) < len(grid):
            paper_sorted = sorted(grid, key=_sort_key)
            parts.append(f"{AXIS_NAMES[axis]} {ours[0]}-{ours[-1]} ({len(set(ours) & grid)} of {len(grid)} values; "
                         f"paper {paper_sorted[0]}-{paper_sorted[-1]})")
    return parts


def _sort_key(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


@cache
def _paper_side_of(name: str, path: Path = PROTOCOL_FILE) -> dict[str, Any]:
    """``paper_side`` of the entry ``name``, once per process (a paper grid holds up to ~10^6 points)."""
    return paper_side(protocols(path)[name], CONF_DIR)


def claim_distance(artifact_name: str, runs: pd.DataFrame | None, frame: pd.DataFrame | None = None,
                   path: Path = PROTOCOL_FILE) -> str:
    """One claim's distance from the paper's protocol, from the runs its verdict read (``runs``: every
    configuration of the compared cells or points): their epochs or passes, seeds, configurations per cell over
    every selection axis, each value outside the paper's grid, and the figure axes ``frame`` (the records of the
    claim's experiment) covers. The yardstick is the entry of the runs' own experiment when it has one (Fig. 3's
    claims read fig3's), else the artifact's; without runs, the artifact's ``distance``."""
    entries = protocols(path)
    experiment = str(runs["experiment"].iloc[0]) if runs is not None and not runs.empty and "experiment" in runs \
        else ""
    name = experiment if experiment in entries else artifact_name
    entry = entries.get(name)
    if runs is None or runs.empty or entry is None or "beyond" in entry or "budgets" in entry:
        return distance(artifact_name, frame if frame is not None else pd.DataFrame(), path)
    paper = _paper_side_of(name, path)
    parts = training_distance(runs, paper) + outside_grid(runs, paper)
    if frame is not None and not frame.empty:
        mine = frame[frame["experiment"] == experiment] if experiment and "experiment" in frame else frame
        parts += coverage(mine, paper)
    return ", ".join(parts) if parts else PAPER_PROTOCOL


def budget_distance(name: str) -> list[str]:
    """Kim et al.'s ``cpu`` budget against the ``paper`` one, key by key (lists by their length)."""
    from lipgnn.runs.kinds.kim import budget_params

    cpu, paper = budget_params(name, "cpu"), budget_params(name, "paper")
    parts = []
    for key, want in paper.items():
        have = cpu.get(key)
        if have == want:
            continue
        if isinstance(want, list) and isinstance(have, list):
            parts.append(f"{key}: {len(have)} of {len(want)} values")
        elif isinstance(want, (int, float)) and isinstance(have, (int, float)):
            parts.append(f"{key} {have:g} of {want:g}")
        else:
            parts.append(f"{key} {have} (paper {want})")
    return parts


def distance(artifact_name: str, frame: pd.DataFrame, path: Path = PROTOCOL_FILE) -> str:
    """The "paper protocol" column of one artifact's verdicts: ``paper protocol``, the parts that differ joined by
    ``, ``, ``beyond the papers`` (what the YAML says), or ``not stated`` without an entry."""
    entry = protocols(path).get(artifact_name)
    if entry is None:
        return "not stated"
    if "beyond" in entry:
        return str(entry["beyond"])
    if "budgets" in entry:
        parts = budget_distance(str(entry["budgets"]))
    else:
        parts = training_distance(frame, _paper_side_of(artifact_name, path))
    return ", ".join(parts) if parts else PAPER_PROTOCOL


def budget_fraction(*frames: pd.DataFrame | None, artifact: str | None = None) -> float | None:
    """The smallest fraction of the paper's epochs (or TREES passes) that the runs of ``frames`` were given
    (their ``train.epochs``, the cap they ran under), against ``artifact``'s protocol (default: the runs' own
    experiment); None when either side is unknown. ``verdict.MIN_BUDGET`` reads it."""
    runs = pd.concat([f for f in frames if f is not None and not f.empty], ignore_index=True) \
        if any(f is not None and not f.empty for f in frames) else pd.DataFrame()
    if runs.empty or "epochs" not in runs:
        return None
    name = artifact or (str(runs["experiment"].iloc[0]) if "experiment" in runs else "")
    entry = protocols().get(name)
    if entry is None or "beyond" in entry or "budgets" in entry:
        return None
    paper = _paper_side_of(name).get("epochs")
    epochs = [float(e) for e in runs["epochs"].dropna()]
    if not paper or not epochs:
        return None
    return min(epochs) / float(paper)


def is_reduced(text: str) -> bool:
    """Does a distance text name a shortfall (not the paper protocol, nor beyond/not stated)?"""
    return any(ch.isdigit() for ch in text) or " (paper " in text
