"""Hydra sweeper ``hydra/sweeper=lipgnn`` (selected by conf/config.yaml): a grid is a design, not a batch of runs.

A grid file ``conf/grid/<experiment>_<budget>.yaml`` sets, under ``hydra.sweeper``:

- ``params``: the main sweep, BasicSweeper's syntax, crossed (``seed: range(5)``, ``depth: 2,5,10,15``);
- ``extra``: a list of further sub-sweeps of the same experiment at that budget (more seeds at some depths, a
  longer epoch budget, an ablation), each crossed on its own; its keys override the file's top-level values
  (``train.epochs``) for its jobs only.

``train.py -m experiment=X budget=B`` launches the main sweep, then each extra in order, every distinct job once.
A command-line value replaces that axis in the main sweep and in every extra. Without a grid file, the
``design_budget`` (``paper``) launches the experiment's ``design``: the paper's grid, written in
``conf/experiment/<name>.yaml`` beside the settings it sweeps. The expansion itself is
:func:`lipgnn.sweep.expand`, shared with ``lipgnn sweep-status``, the command-line check and the results' grid
reader, so every tool sees the runs this sweeper launches.
"""

from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf


@dataclass
class LipgnnSweeperConf:
    _target_: str = "hydra_plugins.lipgnn_sweeper.lipgnn_sweeper.LipgnnSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None
    # entries checked by lipgnn.sweep (one line per bad entry), not by the schema
    extra: list[Any] | None = None
    design: dict[str, str] | None = None   # the paper's grid (conf/experiment/<name>.yaml)
    design_budget: str = "paper"           # the budget that launches ``design`` when no grid file is given


ConfigStore.instance().store(group="hydra/sweeper", name="lipgnn", node=LipgnnSweeperConf, provider="lipgnn")


class LipgnnSweeper(BasicSweeper):
    """BasicSweeper whose job list is :func:`lipgnn.sweep.expand` of the grid (main sweep, then each extra)."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None,
                 extra: list[Any] | None = None, design: dict[str, str] | None = None,
                 design_budget: str = "paper") -> None:
        super().__init__(max_batch_size, params)
        self.sweeper = {"params": params, "extra": extra, "design": design, "design_budget": design_budget}

    def _parse_config(self) -> list[str]:
        return []  # the grid's axes are expanded in split_arguments, per sub-sweep

    def split_arguments(self, overrides: list[Override], max_batch_size: int | None) -> list[list[list[str]]]:
        from lipgnn.sweep import expand

        assert self.config is not None
        budget = OmegaConf.select(self.config, "budget.name", default=None)
        jobs = expand(self.sweeper, budget, [o.input_line for o in overrides])
        size = len(jobs) if max_batch_size in (None, -1) else max_batch_size
        return [jobs[i:i + size] for i in range(0, len(jobs), size)] or [[]]
