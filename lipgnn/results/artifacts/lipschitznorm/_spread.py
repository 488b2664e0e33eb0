"""Is one cell ranked above another by more than the seed spread? The rule Table 3 and Fig. 5 rank with.

Two cells a and b (the runs of their selected configurations) are compared on the seeds both have:

1. at least ``stats.MIN_SEEDS`` paired seeds: the 95% t-interval of the paired per-seed difference a − b
   decides (``stats.greater``): a above b when it lies above 0, b above a when below 0, "tie" when it
   straddles 0;
2. two paired seeds (a t-interval with one degree of freedom says little): "tie" when the mean paired
   difference is smaller than the pooled sample std of the two cells, sqrt((s_a² + s_b²) / 2) (ddof=1, each
   over its own non-diverged seeds); otherwise "too few seeds" (the order of the means is printed, not
   judged);
3. one paired seed: "tie" only when the two values are equal (e.g. both at 100% train accuracy), otherwise
   "too few seeds".

A tie is declared on weaker evidence than a lead on purpose: a lead must survive the interval, while a
difference inside one standard deviation is not a ranking whatever the seed count. docs/reference.md states the
rule beside the Table 3 and Fig. 5 protocols.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lipgnn.results.stats import MIN_SEEDS, Interval, greater, paired_difference
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS, NOT_RUN, TIE, TOO_FEW_SEEDS

PAIRED_INTERVAL = "paired 95% t-interval"
POOLED_STD = "|paired mean| vs pooled std (2 seeds)"
ONE_SEED = "one seed"


@dataclass(frozen=True)
class Ranking:
    """a vs b: ``verdict`` is HOLDS (a above b), DOES_NOT_HOLD (b above a), TIE, TOO_FEW_SEEDS or NOT_RUN."""

    verdict: str
    diff: Interval          # paired a − b (fractions)
    pooled_std: float       # fractions; NaN when a cell has one seed
    rule: str

    def text(self) -> str:
        """``paired difference +1.0 [-0.5, +2.5], n=5 points (rule: ...)`` in percent points."""
        pooled = f"; pooled std {100.0 * self.pooled_std:.1f}" if math.isfinite(self.pooled_std) else ""
        return f"paired difference {self.diff.text()} points{pooled} (rule: {self.rule})"


def _values(runs: pd.DataFrame | None, value: str) -> np.ndarray:
    if runs is None or runs.empty:
        return np.asarray([], dtype=float)
    ok = runs[~runs["diverged"].astype(bool)]
    return ok[value].to_numpy(dtype=float)


def pooled_std(a: pd.DataFrame | None, b: pd.DataFrame | None, value: str) -> float:
    """sqrt((s_a² + s_b²) / 2), each sample std (ddof=1) over that cell's non-diverged runs; NaN below 2 runs."""
    va, vb = _values(a, value), _values(b, value)
    if len(va) < 2 or len(vb) < 2:
        return math.nan
    return math.sqrt((float(np.var(va, ddof=1)) + float(np.var(vb, ddof=1))) / 2.0)


def rank(a: pd.DataFrame | None, b: pd.DataFrame | None, value: str = "sel_test") -> Ranking:
    """Is ``a`` above ``b`` on ``value`` by more than the seed spread? (module docstring: rules 1-3)."""
    diff = paired_difference(a, b, value)
    pooled = pooled_std(a, b, value)
    if diff.n == 0:
        return Ranking(NOT_RUN, diff, pooled, PAIRED_INTERVAL)
    if diff.n >= MIN_SEEDS:
        return Ranking(greater(diff), diff, pooled, PAIRED_INTERVAL)
    if diff.n >= 2:
        within = math.isfinite(pooled) and abs(diff.mean) < pooled
        return Ranking(TIE if within else TOO_FEW_SEEDS, diff, pooled, POOLED_STD)
    return Ranking(TIE if diff.mean == 0.0 else TOO_FEW_SEEDS, diff, pooled, ONE_SEED)


def relation(ranking: Ranking, a: str, b: str) -> str:
    """``a > b``, ``b > a``, ``a ≈ b (tie)`` or ``a vs b: too few seeds`` for a report line."""
    return {HOLDS: f"{a} > {b}", DOES_NOT_HOLD: f"{b} > {a}", TIE: f"{a} ≈ {b} (tie)"}.get(
        ranking.verdict, f"{a} vs {b}: {ranking.verdict}")
