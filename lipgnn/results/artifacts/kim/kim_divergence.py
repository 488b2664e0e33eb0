"""Kim et al. Appendix L: maximising ||J_f(X)||_inf over X diverges for DP-MHA (Theorem 3.1) and
stays below Theorem 3.2's bound for L2-MHA."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.kim._common import (
    PAPER,
    budget_of,
    by_seed,
    completed,
    md_text,
    outputs,
    payloads,
    seed_of,
)
from lipgnn.results.plotting import legend
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS, NOT_RUN, Claim

EXPERIMENT = "kim_divergence"
LABELS = {"dp": "DP-MHA", "l2": "L2-MHA (tied)"}


def _finite(values: list) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def frame(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for d in payloads(records):
        traces = [_finite(tr) for tr in d["trace"]]
        starts = [tr[0] for tr in traces if tr]
        finals = [tr[-1] for tr in traces if tr]
        # Growth over the last tenth of the run: still rising means no plateau was reached.
        tails = [tr[-1] / tr[-max(2, len(tr) // 10)] for tr in traces if len(tr) > 2]
        rows.append({"model": LABELS.get(d["model"], d["model"]), "seed": seed_of(d), "restarts": len(traces),
                     "steps": int(d["steps"][-1]) if d["steps"] else 0,
                     "start_median": float(np.median(starts)) if starts else math.nan,
                     "final_max": max(finals) if finals else math.nan,
                     "final_over_start": (max(finals) / float(np.median(starts))) if starts else math.nan,
                     "last_tenth_growth": float(np.median(tails)) if tails else math.nan,
                     "upper_bound": float(d.get("upper", math.nan))})
    return pd.DataFrame(rows, columns=["model", "seed", "restarts", "steps", "start_median", "final_max",
                                       "final_over_start", "last_tenth_growth", "upper_bound"])


def table(records: pd.DataFrame) -> dict[str, str]:
    return outputs(frame(records))


def figure(records: pd.DataFrame):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    colors = {"dp": "tab:red", "l2": "tab:blue"}
    for d in payloads(records):
        for r, tr in enumerate(d["trace"]):
            ys = [float(v) if v is not None else math.nan for v in tr]
            ax.plot(d["steps"][:len(ys)], ys, color=colors.get(d["model"]), alpha=0.7,
                    label=LABELS.get(d["model"]) if r == 0 else None)
        if d.get("upper") is not None:
            ax.axhline(float(d["upper"]), color=colors.get(d["model"]), ls=":", label="L2-MHA bound (Thm 3.2)")
    ax.set_yscale("log")
    ax.set_xlabel("Adam steps")
    ax.set_ylabel(r"$\|J_f(X)\|_\infty$")
    ax.set_title(f"App. L: maximising the Jacobian norm (random weights, budget {budget_of(records)})", fontsize=8)
    legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def _blocks(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    return {"kim_divergence-table": md_text(t) if not t.empty else "not run\n"}


def claims(records: pd.DataFrame) -> list[Claim]:
    quote = ("we show that optimising ‖J_f(X)‖∞ w.r.t. X for DP-MHA f causes the norm to diverge, providing "
             "empirical verification of Theorem 3.1, that DP-MHA is indeed not Lipschitz.")
    t = frame(records)
    dp, l2 = t[t["model"] == LABELS["dp"]], t[t["model"] == LABELS["l2"]]
    if dp.empty or l2.empty:
        return [Claim(PAPER, "§5.1 / App. L", quote, NOT_RUN, "no kim_divergence records", 0, "kim-divergence")]
    dp_row, l2_row = dp.iloc[0], l2.iloc[0]
    diverges = dp_row["final_over_start"] > 10 and dp_row["last_tenth_growth"] > 1.01
    bounded = l2_row["final_max"] <= l2_row["upper_bound"]
    evidence = (f"DP-MHA: {dp_row['start_median']:.3g} → {dp_row['final_max']:.3g} in {dp_row['steps']} steps, "
                f"still ×{dp_row['last_tenth_growth']:.2f} over the last tenth; L2-MHA: max {l2_row['final_max']:.3g} "
                f"≤ bound {l2_row['upper_bound']:.3g} (random weights, N=16, D=8, H=2; paper: trained, D=512)")
    verdict = HOLDS if diverges and bounded else DOES_NOT_HOLD
    return [Claim(PAPER, "§5.1 / App. L", quote, verdict, evidence, len(completed(records)), "kim-divergence")]


def report(records: pd.DataFrame) -> dict[str, str]:
    return _blocks(records)


ARTIFACT = Artifact(
    name="kim_divergence",
    paper=PAPER,
    title="App. L: ‖J_f(X)‖∞ against optimisation steps, DP-MHA vs L2-MHA",
    experiments=(EXPERIMENT,),
    table=table,
    figure=figure,
    report=report,
    claims=by_seed(claims),
)
