"""Kim et al.'s artifacts on hand-built record frames: slopes, verdicts and the tables' required columns."""

from __future__ import annotations

import math

import pandas as pd

from lipgnn.results.artifacts.kim import kim_bounds, kim_invertibility
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS


def _records(payloads: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "completed", "diagnostics": d, "config": {"budget": {"name": "cpu"}}}
                         for d in payloads])


def test_kim_bounds_slopes_and_verdict() -> None:
    ns = [100, 300, 1000]
    same = _records([{"n": n, "p": "inf", "upper": 2 * math.log(n), "lower": 2 * math.log(n) - 1, "top5": []}
                     for n in ns])
    table = kim_bounds.frame(same)
    assert {"n", "upper", "lower"} <= set(table.columns)
    assert abs(kim_bounds.slopes(table)["lower"] - 2.0) < 1e-9
    assert kim_bounds.claims(same)[0].verdict == HOLDS
    assert kim_bounds.table(same)["csv"].splitlines()[0].startswith("n,upper,lower")
    flat = _records([{"n": n, "p": "inf", "upper": 2 * math.log(n), "lower": 5.0, "top5": []} for n in ns])
    assert kim_bounds.claims(flat)[0].verdict == DOES_NOT_HOLD


def test_kim_invertibility_verdict() -> None:
    rows = [{"model": "l2", "c": 0.5, "errors": [1e-3, 1e-12]}, {"model": "dp", "c": 0.5, "errors": [1.0, 2.0]}]
    assert kim_invertibility.claims(_records(rows))[0].verdict == HOLDS
    rows[1]["errors"] = [1.0, 1e-12]
    assert kim_invertibility.claims(_records(rows))[0].verdict == DOES_NOT_HOLD
