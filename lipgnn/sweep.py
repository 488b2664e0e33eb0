"""Expand an experiment's Hydra sweep into its runs, and report which of them are done.

:func:`expand` is the one expansion of a grid: the lipgnn sweeper (``hydra_plugins/lipgnn_sweeper``, what
``python train.py -m`` runs), :func:`check_command_line`, ``sweep-status`` and the results' grid reader
(``lipgnn.results.grid``) all call it. A grid is ``hydra.sweeper.params`` (the main sweep, crossed with
BasicSweeper's expansion) followed by each ``hydra.sweeper.extra`` entry crossed on its own; every distinct job
once. :func:`job_config` composes one job through Hydra, cached per distinct choice of config groups: the job
configs ``sweep-status`` reads, and the reference the results' grid reader is tested against.

``lipgnn sweep-status table3 budget=cpu`` composes exactly what ``python train.py -m experiment=table3
budget=cpu`` would launch, computes each job's
stable run id, and looks its record up in ``results_dir``: done / diverged / failed / missing, plus the
records in the experiment's folder that no job of the declared grid produces ("outside the grid"). A
missing run that left a checkpoint (``train.checkpoint_every``) is shown with how far it got, since the
next launch of the same sweep resumes it there.
An experiment with no ``conf/experiment/<name>.yaml`` (an ad-hoc sweep, ``experiment_name=<name>``) has
no declared grid: its records are listed by status.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

# BasicSweeper.split_arguments is the expansion Hydra's multirun itself uses, and ConfigLoaderImpl's
# _apply_overrides_to_config the last step of Hydra's compose (a job's value overrides); Hydra exposes no public
# API for either, so this module reaches into hydra._internal for those two functions.
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf

from lipgnn.config import CONF_DIR, validate_launcher, validate_output_dir
from lipgnn.config import compose as compose_config
from lipgnn.errors import ConfigError


def _axis(key: str, value: Any, where: str) -> str:
    if not isinstance(key, str) or not key or isinstance(value, (Mapping, list, tuple, ListConfig, DictConfig)):
        raise ConfigError(f"{where}: `{key}: {value}` is not an axis; write `key: value` or `key: v1,v2` "
                          "(Hydra's sweep syntax, e.g. `seed: range(5)`)")
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def _sub_sweep(entry: Any, where: str) -> list[str]:
    if not isinstance(entry, (Mapping, DictConfig)) or not entry:
        raise ConfigError(f"{where} must be a mapping of axes like `{{seed: 3,4, depth: 30}}`, got {entry!r}")
    return [_axis(key, value, where) for key, value in entry.items()]


def sub_sweeps(params: Mapping[str, Any] | None, extra: Sequence[Any] | None = None,
               arguments: Sequence[str] = ()) -> list[list[list[str]]]:
    """The jobs of each sub-sweep of a grid, as override lists, in launch order: ``params`` (the main sweep) then
    every entry of ``extra``, each crossed on its own with Hydra's BasicSweeper expansion.

    ``arguments`` (the command line's overrides) follow each sub-sweep's axes, so a command-line value replaces
    that axis in the main sweep and in every extra (BasicSweeper's own rule for ``params``), and a fixed
    command-line value reaches every job. An extra's keys override the grid file's top-level values for its jobs
    only (they are overrides of those jobs). A sub-sweep that is not a mapping of axes is a one-line ConfigError.
    """
    lines = [[_axis(key, value, "hydra.sweeper.params") for key, value in (params or {}).items()]]
    if extra is not None and not isinstance(extra, (list, tuple, ListConfig)):
        raise ConfigError(f"hydra.sweeper.extra must be a list of mappings of axes, got {extra!r}")
    lines += [_sub_sweep(entry, f"hydra.sweeper.extra[{i}]") for i, entry in enumerate(extra or [])]
    parser = OverridesParser.create()
    out = []
    for i, axes in enumerate(lines):
        try:
            parsed = parser.parse_overrides([*axes, *arguments])
        except OverrideParseException as exc:
            where = "hydra.sweeper.params" if i == 0 else f"hydra.sweeper.extra[{i - 1}]"
            raise ConfigError(f"{where} or the command line: {' '.join(str(exc).split())}") from None
        out.append([job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch])
    return out


def union(sweeps: Sequence[Sequence[Sequence[str]]]) -> list[list[str]]:
    """The jobs of all sub-sweeps in order, each distinct job (the same set of overrides) once."""
    seen: set[frozenset[str]] = set()
    jobs = []
    for sweep in sweeps:
        for job in sweep:
            key = frozenset(job)
            if key not in seen:
                seen.add(key)
                jobs.append(list(job))
    return jobs


def grid_of(sweeper: Mapping[str, Any], budget: str | None) -> tuple[Mapping[str, Any] | None, Sequence[Any] | None]:
    """The (params, extra) a sweeper node launches at ``budget``: the grid file's, else (at the sweeper's
    ``design_budget``, the paper's) the experiment's ``design``."""
    params, extra = sweeper.get("params"), sweeper.get("extra")
    if not params and not extra and budget is not None and budget == sweeper.get("design_budget", "paper"):
        return sweeper.get("design"), None
    return params, extra


def expand(sweeper: Mapping[str, Any], budget: str | None, arguments: Sequence[str] = ()) -> list[list[str]]:
    """Every job of a multirun: the one expansion the lipgnn sweeper (``hydra_plugins/lipgnn_sweeper``),
    ``sweep-status`` and ``check_command_line`` share; the results' grid reader takes the same :func:`grid_of` and
    :func:`sub_sweeps`, one sub-sweep at a time (each declares its own epoch budget)."""
    params, extra = grid_of(sweeper, budget)
    return union(sub_sweeps(params, extra, arguments))


def is_finished(cfg: DictConfig) -> bool:
    """Does the job ``cfg`` (composed) have a finished record (completed or diverged), so that launching it would
    only skip it? (``overwrite=true`` reruns every job: then none is finished.)"""
    from lipgnn.runs import job_id  # the job's id by its kind (a training run, an energy measurement, ...)
    from lipgnn.runs.layer import finished_record  # what the run layer itself skips
    from lipgnn.store import run_record_path

    if cfg.get("overwrite"):
        return False
    cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # a sweep's hydra node resolves per job
    return finished_record(run_record_path(str(cfg.results_dir), str(cfg.experiment_name), job_id(cfg))) is not None


def sweep_jobs_from(overrides: Sequence[str]) -> tuple[list[list[str]], DictConfig]:
    """The override list of every job of ``train.py -m <overrides>``, in launch order, and the hydra node."""
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(list(overrides)) if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        head = compose("config", overrides=fixed, return_hydra_config=True)
    budget = OmegaConf.select(head, "budget.name", default=None)
    return expand(head.hydra.sweeper, budget, list(overrides)), head.hydra


def check_command_line(argv: Sequence[str]) -> None:
    """Compose and validate every job ``train.py <argv>`` would start, before Hydra starts any of them.

    Raises :class:`~lipgnn.errors.ConfigError` on the first invalid job. Flags Hydra handles itself (``--help``,
    ``--cfg``, ...) skip the check.
    """
    args = list(argv)
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in args):
        return
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    multirun = len(overrides) != len(args) or "hydra.mode=MULTIRUN" in overrides
    if not multirun:
        compose_config(overrides, hydra=True)
        return
    jobs, hydra_cfg = sweep_jobs_from(overrides)
    validate_launcher(hydra_cfg)
    validate_output_dir(hydra_cfg, "hydra.sweep.dir")
    from lipgnn.runs import job_kind

    for job in jobs:
        cfg = compose_config(job)
        job_kind(cfg).validate(cfg)  # the kind's own checks (a kim unit, a training run's epochs), as a run does


def sweep_jobs(experiment: str, overrides: Sequence[str] = ()) -> list[list[str]]:
    """The override list of every job of ``train.py -m experiment=<experiment> <overrides>``, in launch order."""
    jobs, _ = sweep_jobs_from([f"experiment={experiment}", *overrides])
    return [[f"experiment={experiment}", *(o for o in job if not o.startswith("experiment="))] for job in jobs]


@cache
def _parsed(override: str) -> Any:
    """One override as Hydra parses it (cached: a grid repeats each override over many jobs)."""
    (parsed,) = OverridesParser.create().parse_overrides([override])
    return parsed


@cache
def is_group(key: str) -> bool:
    """Is ``key`` (an override's key) a config group of conf/ (``variant``, ``dataset``), not a config value?"""
    return (Path(CONF_DIR) / key).is_dir()


@cache
def _composed_defaults(groups: tuple[str, ...]) -> DictConfig:
    """Hydra's compose of the config-group overrides ``groups`` alone (the defaults list they pick, merged), once
    per distinct set: a grid repeats each set over all its scalar axes (seeds, depths, learning rates)."""
    if GlobalHydra.instance().is_initialized():
        return compose("config", overrides=list(groups))
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=list(groups))


def job_config(job: Sequence[str]) -> DictConfig:
    """The config ``train.py <job>`` composes, before validation: Hydra's compose in its own two steps, the
    defaults list the job's config-group overrides pick (composed once per distinct set of them, cached), then
    the job's value overrides applied by Hydra's own rule (``ConfigLoaderImpl._apply_overrides_to_config``, the
    step Hydra's compose ends with). Equal to ``hydra.compose("config", job)`` (tests/test_grid_config.py), at
    about a millisecond a job once its groups are composed: the one way a sweep's job configs are made
    (``sweep-status``, the check of the analysis's grid reader)."""
    parsed = [_parsed(override) for override in job]
    groups = [o for o in parsed if is_group(o.key_or_group)]
    cfg = copy.deepcopy(_composed_defaults(tuple(o.input_line for o in groups)))
    ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if o not in groups], cfg)
    return cfg


def expand_sweep(experiment: str, overrides: Sequence[str] = ()) -> list[DictConfig]:
    """Every job config of the sweep (:func:`job_config`), in launch order."""
    return [job_config(job) for job in sweep_jobs(experiment, overrides)]


def is_declared(experiment: str) -> bool:
    return (Path(CONF_DIR) / "experiment" / f"{experiment}.yaml").is_file()


@dataclass
class SweepStatus:
    rows: list[tuple[str, str]]  # (run_id, completed|diverged|failed|missing) of each declared job
    outside: list[tuple[str, str]] = field(default_factory=list)  # records no declared job produces
    # missing runs with a checkpoint: run_id -> "epoch <done> of <planned>[, best train <acc>]"
    resumable: dict[str, str] = field(default_factory=dict)
    # missing runs whose checkpoint file is not a valid lipgnn checkpoint: run_id -> why (one line)
    invalid: dict[str, str] = field(default_factory=dict)


def _resumable(results_dir: str | Path, experiment: str,
               missing: dict[str, int]) -> tuple[dict[str, str], dict[str, str]]:
    """How far each missing run (run_id -> planned epochs) got, for those that left a checkpoint; and why the
    checkpoint files that are not valid checkpoints are not (read from their headers only)."""
    from lipgnn.store import checkpoint_file

    paths = {rid: checkpoint_file(results_dir, experiment, rid) for rid in missing}
    paths = {rid: path for rid, path in paths.items() if path.is_file()}
    if not paths:
        return {}, {}  # nothing to read: torch is not imported
    from lipgnn.store.checkpoint import InvalidCheckpoint, checkpoint_progress

    found: dict[str, str] = {}
    invalid: dict[str, str] = {}
    for rid, path in paths.items():
        try:
            progress = checkpoint_progress(path)  # the header only: a checkpoint's state is never loaded here
        except InvalidCheckpoint as exc:
            invalid[rid] = f"{exc}; a rerun moves it aside and starts fresh"
            continue
        if progress is None:
            continue
        epoch, best_train = progress
        text = f"epoch {epoch} of {missing[rid]}"
        if best_train.get("train") is not None:
            text += f", best train {100 * float(best_train['train']):.2f}%"
        found[rid] = text
    return found, invalid


def sweep_status(experiment: str, results_dir: str | Path, overrides: Sequence[str] = ()) -> SweepStatus:
    from lipgnn.runs import job_id  # each job's id by its kind (lipgnn.runs)
    from lipgnn.store import read_record, record_paths

    present = {}
    for path in record_paths(results_dir, experiment):
        record = read_record(path)
        if record is not None:
            present[path.stem] = record.get("status", "failed")
    if not is_declared(experiment):
        return SweepStatus(rows=sorted(present.items()))
    planned = {job_id(cfg): int(cfg.train.epochs) for cfg in expand_sweep(experiment, overrides)}
    rows = [(rid, present.get(rid, "missing")) for rid in planned]
    missing = {rid: planned[rid] for rid, state in rows if state == "missing"}
    resumable, invalid = _resumable(results_dir, experiment, missing)
    return SweepStatus(rows=rows, outside=sorted((r, s) for r, s in present.items() if r not in planned),
                       resumable=resumable, invalid=invalid)


def print_sweep_status(experiment: str, results_dir: str | Path, overrides: Sequence[str] = ()) -> int:
    """Print the status; returns 0 (missing or failed runs are reported, not an error of this command)."""
    status = sweep_status(experiment, results_dir, overrides)
    counts = Counter(s for _, s in status.rows)
    for run_id, state in status.rows:
        if state != "completed":
            note = f"  (checkpoint: {status.resumable[run_id]})" if run_id in status.resumable else ""
            if run_id in status.invalid:
                note = f"  (checkpoint not used: {status.invalid[run_id]})"
            print(f"{state:9s} {run_id}{note}")
    for run_id, state in status.outside:
        print(f"outside the grid ({state}) {run_id}")
    grid = "declared grid" if is_declared(experiment) else "records (ad-hoc: no declared grid)"
    print(f"{experiment} {' '.join(overrides)}: {len(status.rows)} runs in the {grid} — {counts['completed']} done, "
          f"{counts['diverged']} diverged, {counts['failed']} failed, {counts['missing']} missing"
          f"{f' ({len(status.resumable)} with a checkpoint to resume)' if status.resumable else ''}; "
          f"{len(status.outside)} records outside the grid")
    return 0
