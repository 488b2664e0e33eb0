"""Kim et al. Fig. 3 (§5.2): maximum reconstruction error of g(x) = x + c f(x) inverted by fixed-point
iteration, f = L2-MHA or DP-MHA (8 heads, N = D = 64, batch 128, random weights, one x_i = 0)."""

from __future__ import annotations

import math

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

EXPERIMENT = "kim_invertibility"
LABELS = {"l2": "L2-MHA", "dp": "DP-MHA", "l2_contractive": "Contractive-L2-MHA"}
# Reconstruction counts as successful below this max-abs error (inputs lie in [0, 1)).
INVERTED = 1e-6


def frame(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for d in payloads(records):
        errs = [float(e) if e is not None else math.inf for e in d["errors"]]
        rows.append({"model": LABELS.get(d["model"], d["model"]), "seed": seed_of(d), "c": float(d["c"]),
                     "iterations": len(errs),
                     "error_after_5": errs[min(4, len(errs) - 1)], "final_error": errs[-1],
                     "inverted": bool(errs[-1] < INVERTED)})
    t = pd.DataFrame(rows, columns=["model", "seed", "c", "iterations", "error_after_5", "final_error", "inverted"])
    return t.sort_values(["model", "c", "seed"]).reset_index(drop=True)


def table(records: pd.DataFrame) -> dict[str, str]:
    return outputs(frame(records))


def figure(records: pd.DataFrame):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharey=True)
    panels = {"l2": axes[0], "dp": axes[1], "l2_contractive": axes[2]}
    cs = sorted({float(d["c"]) for d in payloads(records)})
    for d in sorted(payloads(records), key=lambda d: float(d["c"])):
        ax = panels.get(d["model"])
        if ax is None:
            continue
        errs = [float(e) if e is not None and math.isfinite(float(e)) else math.nan for e in d["errors"]]
        # one colour per c, one line per seed
        ax.plot(range(1, len(errs) + 1), errs, marker=".", color=f"C{cs.index(float(d['c'])) % 10}",
                label=f"c = {d['c']}")
    for key, ax in panels.items():
        ax.set_yscale("log")
        ax.set_title(LABELS[key])
        ax.set_xlabel("fixed-point iterations")
        legend(ax, fontsize=7)
    axes[0].set_ylabel("max reconstruction error")
    fig.suptitle(f"Fig. 3: invertibility of x + c f(x) (random weights, budget {budget_of(records)})", fontsize=9)
    fig.tight_layout()
    return fig


def _blocks(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    return {"kim_invertibility-table": md_text(t) if not t.empty else "not run\n"}


def claims(records: pd.DataFrame) -> list[Claim]:
    quote = ("In Figure 3, we see that DP-MHA is not invertible whereas L2-MHA is invertible for sufficiently "
             "small c.")
    quote_j = ("Figure 5 confirms that numerical invertibility does not hold for trained weights for dot-product "
               "multihead self-attention (DP-MHA)")
    not_run_j = Claim(PAPER, "App. J", quote_j, NOT_RUN,
                      "needs the paper's trained one-layer Transformer (PTB); no corpus or weights here", 0,
                      "kim-invertibility")
    t = frame(records)
    l2, dp = t[t["model"] == LABELS["l2"]], t[t["model"] == LABELS["dp"]]
    if l2.empty or dp.empty:
        return [Claim(PAPER, "§5.2", quote, NOT_RUN, "no kim_invertibility records", 0, "kim-invertibility"),
                not_run_j]
    small_c_ok = bool(l2.sort_values("c").iloc[0]["inverted"])
    dp_fails = bool((~dp["inverted"]).any())
    evidence = ("final max error after {} iterations — L2-MHA: {}; DP-MHA: {}".format(
        int(l2["iterations"].iloc[0]),
        ", ".join(f"c={r.c:g}: {r.final_error:.2g}" for r in l2.itertuples()),
        ", ".join(f"c={r.c:g}: {r.final_error:.2g}" for r in dp.itertuples())))
    verdict = HOLDS if small_c_ok and dp_fails else DOES_NOT_HOLD
    return [Claim(PAPER, "§5.2", quote, verdict, evidence, len(completed(records)), "kim-invertibility"), not_run_j]


def report(records: pd.DataFrame) -> dict[str, str]:
    return _blocks(records)


ARTIFACT = Artifact(
    name="kim_invertibility",
    paper=PAPER,
    title="Fig. 3: max reconstruction error of x + c f(x) by fixed-point iteration, L2-MHA vs DP-MHA",
    experiments=(EXPERIMENT,),
    table=table,
    figure=figure,
    report=report,
    claims=by_seed(claims),
)
