"""The energy records' frames and decay-law fits are results-side code: :mod:`lipgnn.results.frames`.

This module re-exports the names the energy artifacts import from here.
"""

from lipgnn.results.frames import (
    ARCH_LABELS,
    ARCHITECTURES,
    energy_frame,
    fit_laws,
    geo_stats,
    geomean_profile,
    law_name,
    sci,
)

__all__ = ["ARCH_LABELS", "ARCHITECTURES", "energy_frame", "fit_laws", "geo_stats", "geomean_profile", "law_name",
           "sci"]
