"""Kim et al.'s artifacts on hand-built record frames: slopes, verdicts and the tables' required columns."""

from __future__ import annotations

import math

import pandas as pd

from lipgnn.results.artifacts.kim import kim_bounds, kim_invertibility, lip_estimates
from lipgnn.results.verdict import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS


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
    assert kim_bounds.table(same)["csv"].splitlines()[0].startswith("n,seed,upper,lower")
    configured = pd.DataFrame([{"status": "completed", "diagnostics": {"n": 100, "p": p, "upper": 9.0, "lower": 1.0},
                                "config": {"budget": {"name": "cpu"}, "restarts": r, "steps": s}}
                               for p, r, s in (("inf", 50, 200), ("2", 5, 60))])
    row = kim_bounds.frame(configured).iloc[0]
    assert (row["restarts_x_steps"], row["restarts_x_steps_2"]) == ("50×200", "5×60")
    flat = _records([{"n": n, "p": "inf", "upper": 2 * math.log(n), "lower": 5.0, "top5": []} for n in ns])
    assert kim_bounds.claims(flat)[0].verdict == DOES_NOT_HOLD


def test_kim_bounds_app_k_needs_a_lower_bound_that_grows() -> None:
    def lip2(lowers: list[float]) -> pd.DataFrame:
        rows = [{"n": n, "p": p, "upper": 9.0 * n, "lower": low if p == "2" else math.log(n)}
                for n, low in zip([100, 300, 1000], lowers, strict=True) for p in ("inf", "2")]
        return _records(rows)

    growing = kim_bounds.claims(lip2([2.0, 2.2, 2.4]))[1]
    assert growing.section == "App. K" and growing.verdict == HOLDS
    falling = kim_bounds.claims(lip2([2.9, 5.1, 2.3]))[1]
    assert falling.verdict == CANNOT_JUDGE and "does not grow with N" in falling.evidence


def test_kim_verdicts_are_judged_per_seed_and_a_decisive_one_needs_three_seeds() -> None:
    """kim._common.by_seed: each seed judged alone; the same verdict on every seed stands, a mix of holds and does
    not hold is "holds in part"; the report's seed rule turns a one- or two-seed "holds" into "too few seeds"."""
    from lipgnn.results.report import judged
    from lipgnn.results.verdict import HOLDS_IN_PART, TOO_FEW_SEEDS

    def seeded(errors_dp: list[list[float]]) -> pd.DataFrame:
        rows = []
        for seed, errs in enumerate(errors_dp):
            for model, e in (("l2", [1e-3, 1e-12]), ("dp", errs)):
                rows.append({"status": "completed", "seed": seed, "config": {"budget": {"name": "cpu"}, "seed": seed},
                             "diagnostics": {"model": model, "c": 0.5, "errors": e}})
        return pd.DataFrame(rows)

    claims = kim_invertibility.ARTIFACT.claims
    three = claims(seeded([[1.0, 2.0]] * 3))[0]
    assert (three.verdict, three.n_seeds, three.n_runs) == (HOLDS, 3, 6)
    assert judged(three, None, "").verdict == HOLDS
    mixed = claims(seeded([[1.0, 2.0], [1.0, 2.0], [1.0, 1e-12]]))[0]
    assert mixed.verdict == HOLDS_IN_PART and "seed 2: does not hold" in mixed.evidence
    one = claims(seeded([[1.0, 2.0]]))[0]
    assert (one.verdict, one.n_seeds) == (HOLDS, 1)
    shown = judged(one, None, "")
    assert shown.verdict == TOO_FEW_SEEDS and "holds on 1 seed" in shown.evidence
    assert judged(claims(seeded([[1.0, 2.0]] * 2))[0], None, "").verdict == TOO_FEW_SEEDS
    assert judged(kim_invertibility.claims(seeded([[1.0, 2.0]]))[0], 1, "").verdict == TOO_FEW_SEEDS


def test_kim_invertibility_verdict() -> None:
    rows = [{"model": "l2", "c": 0.5, "errors": [1e-3, 1e-12]}, {"model": "dp", "c": 0.5, "errors": [1.0, 2.0]}]
    assert kim_invertibility.claims(_records(rows))[0].verdict == HOLDS
    rows[1]["errors"] = [1.0, 1e-12]
    assert kim_invertibility.claims(_records(rows))[0].verdict == DOES_NOT_HOLD


def _state(estimates: list[float], bounds: list[float], network: float) -> dict:
    layers = [{"layer": i, "at_input": e, "estimate": e, "bound": b}
              for i, (e, b) in enumerate(zip(estimates, bounds, strict=True))]
    return {"layers": layers, "network_estimate": network, "product_estimate": math.prod(estimates),
            "product_bound": math.prod(bounds)}


def test_lip_estimates_looseness_and_answer_by_hand() -> None:
    inf = math.inf
    rows = [
        {"variant": "gat_lip", "depth": 2, "init": _state([2.0, 4.0], [20.0, 20.0], 4.0),
         "trained": _state([5.0, 10.0], [50.0, 40.0], 25.0), "training": {"last": {"test": 0.5}}},
        {"variant": "gt", "depth": 2, "init": _state([1.0, 1.0], [inf, inf], 1.0),
         "trained": _state([1.0, 1.0], [inf, inf], 1.0), "training": {"last": {"test": 0.5}}},
        {"variant": "gt_lip", "depth": 3, "init": _state([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 1.0),
         "trained": _state([1.0, 3.0, 1.0], [2.0, 2.0, 4.0], 2.0), "training": {"last": {"test": 0.5}}},
    ]
    t = lip_estimates.looseness(_records(rows))
    assert list(t["variant"]) == ["GAT-Lip", "GAT-Lip", "GT-Lip", "GT-Lip"]  # GT has no bound: no rows
    trained = t[(t["variant"] == "GAT-Lip") & (t["stage"] == "trained")].iloc[0]
    assert trained["layers_within_bound"] == "2/2"
    assert (trained["ratio_min"], trained["ratio_median"], trained["ratio_max"]) == (4.0, 7.0, 10.0)
    assert trained["network_ratio"] == 2000.0 / 25.0
    deep = t[(t["variant"] == "GT-Lip") & (t["stage"] == "trained")].iloc[0]
    assert deep["layers_within_bound"] == "2/3" and deep["ratio_min"] == 2.0 / 3.0
    text = lip_estimates.answer(_records(rows))
    assert "2 layers, trained** (GAT-Lip): the bound holds in every layer (2/2)" in text
    assert "3 layers, trained** (GT-Lip): the bound holds in 2 of 3 layers (2/3)" in text
    assert "factor 4 to 10 per layer (median 7)" in text
    assert "test accuracy after training 50–50 %" in text


def _fig6_row(variant: str, depth: int, lr: float, seed: int, val: float, test: float) -> dict:
    name, norm, score = {"GT": ("gt", "none", "dot"), "GT-Lip": ("gt", "lip", "dot"),
                         "GT-L2": ("gt", "none", "l2")}[variant]
    return {"status": "completed", "experiment": "fig6_l2" if score == "l2" else "fig6", "depth": depth, "lr": lr,
            "seed": seed, "selection": "best_val", "best_val": val, "best_test": test, "last_val": val,
            "last_test": test, "config_key": f"{variant}-L{depth}-lr{lr}",
            "config": {"dataset": {"name": "cora"}, "budget": {"name": "cpu"}, "norm": {"name": norm},
                       "model": {"name": name, "score": score, "tie_qk": True}}}


def test_kim_fig6_l2_averages_seeds_before_choosing_the_learning_rate() -> None:
    """GT at 20 layers, three seeds per lr: lr 0.005 has the best single run (val 0.60, a lucky seed) but lr 0.001
    the best mean (0.45 against 0.30); the row is lr 0.001's mean test accuracy over its three seeds, not the lucky
    run. GT-L2's single seed keeps its own value."""
    from lipgnn.results.artifacts.kim import kim_fig6_l2

    rows = [_fig6_row("GT", 20, 0.005, s, v, t) for s, v, t in ((0, 0.60, 0.58), (1, 0.15, 0.10), (2, 0.15, 0.12))]
    rows += [_fig6_row("GT", 20, 0.001, s, v, t) for s, v, t in ((0, 0.44, 0.40), (1, 0.45, 0.42), (2, 0.46, 0.47))]
    rows.append(_fig6_row("GT-L2", 20, 0.001, 0, 0.39, 0.37))
    t = kim_fig6_l2.frame(pd.DataFrame(rows))
    gt = t[t["variant"] == "GT"].iloc[0]
    assert (gt["lr"], gt["seeds"]) == (0.001, 3)
    assert math.isclose(gt["test_acc"], 43.0) and math.isclose(gt["val_acc"], 45.0)
    l2 = t[t["variant"] == "GT-L2"].iloc[0]
    assert (l2["seeds"], l2["experiment"]) == (1, "fig6_l2") and math.isclose(l2["test_acc"], 37.0)
    header = kim_fig6_l2.report(pd.DataFrame(rows))["kim_fig6_l2-table"].splitlines()[0]
    assert header.endswith("| seeds |")
