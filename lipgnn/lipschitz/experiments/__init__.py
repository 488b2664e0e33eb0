"""Kim et al.'s experiments (``kim_bounds``, ``kim_divergence``, ``kim_invertibility``) and ``lip_estimates``, one
module each, registered by name (:mod:`lipgnn.lipschitz.experiments.registry`); importing this package registers
them."""

from lipgnn.lipschitz.experiments import kim_bounds, kim_divergence, kim_invertibility, lip_estimates
from lipgnn.lipschitz.experiments.registry import EXPERIMENTS, Unit, UnitExperiment, unit_experiment

__all__ = ["EXPERIMENTS", "Unit", "UnitExperiment", "kim_bounds", "kim_divergence", "kim_invertibility",
           "lip_estimates", "unit_experiment"]
