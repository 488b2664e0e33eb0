"""Fig. 4 (§7.1): test accuracy vs depth on PubMed with 100% missing vectors, GAT vs GAT-Lip."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm import table1
from lipgnn.results.labels import NOT_RUN_BUDGET
from lipgnn.results.protocol import full_grid_size, with_selected_metrics
from lipgnn.results.render.text import md_table, pct
from lipgnn.results.reporting import LEGEND, Finding, Findings, depth_rows, pair_finding, runs_line
from lipgnn.results.stats import LEGEND as VERDICT_LEGEND
from lipgnn.results.stats import greater, paired_difference, under_budget, with_budget
from lipgnn.results.verdict import CANNOT_JUDGE, Claim

if TYPE_CHECKING:
    import matplotlib.figure

SECTION = "§7.1"
QUOTE = ("the GAT-Lip model exhibits an increasing accuracy as the number of layers is higher [...] GAT without "
         "LipschitzNorm fails to learn the task")


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """Test accuracy vs depth on PubMed with 100% missing vectors: GAT vs GAT-Lip, mean ± std."""
    # matplotlib is imported only when a figure is drawn: the registry loads every artifact module.
    from matplotlib.figure import Figure

    from lipgnn.results import plotting as P

    title = "Fig. 4 — test accuracy vs depth, PubMed, 100% missing vectors"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return P.empty_figure("fig4", title)
    runs = runs[(runs["dataset"].astype(str).str.lower() == "pubmed")
                & (runs["missing_rate"] == 100)]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    drawn = P.SeriesDrawn()
    full = full_grid_size(runs, ["variant", "depth"])
    for variant, norm in (("GAT", "none"), ("GAT-Lip", "lip")):
        drawn |= P.plot_depth_series(ax, runs[runs["variant"] == variant], variant, P.NORM_COLOURS[norm],
                                    "-", "o" if norm == "none" else "s", full=full)
    # The paper prints no numbers for Fig. 4; its Table 1 gives the selected PubMed 100% models.
    for variant in ("GAT", "GAT-Lip"):
        ref = table1.PAPER[variant][("pubmed", 100)]
        P.paper_marker(ax, ref.depth, ref.mean, f"paper Table 1, {variant}: {ref.mean:.1f} ({ref.depth} layers)",
                       "D" if variant == "GAT-Lip" else "X")
    ax.set_xlabel("number of layers")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title + f"\n(best config per depth by validation; {P.seeds_caption(drawn.multi_seed)})"
                 + P.partial_caption(drawn.hollow, full))
    if drawn.anything:
        ax.legend()
        ax.grid(alpha=0.3)
    else:
        P.note(ax, "no PubMed 100% records in runs/fig4/")
    return fig


def _block(df: pd.DataFrame) -> tuple[str, list[Finding]]:
    """Fig. 4: GAT vs GAT-Lip selected test accuracy vs depth on PubMed with 100% missing vectors."""
    found = Findings()
    lines = ["Paper (§7.1, Fig. 4): on PubMed with 100% missing vectors GAT-Lip's accuracy increases with depth "
             "while GAT fails to learn (no numbers printed).", "", runs_line(df, "fig4"), ""]
    runs = with_selected_metrics(df)
    if not runs.empty:
        keep = (runs["dataset"].astype(str).str.lower() == "pubmed") & (runs["missing_rate"] == 100)
        if int((~keep).sum()):
            lines += [f"{int((~keep).sum())} records of other datasets / missing rates are not part of Fig. 4 and "
                      "are ignored.", ""]
        runs = runs[keep]
    if runs.empty:
        lines.append(found.line("", CANNOT_JUDGE, f"no PubMed 100% records: {NOT_RUN_BUDGET}."))
        return "\n".join(lines), found
    full4 = full_grid_size(runs, ["variant", "depth"])
    rows, results = depth_rows(runs, ("GAT", "GAT-Lip"), full4)
    lines += ["Selected test accuracy (%) by depth:", ""]
    lines += md_table(["depth", "GAT", "GAT-Lip"], rows)
    lines += ["", LEGEND, "", "Verdict:",
              found.add(pair_finding("PubMed 100%", results, "GAT-Lip", "GAT", "test accuracy", full=full4))]
    lip = {d: s for d, s in results.get("GAT-Lip", {}).items() if s is not None}
    if len(lip) >= 2:
        lo, hi = min(lip), max(lip)
        diff = paired_difference(lip[hi].runs, lip[lo].runs)
        best_depth = max(lip, key=lambda d: (lip[d].mean, -d))
        budget = under_budget(lip[hi].runs) or under_budget(lip[lo].runs)
        lines.append(found.line("PubMed 100%, GAT-Lip improves with depth", with_budget(greater(diff), budget),
                                f"{pct(lip[lo].mean)} at {lo} layers vs {pct(lip[hi].mean)} at {hi} layers; paired "
                                f"difference {diff.text()} points; best at {best_depth} layers.",
                                lip[hi].n_runs + lip[lo].n_runs))
    else:
        lines.append(found.line("PubMed 100%, GAT-Lip improves with depth", CANNOT_JUDGE,
                                "fewer than two depths with a GAT-Lip result."))
    lines += ["", VERDICT_LEGEND]
    return "\n".join(lines), found


def report(df: pd.DataFrame) -> dict[str, str]:
    return {"claim-fig4": _block(df)[0]}


def claims(df: pd.DataFrame) -> list[Claim]:
    return [Claim("lipschitznorm", SECTION, f"{QUOTE} — {f.label}" if f.label else QUOTE, f.verdict, f.reason,
                  f.n_runs, "#claim-fig4") for f in _block(df)[1]]


ARTIFACT = Artifact(name="fig4", paper="lipschitznorm", title="Fig. 4: PubMed 100%, accuracy vs depth",
                    experiments=("fig4",), figure=figure, report=report, claims=claims)
