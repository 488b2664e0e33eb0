"""Fig. 5, the NON-FAITHFUL block kept for comparison (experiment fig5_legacy): TREES train accuracy vs tree depth.

These records predate Alon & Yahav's protocol (one head, no residual or LayerNorm, weight decay, fixed epochs,
one target per tree; conf/experiment/fig5_legacy.yaml). Their metric is the max over evaluated epochs of
``history.train`` (``max_train``): they carry no ``best_train``. They are read from ``runs/fig5_legacy/`` only,
drawn in their own figure and reported in their own block, never pooled with ``experiment=fig5``; they make no
claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm.fig5 import (
    MARKERS,
    PAPER_OTHERS_BELOW,
    PAPER_TREE_DEPTH10,
    PAPER_TREE_DEPTHS,
)
from lipgnn.results.labels import NOT_RUN_BUDGET
from lipgnn.results.protocol import at as rows_at
from lipgnn.results.protocol import depths as depths_of
from lipgnn.results.protocol import full_grid_size, with_selected_metrics
from lipgnn.results.render.text import md_table, pct
from lipgnn.results.reporting import Finding, Findings, runs_line, select
from lipgnn.results.stats import LEGEND as VERDICT_LEGEND
from lipgnn.results.stats import greater, paired_difference, under_budget, with_budget
from lipgnn.results.verdict import CANNOT_JUDGE, NOT_RUN

if TYPE_CHECKING:
    import matplotlib.figure

MODELS = ("gcn", "gin", "ggnn", "gat")
VARIANTS = ("GCN", "GCN-Pn", "GIN", "GIN-Pn", "GGNN", "GGNN-Pn", "GAT", "GAT-Pn", "GAT-Lip")
LABEL = "non-faithful block, kept for comparison"


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """TREES train accuracy vs tree depth, one panel per model; markers: none ○, PairNorm △, Lip □."""
    # matplotlib is imported only when a figure is drawn: the registry loads every artifact module.
    from matplotlib.figure import Figure

    from lipgnn.results import plotting as P

    title = f"Fig. 5 ({LABEL}) — TREES: train accuracy vs tree depth"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return P.empty_figure("fig5_legacy", title)
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    axes = fig.subplots(1, 4, sharey=True)
    full = full_grid_size(runs, ["variant", "tree_depth"])
    hollow = multi = False
    for ax, model in zip(axes, MODELS, strict=True):
        sub = runs[runs["model"].astype(str).str.lower() == model]
        ax.set_title(model.upper())
        ax.set_xlabel("tree depth")
        ax.set_ylim(0, 105)
        drawn = P.SeriesDrawn()
        for norm, marker in MARKERS.items():
            series = sub[sub["norm"].astype(str).str.lower() == norm]
            if series.empty:
                continue
            label = {"none": "None", "pairnorm": "PairNorm", "lip": "LipschitzNorm"}[norm]
            drawn |= P.plot_depth_series(ax, series, label, P.NORM_COLOURS[norm], "-", marker,
                                        depth_col="tree_depth", value="max_train", full=full)
        hollow = hollow or drawn.hollow
        multi = multi or drawn.multi_seed
        if model == "gat":
            for variant, value in PAPER_TREE_DEPTH10.items():
                norm = "lip" if variant.endswith("Lip") else "pairnorm"
                ax.plot([10], [value], linestyle="none", marker=MARKERS[norm], markersize=9,
                        markerfacecolor="none", markeredgecolor="black",
                        label=f"paper {variant} (d=10): {value}")
        if drawn.anything or model == "gat":
            ax.legend(loc="best", fontsize="small")
        if not drawn.anything:
            P.note(ax, NOT_RUN)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("train accuracy (%)")
    fig.suptitle(title + f"\n(max over evaluated epochs of the train accuracy, the old block's setup; "
                 f"{P.seeds_caption(multi)})"
                 + P.partial_caption(hollow))
    return fig


def _block(df: pd.DataFrame) -> tuple[str, list[Finding]]:
    """The old Fig. 5 block: best train accuracy on TREES per tree depth and variant; who leads at the deepest."""
    found = Findings()
    others = ", ".join(v for v in VARIANTS if v not in PAPER_TREE_DEPTH10)
    lines = [f"**The {LABEL}** (`experiment=fig5_legacy`: one GAT head, no residual or LayerNorm, weight decay "
             "5e-4, fixed epochs, one target per tree; conf/experiment/fig5_legacy.yaml). Its records are never "
             "pooled with the faithful block above.", "",
             "Paper (§7.2, Fig. 5): at tree depth 10, "
             + ", ".join(f"{v} {x:.1f}" for v, x in PAPER_TREE_DEPTH10.items())
             + f"; all others ({others}) < {PAPER_OTHERS_BELOW:g} (train accuracy, %).", "",
             runs_line(df, "fig5_legacy"), ""]
    runs = with_selected_metrics(df)
    depths = depths_of(runs, "tree_depth")
    if not depths:
        lines.append(found.line("", CANNOT_JUDGE, f"fig5_legacy {NOT_RUN_BUDGET}."))
        return "\n".join(lines), found
    variants = list(VARIANTS) + sorted(set(runs["variant"].dropna()) - set(VARIANTS))
    full5 = full_grid_size(runs, ["variant", "tree_depth"])
    rows, deepest, chosen = [], {}, {}
    for variant in variants:
        row = [variant]
        for d in depths:
            at = rows_at(runs[runs["variant"] == variant], "tree_depth", d)
            sel, text = select(at, "max_train", full5)
            row.append(text)
            if d == depths[-1] and sel is not None:
                deepest[variant] = sel.mean
                chosen[variant] = sel
        rows.append(row)
    lines += ["Best train accuracy (%) = max over evaluated epochs of history.train, mean ± std over seeds of the "
              "best-validation configuration:", ""]
    lines += md_table(["variant"] + [f"d={d}" for d in depths], rows)
    not_run = [d for d in PAPER_TREE_DEPTHS if d not in depths]
    if not_run:
        lines += ["", f"Tree depths {NOT_RUN_BUDGET}: {', '.join(str(d) for d in not_run)} (paper: 2–10)."]
    missing = [v for v in VARIANTS if v not in deepest]
    if missing:
        lines.append(f"No result at d={depths[-1]} (not run or all diverged): {', '.join(missing)}.")
    lines.append("")
    d = depths[-1]
    if not deepest:
        lines.append(found.line("", CANNOT_JUDGE, f"every run at d={d} diverged."))
        return "\n".join(lines), found
    order = {v: i for i, v in enumerate(variants)}
    ranking = " > ".join(f"{v} {pct(m)}" for v, m in sorted(deepest.items(), key=lambda x: (-x[1], order[x[0]])))
    lines.append(f"At the deepest tree depth run (d={d}): {ranking}.")
    if d == 10:
        comp = [f"{v} {pct(deepest[v]) if v in deepest else NOT_RUN} (paper {x:.1f})"
                for v, x in PAPER_TREE_DEPTH10.items()]
        rest = [m for v, m in deepest.items() if v not in PAPER_TREE_DEPTH10]
        comp.append(f"best other {pct(max(rest)) if rest else '-'} (paper < {PAPER_OTHERS_BELOW:g})")
        lines.append("At d=10 vs the paper: " + "; ".join(comp) + ".")
    else:
        lines.append(f"The paper's numbers are at d=10; the deepest run here is d={d}, so only the ordering "
                     "is compared.")
    lines.append("")
    others = [v for v in deepest if v not in ("GAT-Lip", "GAT-Pn")]
    rival = max(others, key=lambda v: (deepest[v], -order[v])) if others else None
    for label, other in ((f"d={d}, GAT-Lip vs GAT-Pn", "GAT-Pn"),
                         (f"d={d}, GAT-Lip vs the best other ({rival})", rival)):
        if "GAT-Lip" not in chosen or other not in chosen:
            lines.append(found.line(label, NOT_RUN, f"GAT-Lip or {other} has no result at d={d}."))
            continue
        diff = paired_difference(chosen["GAT-Lip"].runs, chosen[other].runs, "max_train")
        budget = under_budget(chosen["GAT-Lip"].runs) or under_budget(chosen[other].runs)
        lines.append(found.line(label, with_budget(greater(diff), budget),
                                f"best train accuracy GAT-Lip {pct(deepest['GAT-Lip'])} vs {other} "
                                f"{pct(deepest[other])}; paired difference {diff.text()} points.",
                                chosen["GAT-Lip"].n_runs + chosen[other].n_runs))
    lines += ["", VERDICT_LEGEND]
    return "\n".join(lines), found


def report(df: pd.DataFrame) -> dict[str, str]:
    return {"claim-trees-legacy": _block(df)[0]}


ARTIFACT = Artifact(name="fig5_legacy", paper="lipschitznorm",
                    title=f"Fig. 5 ({LABEL}): TREES, train accuracy vs tree depth",
                    experiments=("fig5_legacy",), figure=figure, report=report)
