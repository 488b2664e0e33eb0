"""Uncertainty of cells and comparisons, and the verdict rules every claim uses.

- A cell's interval is Student's t-interval of the mean over its seeds: mean ± t(0.975, n−1) · s / √n with
  the sample std s (ddof=1); no interval with n < 2.
- A comparison of two cells is the PAIRED difference over seeds: the same seed gives the same split,
  erasure and initialisation here, so the difference per seed removes that shared noise; its interval is
  the t-interval of the per-seed differences (scipy.stats.t).
- Verdicts of a threshold (``greater``): "too few seeds" when n < ``MIN_SEEDS``; "holds" / "does not hold" only
  when the interval excludes the other side of the claim's threshold; undecided ("inconclusive") when it
  straddles it. A claim of no clear lead (``no_clear_lead``) holds when the whole interval lies within ± its
  equivalence band, does not hold when the interval excludes zero, and is undecided otherwise. A comparative
  claim is then judged on the reproduction scale against the paper's own effect (``verdict.outcome``,
  docs/verdicts.md).
- A verdict resting on runs below their declared epoch budget, or on a part of the declared grid only, is
  "under budget" and never decisive.
- Seeds (every claim, paired or not: ``seed_rule``): a decisive verdict rests on at least ``MIN_SEEDS`` seeds; on
  fewer it is reported as "too few seeds", with the verdict those seeds gave in its evidence.
- Multiplicity: per paper, every test once forms one family; Holm's step-down (``holm_adjusted``) and
  Benjamini–Hochberg's (``bh_adjusted``) adjusted p-values decide the adjusted verdicts (the report's
  ``index_rows``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from lipgnn.results.verdict import DECISIVE as SCALE_DECISIVE
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS, NOT_RUN, TIE, TOO_FEW_SEEDS, UNDER_BUDGET

LEVEL = 0.95
MIN_SEEDS = 3


@dataclass(frozen=True)
class Interval:
    """A mean over n values with its two-sided ``LEVEL`` t-interval (NaN bounds when n < 2)."""

    n: int
    mean: float
    lo: float
    hi: float

    def text(self, scale: float = 100.0, digits: int = 1) -> str:
        """``+3.1 [−0.4, +6.6], n=3`` (percent points by default)."""
        if self.n == 0:
            return "n=0"
        mean = f"{scale * self.mean:+.{digits}f}"
        if not math.isfinite(self.lo):
            return f"{mean}, n={self.n}"
        return f"{mean} [{scale * self.lo:+.{digits}f}, {scale * self.hi:+.{digits}f}], n={self.n}"


    def p_value(self, threshold: float = 0.0) -> float:
        """Two-sided p-value of Student's t-test of "mean = ``threshold``" (the interval's own test: p < 1 − LEVEL
        exactly when the interval excludes ``threshold``); NaN with n < 2."""
        if self.n < 2 or not math.isfinite(self.lo):
            return math.nan
        se = (self.hi - self.lo) / 2.0 / float(stats.t.ppf(0.5 + LEVEL / 2, self.n - 1))
        if se == 0.0:
            return 1.0 if self.mean == threshold else 0.0
        return float(2.0 * stats.t.sf(abs(self.mean - threshold) / se, self.n - 1))

    def equivalence_p(self, band: float) -> float:
        """p-value of the two one-sided tests of "|mean| ≥ ``band``" (TOST): the larger one-sided p; below
        1 − LEVEL exactly when the (1 − 2(1 − LEVEL)) t-interval lies inside ± ``band``; NaN with n < 2."""
        if self.n < 2 or not math.isfinite(self.lo):
            return math.nan
        se = (self.hi - self.lo) / 2.0 / float(stats.t.ppf(0.5 + LEVEL / 2, self.n - 1))
        if se == 0.0:
            return 0.0 if abs(self.mean) < band else 1.0
        lower = float(stats.t.sf((self.mean + band) / se, self.n - 1))
        upper = float(stats.t.cdf((self.mean - band) / se, self.n - 1))
        return max(lower, upper)


def t_interval(values: Iterable[float]) -> Interval:
    """Student's t-interval (``LEVEL``) of the mean of the finite ``values``."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(float(v))], dtype=float)
    n = len(data)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan)
    mean = float(data.mean())
    if n < 2:
        return Interval(n, mean, math.nan, math.nan)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * float(data.std(ddof=1)) / math.sqrt(n)
    return Interval(n, mean, mean - half, mean + half)


def paired_difference(a: pd.DataFrame | None, b: pd.DataFrame | None, value: str = "sel_test") -> Interval:
    """t-interval of ``a[value] − b[value]`` over the seeds both have (non-diverged runs; one run per seed). Frames
    without a ``diverged`` column hold finished runs only (e.g. completed records)."""
    if a is None or b is None or a.empty or b.empty:
        return Interval(0, math.nan, math.nan, math.nan)

    def per_seed(runs: pd.DataFrame) -> pd.Series:
        kept = runs[~runs["diverged"].astype(bool)] if "diverged" in runs else runs
        return kept.groupby("seed")[value].mean()

    left, right = per_seed(a), per_seed(b)
    both = left.index.intersection(right.index)
    return t_interval((left[both] - right[both]).tolist())


def greater(diff: Interval, margin: float = 0.0) -> str:
    """Verdict on "a exceeds b by more than ``margin``" from the paired difference a − b."""
    if diff.n == 0:
        return NOT_RUN
    if diff.n < MIN_SEEDS:
        return TOO_FEW_SEEDS
    if diff.lo > margin:
        return HOLDS
    if diff.hi < margin:
        return DOES_NOT_HOLD
    return TIE


def no_clear_lead(diff: Interval, band: float) -> str:
    """Verdict on "a and b are similar, without a clear lead" (equivalence within ± ``band``)."""
    if diff.n == 0:
        return NOT_RUN
    if diff.n < MIN_SEEDS:
        return TOO_FEW_SEEDS
    if -band < diff.lo and diff.hi < band:
        return HOLDS
    if diff.lo > 0 or diff.hi < 0:
        return DOES_NOT_HOLD
    return TIE


def with_budget(verdict: str, under_budget: bool) -> str:
    """``UNDER_BUDGET`` in place of a decided (or tied) verdict that rests on under-budget runs."""
    return UNDER_BUDGET if under_budget and verdict in (HOLDS, DOES_NOT_HOLD, TIE, TOO_FEW_SEEDS) else verdict


def under_budget(runs: pd.DataFrame) -> bool:
    """Does any run fall below its declared epoch budget (``declared_epochs``, set by the engine)?"""
    if runs is None or runs.empty or "declared_epochs" not in runs:
        return False
    declared = runs["declared_epochs"].to_numpy(dtype=float)
    epochs = runs["epochs"].to_numpy(dtype=float)
    return bool(np.any(np.isfinite(declared) & (epochs < declared)))


LEGEND = (f"Verdicts: intervals are two-sided {LEVEL:.0%} Student t-intervals over seeds (cells: of the mean; "
          "comparisons: of the paired per-seed difference, same seed = same split, erasure and init), in "
          "percent points. A comparison is judged against 0 and against the paper's own effect (docs/verdicts.md): "
          "reproduces, smaller or larger than reported, not reproduced (the interval holds 0 and excludes the "
          "paper's effect), reversed, inconclusive (it holds both); direction holds where the paper prints no "
          "number; not comparable when both arms sit near the majority class or chance, or the runs were capped "
          "under a tenth of the protocol's budget. A threshold claim holds or does not hold only when the interval "
          "excludes the other side of its threshold; a claim of no clear lead holds when the interval lies within "
          f"its stated equivalence band. \"too few seeds\": a decisive verdict on fewer than {MIN_SEEDS} seeds, "
          "paired or not. \"under budget\": some runs are below the declared epochs or the declared grid is not "
          "complete for the compared cells.")


def seed_rule(verdict: str, n_seeds: int | None) -> str:
    """``TOO_FEW_SEEDS`` in place of "holds" / "does not hold" resting on fewer than ``MIN_SEEDS`` seeds."""
    if (verdict in (HOLDS, DOES_NOT_HOLD) or verdict in SCALE_DECISIVE) and n_seeds is not None and n_seeds < MIN_SEEDS:
        return TOO_FEW_SEEDS
    return verdict


def holm_adjusted(p_values: Iterable[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: sorted ascending, p_(i) · (m − i + 1) made
    monotone by a running maximum and capped at 1 (m = the number of p-values)."""
    ps = [float(p) for p in p_values]
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def bh_adjusted(p_values: Iterable[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (false discovery rate), in the input order
    (``scipy.stats.false_discovery_control``); empty in, empty out."""
    ps = [float(p) for p in p_values]
    return [float(q) for q in stats.false_discovery_control(ps, method="bh")] if ps else []
