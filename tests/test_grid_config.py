"""One source of truth for a grid job's config: Hydra's compose.

The analysis's grid reader (:mod:`lipgnn.results.grid`) reads the grid and config files directly, milliseconds
for a grid where composing each job would add minutes to ``make report``. Here every declared job of every grid
(each experiment with a grid, at budget=cpu and at the paper's budget) is composed through Hydra
(:func:`lipgnn.sweep.job_config`, the configs ``sweep-status`` reads; itself checked against Hydra's plain
compose) and must have every value the reader declares for it (its point) and the epoch budget of its sub-sweep.
The paper's grids, up to 480000 jobs, are checked on a fixed sample of their jobs, every choice of config
groups among them.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from lipgnn.config import CONF_DIR
from lipgnn.identity import get_dotted
from lipgnn.results.grid import declared_grid, declared_jobs, matches
from lipgnn.sweep import is_group, job_config, sweep_jobs

BUDGETS = ("cpu", "paper")
GRIDS = [(path.stem, budget) for path in sorted((Path(CONF_DIR) / "experiment").glob("*.yaml")) for budget in BUDGETS
         if declared_grid(path.stem, budget) is not None]
#: jobs checked per sub-sweep of a grid larger than this (besides the first job of each choice of config groups)
SAMPLE = 300


def _launched(experiment: str, budget: str, job: list[str]) -> list[str]:
    """A job as ``train.py -m experiment=<experiment> budget=<budget>`` launches it (lipgnn.sweep.sweep_jobs)."""
    return [f"experiment={experiment}", *job, f"budget={budget}"]


def _checked(jobs: list[list[str]], total: int) -> list[int]:
    """Every job of a small grid; of a large one, a fixed sample and the first job of each choice of groups."""
    if total <= 4000:
        return list(range(len(jobs)))
    first: dict[tuple[str, ...], int] = {}
    for index, job in enumerate(jobs):
        first.setdefault(tuple(o for o in job if is_group(o.split("=")[0])), index)
    sample = random.Random(0).sample(range(len(jobs)), min(SAMPLE, len(jobs)))
    return sorted({*first.values(), *sample})


def _differences(cfg: DictConfig, point: dict, epochs: float) -> list[str]:
    wrong = [f"{key}: composed {OmegaConf.select(cfg, key)!r}, declared {value!r}" for key, value in point.items()
             if not matches(cfg, {key: value})]
    composed = get_dotted(cfg, "train.epochs")
    if not math.isnan(epochs) and not math.isclose(float(composed), epochs):
        wrong.append(f"train.epochs: composed {composed!r}, the sub-sweep declares {epochs:g}")
    return wrong


@pytest.mark.parametrize(("experiment", "budget"), GRIDS)
def test_every_job_has_the_config_the_grid_reader_declares(experiment: str, budget: str) -> None:
    grid = declared_grid(experiment, budget)
    jobs_of = declared_jobs(experiment, budget)
    assert grid is not None and [len(s.points) for s in grid.sweeps] == [len(jobs) for jobs in jobs_of]
    # the reader's jobs are the jobs train.py -m launches, each once
    launched = {frozenset(job) for job in sweep_jobs(experiment, [f"budget={budget}"])}
    assert {frozenset(_launched(experiment, budget, job)) for jobs in jobs_of for job in jobs} == launched
    total = sum(len(jobs) for jobs in jobs_of)
    wrong = []
    for sweep, jobs in zip(grid.sweeps, jobs_of, strict=True):
        for index in _checked(jobs, total):
            cfg = job_config(_launched(experiment, budget, jobs[index]))
            wrong += [f"{sweep.name} {' '.join(jobs[index])}: {d}" for d in _differences(cfg, sweep.points[index],
                                                                                         sweep.epochs)]
    assert not wrong, f"{len(wrong)} declared values differ from Hydra's compose:\n" + "\n".join(wrong[:20])


def test_job_config_is_hydras_compose() -> None:
    """The cached two-step compose equals Hydra's compose of the whole job: a group choice, value overrides on
    keys it sets, an interpolation resolved from a swept value (fig5's per-depth pass cap, TREES' depth)."""
    jobs = [_launched("fig5", "cpu", ["dataset.tree_depth=4", "variant=gat_lip_a2", "seed=12"]),
            _launched("table1", "paper", ["train.epochs=1000", "variant=gat", "dataset=pubmed",
                                          "dataset.missing_rate=100", "depth=7", "model.hidden=32", "model.heads=8",
                                          "model.dropout=0", "train.lr=0.1", "seed=3"]),
            _launched("table3", "cpu", ["variant=gat_lip", "dropout=none", "depth=30", "seed=1"])]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for job in jobs:
            assert OmegaConf.to_yaml(job_config(job), resolve=True) == \
                OmegaConf.to_yaml(compose("config", overrides=job), resolve=True), job
    assert job_config(jobs[0]).train.epochs == 500 and job_config(jobs[0]).depth == 5


def test_a_wrong_declared_value_is_found() -> None:
    """The comparison above can fail: a point that says another model, or a sub-sweep with other epochs."""
    grid = declared_grid("table3", "cpu")
    assert grid is not None
    (jobs, *_) = declared_jobs("table3", "cpu")
    sweep = grid.sweeps[0]
    cfg = job_config(_launched("table3", "cpu", jobs[0]))
    assert _differences(cfg, sweep.points[0], sweep.epochs) == []
    assert _differences(cfg, {**sweep.points[0], "model.name": "gcn"}, sweep.epochs)
    assert _differences(cfg, sweep.points[0], sweep.epochs + 1)
