"""The registry of Kim et al.'s experiments and ``lip_estimates``: each runs as units of work, one per job.

An experiment registers a function ``(b, name, budget, seed) -> (config, compute)`` with the unit names a budget's
parameters ``b`` define and the schema of ``b`` (its ``kim`` node: a :class:`~lipgnn.config_schema.KimConfig`
subclass) (:func:`register_unit_experiment`); the ``kim`` job kind (:mod:`lipgnn.runs.kinds.kim`) looks
it up by the experiment's name and runs the unit its job names: the record stores ``config``, and ``compute()``
returns the record's diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lipgnn.errors import ConfigError

__all__ = ["EXPERIMENTS", "Compute", "Unit", "UnitExperiment", "UnitFn", "register_unit_experiment", "unit_experiment"]

Compute = Callable[[], dict[str, Any]]
#: a unit's record config and the computation of its diagnostics
Unit = tuple[dict[str, Any], Compute]
#: ``(b, name, budget, seed) -> Unit``: one unit of an experiment, from its budget's parameters (its schema's dataclass)
UnitFn = Callable[[Any, str, str, int], Unit]


@dataclass(frozen=True)
class UnitExperiment:
    """One experiment run as units: ``units(b)`` names every unit a budget's parameters ``b`` define, in the order
    they run; ``unit(b, name, budget, seed)`` gives one unit's ``(config, compute)``; ``schema``: the dataclass of
    ``b`` (the experiment's ``kim`` node); ``reads_dataset``: whether a unit loads the config's dataset (then the run
    layer checks it before the run's lock)."""

    name: str
    units: Callable[[Any], list[str]]
    unit: UnitFn
    schema: type
    reads_dataset: bool = False


EXPERIMENTS: dict[str, UnitExperiment] = {}


def register_unit_experiment(name: str, units: Callable[[Any], list[str]], schema: type, *,
                             reads_dataset: bool = False) -> Callable[[UnitFn], UnitFn]:
    """Decorator: ``@register_unit_experiment("kim_bounds", units, KimBoundsConfig)`` on the function giving a unit's
    ``(config, compute)`` from its parameters (a ``schema`` instance); ``reads_dataset=True`` where a unit loads the
    config's dataset."""

    def register(fn: UnitFn) -> UnitFn:
        if name in EXPERIMENTS and EXPERIMENTS[name].unit is not fn:
            raise ValueError(f"unit experiment {name!r} is registered twice")
        EXPERIMENTS[name] = UnitExperiment(name, units, fn, schema, reads_dataset)
        return fn

    return register


def unit_experiment(name: str) -> UnitExperiment:
    """The registered experiment ``name`` (one-line :class:`ConfigError` if there is none)."""
    if name not in EXPERIMENTS:
        raise ConfigError(f"experiment_name={name} is not a kim experiment; use one of: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
