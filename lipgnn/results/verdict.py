"""Verdict objects: one paper claim, tested against our runs, as data rather than a sentence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
TIE = "inconclusive"   # an undecided test: the interval straddles the claim's threshold
TOO_FEW_SEEDS = "too few seeds"
UNDER_BUDGET = "under budget"
NOT_RUN = "not run"
HOLDS_IN_PART = "holds in part"
CANNOT_JUDGE = "cannot be judged"

VERDICTS = (HOLDS, DOES_NOT_HOLD, TIE, TOO_FEW_SEEDS, UNDER_BUDGET, NOT_RUN, HOLDS_IN_PART, CANNOT_JUDGE)


@dataclass(frozen=True)
class Claim:
    """A paper's claim and our verdict on it.

    ``quote`` is the paper's own words, ``section`` where they stand (e.g. '§6.2'), ``verdict`` one of the
    constants above, ``evidence`` one line of our numbers, ``n_runs`` the records the verdict rests on and
    ``anchor`` the report anchor (or link target) where the evidence is shown. Optional: ``n_seeds`` the seeds
    the verdict rests on (None: the report counts the artifact's seeds), ``p_value`` the two-sided p-value of
    the paired test behind a comparison (None: no such test; the claim stays out of the Holm family) and
    ``protocol`` the distance of its runs from the paper's protocol (set by the report), ``dirty`` the run ids of
    the records behind it written with uncommitted changes (None: the report reads the artifact's records),
    ``scale`` a comparative claim's effects and outcome on the reproduction scale (``Scale``), ``runs`` every
    run (all configurations of the compared cells or points) its verdict read, for its own protocol distance
    (None: the artifact's).
    """

    paper: str
    section: str
    quote: str
    verdict: str
    evidence: str
    n_runs: int
    anchor: str
    n_seeds: int | None = None
    p_value: float | None = None
    protocol: str = ""
    dirty: tuple[str, ...] | None = None
    dirty_scope: str = "claim"   # "claim": records the verdict compares; "artifact": any record of its artifact
    scale: Scale | None = None   # a comparative claim: our effect, the paper's, the outcome on the scale
    runs: Any = field(default=None, compare=False, repr=False)   # DataFrame: every run its verdict read


# The reproduction scale: does our paired effect reproduce the paper's? (docs/verdicts.md states every rule.)
REPRODUCES = "reproduces"
LARGER = "larger than reported"
SMALLER = "smaller than reported"
NOT_REPRODUCED = "not reproduced"
REVERSED = "reversed"
INCONCLUSIVE = "inconclusive"
DIRECTION_HOLDS = "direction holds"  # a claim with no number in the paper: right sign, no size to compare
NOT_COMPARABLE = "not comparable"

SCALE = (REPRODUCES, LARGER, SMALLER, NOT_REPRODUCED, REVERSED, INCONCLUSIVE, DIRECTION_HOLDS, NOT_COMPARABLE)
# Outcomes that show the claimed sign.
RIGHT_SIGN = (REPRODUCES, LARGER, SMALLER, DIRECTION_HOLDS)
# Outcomes that assert something a test rejected (the others say we could not tell, or could not compare).
DECISIVE = (REPRODUCES, LARGER, SMALLER, NOT_REPRODUCED, REVERSED, DIRECTION_HOLDS)

# Declared margins (docs/verdicts.md). Effects and scores are fractions in [0, 1] unless a claim says otherwise.
SIZE_MARGIN = 0.25
"""The paper's effect "is reproduced" when it lies within our interval widened on each side by this fraction of
the paper's own effect: the paper prints one number with no interval, so a reading a quarter off it is not a
different effect."""
FLOOR_MARGIN = 0.10
"""An arm within this distance (10 points) of its floor (the majority class of the scored split, or chance) has
learnt little beyond the class prior; when both arms do, their difference measures noise around the floor."""
MIN_BUDGET = 0.10
"""A comparison whose runs ran under this fraction of the paper's protocol budget (epochs or passes) says nothing
about the paper's runs."""


@dataclass(frozen=True)
class Outcome:
    """One comparison on the reproduction scale: ``label`` (one of ``SCALE``, or ``NOT_RUN`` / ``TOO_FEW_SEEDS``),
    ``reason`` one line saying which rule decided it, ``p_value`` the two-sided p-value of the test the label
    rests on (NaN: no test; see ``outcome``)."""

    label: str
    reason: str
    p_value: float = math.nan

    @property
    def decisive(self) -> bool:
        return self.label in DECISIVE


class _Effect(Protocol):
    n: int
    mean: float
    lo: float
    hi: float

    def p_value(self, threshold: float = 0.0) -> float: ...


def not_comparable(arms: tuple[float, float] | None = None, floor: float | None = None,
                   budget: float | None = None) -> str:
    """Why a comparison cannot be decisive, or "" when it can: both ``arms`` (their mean scores) within
    ``FLOOR_MARGIN`` of ``floor`` (majority class or chance of the scored split), or ``budget`` (the fraction of
    the paper's epochs or passes the runs ran, the smallest over them) below ``MIN_BUDGET``. Both reasons are
    given when both apply."""
    reasons = []
    if arms is not None and floor is not None and all(math.isfinite(a) and a - floor < FLOOR_MARGIN for a in arms):
        reasons.append(f"both arms within {100 * FLOOR_MARGIN:.0f} points of the floor {100 * floor:.1f} % "
                       f"({100 * arms[0]:.1f} and {100 * arms[1]:.1f} %)")
    if budget is not None and budget < MIN_BUDGET:
        reasons.append(f"run at {100 * budget:.2g} % of the paper's budget (under {100 * MIN_BUDGET:.0f} %)")
    return "; ".join(reasons)


def outcome(ours: _Effect, paper: float | None, *, arms: tuple[float, float] | None = None,
            floor: float | None = None, budget: float | None = None, min_seeds: int = 3) -> Outcome:
    """Our paired effect ``ours`` (a − b with its t-interval: ``lipgnn.results.stats.Interval``) on the
    reproduction scale against the paper's effect ``paper`` (the same a − b in the same unit, read off the
    paper; None: the paper states a direction only, and the claim is oriented so that it says a − b > 0).

    In order: no seeds → ``NOT_RUN``; ``not_comparable(arms, floor, budget)`` → ``NOT_COMPARABLE`` with its
    reason; fewer than ``min_seeds`` → ``TOO_FEW_SEEDS``. Otherwise, with s the sign of ``paper`` (+1 when None),
    the interval [lo, hi] against 0 gives the direction (right: s·lo > 0; reversed: s·hi < 0) and, with a paper
    number, the widened interval [lo − m, hi + m], m = ``SIZE_MARGIN``·|paper|, against ``paper`` the size:

    | direction \\ paper's effect | inside widened interval | above it (|paper| larger) | below it |
    |---|---|---|---|
    | right sign | reproduces | smaller than reported | larger than reported |
    | interval holds 0 | inconclusive | not reproduced | (impossible) |
    | reversed | reversed | reversed | (impossible) |

    Without a paper number: right sign → ``DIRECTION_HOLDS``, reversed → ``REVERSED``, else ``INCONCLUSIVE``.
    ``p_value``: against 0 for reproduces, reversed, direction holds and inconclusive; against the paper's effect
    for not reproduced; the larger of the two (both must reject: an intersection–union test) for smaller or
    larger than reported."""
    if ours.n == 0:
        return Outcome(NOT_RUN, "no paired seeds")
    why = not_comparable(arms, floor, budget)
    if why:
        return Outcome(NOT_COMPARABLE, why)
    if ours.n < min_seeds:
        return Outcome(TOO_FEW_SEEDS, f"{ours.n} paired seeds (fewer than {min_seeds})")
    sign = -1.0 if paper is not None and paper < 0 else 1.0
    lo, hi = sorted((sign * ours.lo, sign * ours.hi))
    p_zero = ours.p_value(0.0)
    if hi < 0:
        return Outcome(REVERSED, "the interval lies on the other side of 0 from the claim", p_zero)
    if paper is None:
        if lo > 0:
            return Outcome(DIRECTION_HOLDS, "the interval excludes 0 on the claim's side (no paper number)", p_zero)
        return Outcome(INCONCLUSIVE, "the interval holds 0 (no paper number)", p_zero)
    size = abs(paper)
    margin = SIZE_MARGIN * size
    p_paper = ours.p_value(paper)
    above = size > hi + margin   # the paper's effect exceeds everything our interval allows
    below = size < lo - margin
    if lo > 0:
        if above:
            return Outcome(SMALLER, "right sign, and the interval excludes the paper's effect", max(p_zero, p_paper))
        if below:
            return Outcome(LARGER, "right sign, above the paper's effect", max(p_zero, p_paper))
        return Outcome(REPRODUCES, "right sign, and the paper's effect is within the interval (± the margin)",
                       p_zero)
    if above:
        return Outcome(NOT_REPRODUCED, "the interval holds 0 and excludes the paper's effect", p_paper)
    return Outcome(INCONCLUSIVE, "the interval holds both 0 and the paper's effect", p_zero)


def adjusted(result: Outcome, adjusted_p: float, level: float = 0.95) -> str:
    """The label after a multiplicity adjustment: a decisive outcome whose adjusted p-value is not below
    1 − ``level`` becomes ``INCONCLUSIVE`` (its test no longer rejects); the others keep their label."""
    if result.decisive and not (math.isfinite(adjusted_p) and adjusted_p < round(1 - level, 12)):
        return INCONCLUSIVE
    return result.label


@dataclass(frozen=True)
class Scale:
    """A comparative claim on the reproduction scale: our paired ``effect`` (an ``Interval``), the ``paper``'s
    effect (None: a direction only), the ``outcome`` of ``outcome(effect, paper, ...)``, and ``test``: what
    identifies the compared runs and metric, so that two claims on the same runs and null value are one test of
    the multiplicity family."""

    effect: _Effect
    paper: float | None
    outcome: Outcome
    test: str = ""

    def null(self) -> float:
        """The value the outcome's p-value tests against: the paper's effect for "not reproduced", else 0 (and
        both, the larger p, for smaller or larger than reported: keyed by the paper's effect)."""
        if self.paper is not None and self.outcome.label in (NOT_REPRODUCED, SMALLER, LARGER):
            return float(self.paper)
        return 0.0
