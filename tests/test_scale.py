"""The reproduction scale (lipgnn.results.verdict.outcome): each rule of docs/verdicts.md flipped by one case."""

from __future__ import annotations

import math

import pytest

from lipgnn.results import verdict as v
from lipgnn.results.stats import Interval, t_interval


def effect(mean: float, half: float, n: int = 5) -> Interval:
    return Interval(n, mean, mean - half, mean + half)


@pytest.mark.parametrize(("ours", "paper", "label"), [
    (effect(0.40, 0.05), 0.398, v.REPRODUCES),            # the paper's effect inside the interval
    (effect(0.30, 0.02), 0.398, v.REPRODUCES),            # outside, but within the 25 % margin (0.32 + 0.0995)
    (effect(0.25, 0.02), 0.398, v.SMALLER),               # beyond the margin: 0.27 + 0.0995 < 0.398
    (effect(0.007, 0.02), 0.398, v.NOT_REPRODUCED),       # Table 3's 30 layers: holds 0, excludes +39.8
    (effect(0.007, 0.50), 0.398, v.INCONCLUSIVE),         # holds 0 and the paper's effect
    (effect(-0.10, 0.05), 0.398, v.REVERSED),             # wholly below 0
    (effect(0.90, 0.05), 0.398, v.LARGER),                # wholly above the paper's effect and its margin
    (effect(-0.30, 0.05), -0.30, v.REPRODUCES),           # a claim of a drop: the paper's sign orients it
    (effect(0.10, 0.05), -0.30, v.REVERSED),
    (effect(0.10, 0.05), None, v.DIRECTION_HOLDS),        # no paper number: direction only
    (effect(0.01, 0.05), None, v.INCONCLUSIVE),
    (effect(-0.10, 0.05), None, v.REVERSED),
])
def test_each_cell_of_the_scale(ours: Interval, paper: float | None, label: str) -> None:
    assert v.outcome(ours, paper).label == label


def test_the_size_margin_flips_reproduces_into_smaller() -> None:
    paper = 0.40
    edge = paper - v.SIZE_MARGIN * paper  # the widened interval's top reaches the paper's effect exactly here
    assert v.outcome(effect(edge - 0.01 + 0.001, 0.01), paper).label == v.REPRODUCES
    assert v.outcome(effect(edge - 0.01 - 0.001, 0.01), paper).label == v.SMALLER


def test_not_comparable_at_the_floor_needs_both_arms_and_says_why() -> None:
    ours = effect(-0.06, 0.11)
    floor = 0.413                                          # PubMed's majority class
    at_floor = v.outcome(ours, 0.3, arms=(0.407, 0.470), floor=floor)
    assert at_floor.label == v.NOT_COMPARABLE
    assert "41.3 %" in at_floor.reason and "40.7" in at_floor.reason
    assert not at_floor.decisive and math.isnan(at_floor.p_value)
    one_learnt = v.outcome(ours, 0.3, arms=(0.407, floor + v.FLOOR_MARGIN + 0.001), floor=floor)
    assert one_learnt.label != v.NOT_COMPARABLE


def test_not_comparable_under_the_budget_floor() -> None:
    ours = effect(-0.0012, 0.0004, n=3)
    capped = v.outcome(ours, 0.2, budget=150 / 50000)
    assert capped.label == v.NOT_COMPARABLE and "0.3 %" in capped.reason
    assert v.outcome(ours, 0.2, budget=v.MIN_BUDGET).label == v.REVERSED
    both = v.outcome(ours, 0.2, arms=(0.04, 0.041), floor=1 / 32, budget=150 / 50000)
    assert "floor" in both.reason and "budget" in both.reason


def test_seeds_and_empty_comparisons() -> None:
    assert v.outcome(Interval(0, math.nan, math.nan, math.nan), 0.4).label == v.NOT_RUN
    assert v.outcome(effect(0.4, 0.01, n=2), 0.4).label == v.TOO_FEW_SEEDS
    assert v.outcome(effect(0.4, 0.01, n=3), 0.4).label == v.REPRODUCES


def test_p_value_is_the_test_the_outcome_rests_on() -> None:
    ours = t_interval([0.01, 0.0, 0.02, -0.01, 0.015])
    no_effect = v.outcome(ours, 0.398)
    assert no_effect.label == v.NOT_REPRODUCED
    assert no_effect.p_value == pytest.approx(ours.p_value(0.398)) and no_effect.p_value < 1e-4
    gain = t_interval([0.20, 0.22, 0.18, 0.21, 0.19])
    smaller = v.outcome(gain, 0.398)
    assert smaller.label == v.SMALLER
    assert smaller.p_value == pytest.approx(max(gain.p_value(0.0), gain.p_value(0.398)))
    assert v.outcome(gain, None).p_value == pytest.approx(gain.p_value(0.0))


def test_an_adjusted_p_above_the_level_makes_a_decisive_outcome_inconclusive() -> None:
    result = v.outcome(effect(0.007, 0.02), 0.398)
    assert v.adjusted(result, 0.049) == v.NOT_REPRODUCED
    assert v.adjusted(result, 0.05) == v.INCONCLUSIVE
    assert v.adjusted(v.Outcome(v.NOT_COMPARABLE, "capped"), 0.9) == v.NOT_COMPARABLE
