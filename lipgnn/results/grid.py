"""The declared grid of an experiment: the runs its grid file asks for, read without composing every job.

An experiment's grid at a budget is ``conf/grid/<experiment>_<budget>.yaml`` (what ``train.py -m
experiment=<experiment> budget=<budget>`` launches; at the paper's budget without such a file, the experiment's
own ``hydra.sweeper.design``). Its main sweep (``hydra.sweeper.params``) and each ``extra`` sub-sweep (more seeds
at some depths, a longer epoch budget, an ablation) are one :class:`Sweep` each, with its own epoch budget. The
jobs come from :func:`lipgnn.sweep.sub_sweeps`, the expansion the lipgnn sweeper launches; each job's overrides
are mapped to a point, a dict of record-config keys (``model.name``, ``norm.name``, ``model.residual``,
``dataset.name``, ``depth``, ``train.lr``, ``seed`` ...) to the values that run must have. Group choices
(``variant=gat_lip``, ``dropout=none``, ``dataset=cora``) are read from their YAML file: the keys they set
and the names of the groups they override. A key the sweep does not set is not checked.

A job's config has one source of truth, Hydra's compose (:func:`lipgnn.sweep.job_config`, what ``train.py`` and
``lipgnn sweep-status`` read). Composing every job of the grids the records name would add about as long as the
whole of ``make report`` takes (one compose of 0.1-0.3 s per distinct choice of config groups, a millisecond or
more per job), so this reader reads the files directly, in milliseconds; tests/test_grid_config.py composes every
declared job of every grid (the paper's largest on a fixed sample) and checks that each has the values its point
declares and its sub-sweep's epoch budget (:func:`declared_jobs` gives the jobs, in the points' order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lipgnn.config import CONF_DIR
from lipgnn.identity import NEUTRAL, NON_IDENTITY_KEYS, get_dotted
from lipgnn.store.records import IGNORED_CONFIG_KEYS
from lipgnn.sweep import grid_of, sub_sweeps

# Groups whose YAML is placed under its own name (the others in conf/ are ``@package _global_``).
_PACKAGED_GROUPS = ("model", "norm", "dataset", "train", "logger", "budget")


@dataclass(frozen=True)
class Sweep:
    """One sub-sweep of a grid (its main sweep or one ``extra``): its points and the epoch budget it declares."""

    name: str   # its file under conf/ (``grid/fig4_cpu.yaml``), and ``extra[<i>]`` for an extra sub-sweep
    epochs: float
    points: tuple[dict[str, Any], ...]
    # keys every point carries because the experiment or sweep file fixes them (not swept): a record that lacks
    # one (written before the key existed) is not checked on it
    fixed: frozenset[str] = frozenset()
    file: str = ""  # the file under conf/ that declares it


@dataclass(frozen=True)
class DeclaredGrid:
    """Every sweep declared for one experiment at one budget."""

    experiment: str
    budget: str
    sweeps: tuple[Sweep, ...]

    @property
    def points(self) -> list[dict[str, Any]]:
        return [p for s in self.sweeps for p in s.points]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, Mapping):
        return {prefix.rstrip("."): node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flatten(value, f"{prefix}{key}."))
    return out


@cache
def _group_choice(conf_dir: Path, group: str, choice: str) -> dict[str, Any]:
    """The record-config keys a group choice sets (its own keys, and ``<group>.name`` of groups it overrides)."""
    path = conf_dir / group / f"{choice}.yaml"
    if not path.exists():
        return {}
    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    out: dict[str, Any] = {}
    for entry in cfg.pop("defaults", None) or []:
        if isinstance(entry, Mapping):
            for key, value in entry.items():
                name = str(key).replace("override", "").strip().lstrip("/")
                if name in _PACKAGED_GROUPS and value is not None:
                    out.update({k: v for k, v in _group_choice(conf_dir, name, str(value)).items()
                                if k == f"{name}.name"})
    if group in _PACKAGED_GROUPS and "@package _global_" not in path.read_text(encoding="utf-8"):
        # A packaged group's other keys (e.g. dataset.missing_rate) are defaults an experiment may override.
        return {f"{group}.name": cfg["name"]} if "name" in cfg else {}
    flat = _flatten(cfg)
    out.update({k: v for k, v in flat.items() if k not in IGNORED_CONFIG_KEYS and not k.startswith("hydra")})
    return out


_PER_JOB = object()  # a value each job resolves for itself (an interpolation): not checked


@cache
def _fixed_values(path: Path) -> dict[str, Any]:
    """The record-config keys a global config file (an experiment or a sweep file) sets for every job, as
    values: not its defaults list, Hydra's settings, interpolations (resolved per job) or keys that say where
    and how a run executes."""
    if not path.exists():
        return {}
    cfg = OmegaConf.load(path)
    out: dict[str, Any] = {}
    for key, value in _flatten(OmegaConf.to_container(cfg, resolve=False)).items():
        top = key.split(".")[0]
        if (top in ("defaults", "hydra", "experiment_name") or key in IGNORED_CONFIG_KEYS
                or any(key == k or key.startswith(f"{k}.") for k in NON_IDENTITY_KEYS)):
            continue
        if isinstance(value, str) and "${" in value:
            out[key] = _PER_JOB  # a sweep file's interpolation replaces the experiment's value
            continue
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
    return out


def _parse_scalar(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text else number


def _execution_key(key: str) -> bool:
    """A key that says where or how a run executes (``train.checkpoint_every``), not what it computes."""
    return all(any(key == k or key.startswith(f"{k}.") for k in keys) for keys in (IGNORED_CONFIG_KEYS,
                                                                                   NON_IDENTITY_KEYS))


def _point(conf_dir: Path, job: Iterable[str]) -> dict[str, Any]:
    """The record-config keys one job's overrides set: a group choice's keys, else the value itself."""
    out: dict[str, Any] = {}
    for override in job:
        out.update(_override_keys(conf_dir, override))
    return out


@cache
def _override_keys(conf_dir: Path, override: str) -> dict[str, Any]:
    """The record-config keys one override sets (cached: a paper grid repeats each override over up to hundreds
    of thousands of jobs)."""
    key, _, value = override.partition("=")
    key = key.lstrip("+~")
    if (conf_dir / key).is_dir():       # a config group: the keys its choice sets
        return _group_choice(conf_dir, key, value)
    return {} if _execution_key(key) else {key: _parse_scalar(value)}


def _default_epochs(conf_dir: Path, experiment: str) -> Any:
    """``train.epochs`` of the experiment file, else of the train group's default."""
    for path in (conf_dir / "experiment" / f"{experiment}.yaml", conf_dir / "train" / "default.yaml"):
        if path.exists():
            cfg = OmegaConf.load(path)
            epochs = OmegaConf.select(cfg, "train.epochs" if path.parent.name == "experiment" else "epochs",
                                      default=None)
            if epochs is not None:
                return epochs
    return None


def _sweep_epochs(file_cfg: DictConfig | None, points: list[dict[str, Any]], default: Any) -> float:
    """The epoch budget a sub-sweep declares: its own ``train.epochs`` (an extra's key), else the grid file's,
    else the experiment's default. An interpolation (fig5: a per-depth pass cap) is resolved per point from the
    file's values and the point's; a sub-sweep whose points resolve to different values, or that cannot be
    resolved here, declares no single budget (NaN): no run of it is flagged for its epochs."""
    values: set[Any] = {p["train.epochs"] for p in points if "train.epochs" in p}
    if not values and file_cfg is not None and "epochs" in (OmegaConf.select(file_cfg, "train") or {}):
        if not OmegaConf.is_interpolation(file_cfg.train, "epochs"):
            values = {file_cfg.train.epochs}
        else:
            base = OmegaConf.masked_copy(file_cfg, [k for k in file_cfg if k not in ("hydra", "defaults")])
            for point in points:
                cfg = base.copy()
                for key, value in point.items():
                    OmegaConf.update(cfg, key, value, force_add=True)
                values.add(OmegaConf.select(cfg, "train.epochs", default=None, throw_on_resolution_failure=False))
    elif not values:
        values = {default}
    if len(values) != 1:
        return math.nan
    (epochs,) = values
    return float(epochs) if isinstance(epochs, (int, float)) and not isinstance(epochs, bool) else math.nan


def declared_grid(experiment: str, budget: str, conf_dir: Path | None = None) -> DeclaredGrid | None:
    """The declared sweeps of ``experiment`` at ``budget`` (under ``conf_dir``, default ``CONF_DIR``), or None
    when it declares none."""
    return _declared_grid(experiment, budget, Path(conf_dir if conf_dir is not None else CONF_DIR))


def _grid_file(experiment: str, budget: str, conf_dir: Path) -> tuple[Path, DictConfig, list[list[list[str]]]] | None:
    """The file that declares ``experiment``'s grid at ``budget`` (``grid/<experiment>_<budget>.yaml``, else, at
    the paper's budget, the experiment's design), its content, and the jobs of each of its sub-sweeps (the main
    sweep, then each ``extra``) as :func:`lipgnn.sweep.sub_sweeps`, the lipgnn sweeper's own expansion, makes
    them; None when it declares no grid."""
    path = conf_dir / "grid" / f"{experiment}_{budget}.yaml"
    source = path if path.exists() else conf_dir / "experiment" / f"{experiment}.yaml"
    if not source.exists():
        return None
    file_cfg = OmegaConf.load(source)
    node = OmegaConf.select(file_cfg, "hydra.sweeper", default=None)
    sweeper = OmegaConf.to_container(node, resolve=False) if node is not None else {}
    params, extra = grid_of(sweeper, budget)
    if not params and not extra:
        return None
    return source, file_cfg, sub_sweeps(params, extra)


def declared_jobs(experiment: str, budget: str, conf_dir: Path | None = None) -> list[list[list[str]]]:
    """The overrides of every job of each sub-sweep of the declared grid (``[]`` when none), in the order of the
    points of :func:`declared_grid`'s sweeps; each is launched as ``experiment=<experiment> budget=<budget> <job>``.
    What tests/test_grid_config.py composes with Hydra to check each point against its job's config."""
    found = _grid_file(experiment, budget, Path(conf_dir if conf_dir is not None else CONF_DIR))
    return found[2] if found is not None else []


@cache
def _declared_grid(experiment: str, budget: str, conf_dir: Path) -> DeclaredGrid | None:
    """The declared grid file's sub-sweeps (:func:`_grid_file`), one :class:`Sweep` each, its jobs mapped to
    points."""
    found = _grid_file(experiment, budget, conf_dir)
    if found is None:
        return None
    source, file_cfg, jobs_of = found
    experiment_file = conf_dir / "experiment" / f"{experiment}.yaml"
    in_grid_file = source != experiment_file
    # Every job of a sweep has the values its experiment file and its grid file set outside the swept axes (the
    # epoch budget among them): a record without them is not a job of this sweep.
    fixed = {**_fixed_values(experiment_file), **(_fixed_values(source) if in_grid_file else {})}
    fixed = {k: v for k, v in fixed.items() if v is not _PER_JOB}
    default = _default_epochs(conf_dir, experiment)
    where = f"{source.parent.name}/{source.name}"
    sweeps = []
    for i, jobs in enumerate(jobs_of):
        points = [_point(conf_dir, job) for job in jobs]
        epochs = _sweep_epochs(file_cfg if in_grid_file else None, points, default)
        sweeps.append(Sweep(where if i == 0 else f"{where} extra[{i - 1}]", epochs,
                            tuple({**fixed, **point} for point in points),
                            frozenset(fixed) - {k for point in points for k in point}, where))
    return DeclaredGrid(experiment, budget, tuple(sweeps))


# ----------------------------------------------------------------------------------------- matching


def _same(value: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return bool(value) == bool(expected)
    if isinstance(expected, (int, float)):
        try:
            return math.isclose(float(value), float(expected), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return str(value) == str(expected)


def matches(cfg: Mapping[str, Any], point: Mapping[str, Any], skip: tuple[str, ...] = (),
            if_present: frozenset[str] = frozenset()) -> bool:
    """Does a record's config have every value a declared point asks for (but the keys in ``skip``)? (A key the
    run lacks is not checked when it is in ``if_present``, else counts as its default: False for booleans, its
    neutral value for a key added later, else a mismatch.)"""
    for key, expected in point.items():
        if key in skip:
            continue
        value = get_dotted(cfg, key)
        if value is None and key in if_present:
            continue
        if value is None and isinstance(expected, bool):
            value = False
        if value is None and key in NEUTRAL:  # a key added after the record was written, at its neutral value
            value = NEUTRAL[key]
        if not _same(value, expected):
            return False
    return True


@dataclass(frozen=True)
class GridCheck:
    """Per record: inside a declared point or not, and the smallest epoch budget of the sweeps it belongs to."""

    in_grid: pd.Series        # bool, indexed like the frame
    declared_epochs: pd.Series  # float, NaN outside the grid
    grids: dict[str, DeclaredGrid | None]


def check_grid(df: pd.DataFrame, conf_dir: Path | None = None) -> GridCheck:
    """Place every record of ``df`` in its experiment's declared grid (at the record's budget).

    A record is a job of a sweep when it has every value a point of the sweep asks for (its swept values and
    the values the experiment and sweep files fix). The epoch budget is the one value a record may lack and
    still count: a record with other epochs stands for its point only while no record of that point has the
    declared epochs (a sweep launched with fewer epochs is judged "under budget"); beside a record with the
    declared epochs it is a stray, outside the grid, never a candidate. ``declared_epochs`` is the smallest budget
    of the sweeps a record belongs to. An experiment without any grid file for a budget declares nothing: its
    records all count as inside.
    A record inside several sweeps with different epoch budgets (a fig4 point in both the main sweep of
    ``fig4_cpu.yaml``, 200 epochs, and its 1000-epoch extra) is judged against the SMALLEST of them: a run is
    complete when it meets the budget of some sweep that asks for it, so a 200-epoch run of the 200-epoch sweep is
    never "under budget" because a longer sweep also covers its point (the longer sweep's own runs carry their
    longer ``train.epochs`` and form their own cells).
    """
    epochs: list[float] = []
    hits: list[list[tuple[str, int, bool]] | None] = []   # per record: (sweep, point, has the sweep's epochs)
    grids: dict[str, DeclaredGrid | None] = {}
    for cfg, experiment, budget in zip(df["config"], df["experiment"], df["budget"], strict=True):
        key = f"{experiment}_{budget}"
        if key not in grids:
            grids[key] = declared_grid(str(experiment), str(budget), conf_dir)
        grid = grids[key]
        if grid is None:
            hits.append(None)
            epochs.append(math.nan)
            continue
        mine, budgets = [], []
        for sweep in grid.sweeps:
            index = next((i for i, p in enumerate(sweep.points)
                          if matches(cfg, p, skip=("train.epochs",), if_present=sweep.fixed)), None)
            if index is not None:
                full = math.isnan(sweep.epochs) or _same(get_dotted(cfg, "train.epochs"), sweep.epochs)
                mine.append((f"{key}/{sweep.name}", index, full))
                budgets.append(sweep.epochs)
        hits.append(mine)
        epochs.append(min(budgets) if budgets else math.nan)   # the smallest budget (docstring), never the largest
    at_budget = {(name, index) for mine in hits if mine for name, index, full in mine if full}
    in_grid = [True if mine is None else any(full or (name, index) not in at_budget for name, index, full in mine)
               for mine in hits]
    return GridCheck(pd.Series(in_grid, index=df.index, dtype=bool),
                     pd.Series(epochs, index=df.index, dtype=float), grids)


def point_keys(point: Mapping[str, Any]) -> dict[str, Any]:
    """The table/figure coordinates a declared point fixes (absent ones are not fixed by the sweep)."""
    from lipgnn.store.records import variant_label

    out: dict[str, Any] = {}
    if "model.name" in point:
        out["variant"] = variant_label(point["model.name"], point.get("norm.name", "none"),
                                       point.get("model.residual", False))
    for key, column in (("dataset.name", "dataset"), ("dataset.missing_rate", "missing_rate"), ("depth", "depth"),
                        ("dataset.tree_depth", "tree_depth")):
        if key in point:
            out[column] = point[key]
    return out


def declared_sweeps(df: pd.DataFrame, experiment: str, budgets: Iterable[str] | None = None) -> list[Sweep]:
    """Every sweep declared for ``experiment`` at the budgets of its records in ``df`` (only those in ``budgets``
    when given): the one place the artifacts ask what a grid declares."""
    mine = df[df["experiment"] == experiment] if not df.empty and "experiment" in df else df.iloc[0:0]
    present = set(mine["budget"].dropna().astype(str)) if "budget" in mine else set()
    if budgets is not None:
        present &= set(budgets)
    grids = [declared_grid(experiment, b) for b in sorted(present)]
    return [s for g in grids if g is not None for s in g.sweeps]


def expected_runs(df: pd.DataFrame, experiment: str, **cell: Any) -> int | None:
    """Runs the declared grid(s) of ``experiment`` (at the budgets of its records in ``df``) put in ``cell``
    (e.g. ``variant="GAT-Lip", dataset="cora", depth=30``); None when no grid is declared."""
    sweeps = declared_sweeps(df, experiment)
    if not sweeps:
        return None
    cell = {k: (str(v).lower() if k == "dataset" else v) for k, v in cell.items()}
    count = 0
    for s in sweeps:
        for point in s.points:
            keys = point_keys(point)
            if all(k not in keys or _same(keys[k], v) for k, v in cell.items()):
                count += 1
    return count


def _declared_counts(runs: pd.DataFrame, experiment: str, keys: list[str]) -> dict[tuple, int | None]:
    """Per point of ``keys`` present in ``runs``: the runs the declared grid puts in it (None: no grid declared)."""
    groups = runs.groupby(keys, dropna=True, sort=False).groups
    return {point: expected_runs(runs, experiment, **dict(zip(keys, point, strict=True)))
            for point in (g if isinstance(g, tuple) else (g,) for g in groups)}


def _fullest(counts: dict[tuple, int | None], runs: pd.DataFrame, keys: list[str]) -> int:
    from lipgnn.results.protocol import full_grid_size

    if runs.empty:
        return 0
    declared = [c for c in counts.values() if c]
    return max(declared) if declared else full_grid_size(runs, keys)


def declared_full(runs: pd.DataFrame, experiment: str, keys: list[str]) -> int:
    """Runs a complete point of ``keys`` (e.g. dataset, variant, depth) has: the most the declared grid puts
    in any point present in ``runs``, so a point is partial against what its sweep asks for, not against the
    fullest point run so far. Without a declared grid, the fullest point's count (``full_grid_size``)."""
    counts = _declared_counts(runs, experiment, keys) if not runs.empty else {}
    return _fullest(counts, runs, keys)


def declared_per_point(runs: pd.DataFrame, experiment: str, keys: list[str]) -> Callable[[str, int], int]:
    """``(variant, depth) -> runs`` a complete point of ``runs`` has (``keys``: the fixed keys of ``runs``, e.g. its
    one dataset, then variant and depth): what the declared grid puts in that point, so that a point whose sweep
    declares more seeds (a deep point's extra seeds) is not held against the others. A point no sweep declares
    falls back to :func:`declared_full`."""
    counts = _declared_counts(runs, experiment, keys) if not runs.empty else {}
    fallback = _fullest(counts, runs, keys)
    by_point = {point[-2:]: count or fallback for point, count in counts.items()}  # the points present, counted once
    fixed = dict(zip(keys[:-2], next(iter(counts))[:-2], strict=True)) if counts else {}

    def full(variant: str, depth: int) -> int:
        if (variant, depth) not in by_point:  # a point without runs (a variant another dataset has, say)
            declared = expected_runs(runs, experiment, **fixed, **{keys[-2]: variant, keys[-1]: depth})
            by_point[(variant, depth)] = declared or fallback
        return by_point[(variant, depth)]

    return full
