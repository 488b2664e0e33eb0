"""The ``kim`` job kind: Kim et al.'s experiments and ``lip_estimates``, one unit of work per job.

A unit (one N and p, one model, one layer stack) is named by ``kim.unit``, an axis of the experiment's sweep. The
budget's parameters live in the ``kim`` node: the paper's protocol, where it states one, in
``conf/experiment/<experiment>.yaml`` (what ``budget=paper`` runs, its units in the sweeper's ``design``), the reduced
one every committed record was made with in ``conf/grid/<experiment>_cpu.yaml``. Its record
stores the unit's own config (:func:`unit`), and its id is derived from that config (:func:`unit_id`):
``<experiment>-<unit>-<budget>-s<seed>-<hash>``. What each experiment computes lives with the Lipschitz code and
registers itself (:mod:`lipgnn.lipschitz.experiments`); this kind runs whichever the experiment names. A unit is
cheap: a rerun skips finished records (``overwrite=true`` redoes them).

    python train.py -m experiment=kim_bounds budget=cpu
    python train.py experiment=kim_invertibility budget=cpu kim.unit=l2-c0.5 seed=0
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lipgnn.errors import ConfigError
from lipgnn.identity import identity_config, loose_digest, plain
from lipgnn.lipschitz.experiments import Unit, unit_experiment
from lipgnn.runs.registry import Job, JobKind, register_job_kind


@register_job_kind("kim")
class Kim(JobKind):
    def validate(self, cfg: DictConfig) -> None:
        _unit_of(cfg)

    def check_inputs(self, cfg: DictConfig, settings: Any) -> None:
        if unit_experiment(settings.experiment_name).reads_dataset:
            super().check_inputs(cfg, settings)

    def run_id(self, cfg: DictConfig) -> str:
        return unit_id(_unit_of(cfg)[0], str(cfg.kim.unit))

    def record_config(self, cfg: DictConfig) -> dict[str, Any]:
        return _unit_of(cfg)[0]

    def compute(self, job: Job) -> dict[str, Any]:
        from lipgnn.train import gc_pause

        gc_pause.resume()
        settings = job.settings
        _, compute = unit(settings.experiment_name, settings.kim, settings.budget.name, settings.seed)
        started = time.time()
        diagnostics = compute()
        return {"status": "completed", "wall_time_s": round(time.time() - started, 3), "diagnostics": diagnostics}


def unit_id(config: Mapping[str, Any], name: str) -> str:
    """A unit's record id, ``<experiment>-<unit>-<budget>-s<seed>-<hash>``: the hash of the unit's own ``config``
    (:func:`lipgnn.identity.loose_digest`), a training config under ``run`` hashed as its
    :func:`lipgnn.identity.identity_config`."""
    tree = plain(config)
    hashed = {**tree, "run": identity_config(tree["run"])} if "run" in tree else tree
    return f"{tree['experiment']}-{name}-{tree['budget']['name']}-s{tree['seed']}-{loose_digest(hashed)}"


def budget_params(experiment: str, budget: str) -> dict[str, Any]:
    """The ``kim`` parameters a budget runs with, read without composing: the experiment's (the paper's protocol)
    with ``conf/grid/<experiment>_<budget>.yaml``'s over them ({} for an experiment without a kim node)."""
    from lipgnn.config import CONF_DIR

    nodes = [OmegaConf.load(path).get("kim") for path in (Path(CONF_DIR) / "experiment" / f"{experiment}.yaml",
                                                         Path(CONF_DIR) / "grid" / f"{experiment}_{budget}.yaml")
             if path.is_file()]
    merged = OmegaConf.merge(*[node for node in nodes if node is not None]) if any(nodes) else {}
    values = OmegaConf.to_container(merged, resolve=True) if merged else {}
    assert isinstance(values, dict)
    values.pop("unit", None)
    return values


def unit(experiment: str, kim: Any, budget: str, seed: int) -> Unit:
    """``(config, compute)`` of a unit: the record's config, and the computation of its diagnostics. ``kim``: the
    job's kim node as its experiment's schema (:attr:`~lipgnn.lipschitz.experiments.UnitExperiment.schema`), which
    names the unit and holds the budget's parameters."""
    declared = unit_experiment(experiment)
    if not isinstance(kim, declared.schema):
        raise ConfigError(f"experiment {experiment} has no kim node of its schema ({declared.schema.__name__}): its "
                          "YAML names the schema first in its defaults list, and a budget's parameters come from "
                          "conf/grid/<experiment>_<budget>.yaml (give budget=cpu or budget=paper)")
    known = declared.units(kim)
    if kim.unit not in known:
        raise ConfigError(f"kim.unit={kim.unit} is not a unit of {experiment} at budget={budget}; use one of: "
                          f"{', '.join(known)}")
    return declared.unit(kim, kim.unit, budget, seed)


def _unit_of(cfg: DictConfig) -> Unit:
    """:func:`unit` of a composed config, for the hooks that name the job before it runs (its id, its record's
    config)."""
    from lipgnn.config import typed

    node = cfg.get("kim")
    kim = typed(node) if isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)) else None
    return unit(str(cfg.experiment_name), kim, str(cfg.budget.name), int(cfg.seed))
