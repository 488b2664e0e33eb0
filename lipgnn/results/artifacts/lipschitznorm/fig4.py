"""Fig. 4 (§7.1): test accuracy vs depth on PubMed with 100% missing vectors, GAT vs GAT-Lip.

Runs of different epoch budgets (``train.epochs``: the cpu grid's 200, its extra sweep's
1000, the paper's) are separate series and separate rows, labelled with their budget, never pooled: a
configuration of one budget is never selected against one of another. A point is partial against the runs its
own sweep declares (``lipgnn.results.grid``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm import table1
from lipgnn.results.artifacts.lipschitznorm._summary import by_verdict
from lipgnn.results.artifacts.lipschitznorm.table3 import dropout_setting
from lipgnn.results.grid import declared_sweeps, point_keys
from lipgnn.results.labels import NOT_RUN_BUDGET
from lipgnn.results.protocol import depths, full_grid_size, is_partial, with_selected_metrics
from lipgnn.results.render.text import fmt_value, md_table, pct
from lipgnn.results.reporting import LEGEND, Finding, Findings, depth_rows, dirty_ids, on_scale, pair_finding, runs_line
from lipgnn.results.stats import LEGEND as VERDICT_LEGEND
from lipgnn.results.stats import greater, paired_difference, under_budget, with_budget
from lipgnn.results.verdict import CANNOT_JUDGE, Claim

if TYPE_CHECKING:
    import matplotlib.figure

SECTION = "§7.1"
QUOTE = ("the GAT-Lip model exhibits an increasing accuracy as the number of layers is higher [...] GAT without "
         "LipschitzNorm fails to learn the task")
VARIANTS = ("GAT", "GAT-Lip")


def fig4_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Usable Fig. 4 runs: PubMed at 100% missing vectors (``with_selected_metrics``)."""
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return runs
    return runs[(runs["dataset"].astype(str).str.lower() == "pubmed") & (runs["missing_rate"] == 100)]


def epoch_budgets(runs: pd.DataFrame) -> list[float]:
    """The distinct ``train.epochs`` of ``runs``, ascending (each one its own series)."""
    return sorted(float(e) for e in runs["epochs"].dropna().unique()) if not runs.empty else []


def budget_label(epochs: float) -> str:
    return f"{fmt_value(epochs)} epochs"


def declared_budgets(df: pd.DataFrame) -> list[tuple[float, str, int]]:
    """(epoch budget, sweep, runs) of every fig4 sweep (a grid file's main sweep or one of its extras, named by
    :class:`lipgnn.results.grid.Sweep`) declared at the budgets of the records in ``df``."""
    out = [(float(s.epochs), s.name, len(s.points)) for s in declared_sweeps(df, "fig4")]
    return sorted(set(out))


def declared_runs(df: pd.DataFrame, epochs: float, variant: str, depth: int | None = None) -> int | None:
    """Runs the fig4 sweeps with epoch budget ``epochs`` declare for ``variant`` (at ``depth``; the largest
    over depths when None), at the budgets of the records in ``df``; None when no such sweep is declared."""
    sweeps = [s for s in declared_sweeps(df, "fig4") if s.epochs == epochs]
    if not sweeps:
        return None
    counts: dict[int, int] = {}
    for keys in (point_keys(p) for s in sweeps for p in s.points):
        if keys.get("variant") == variant and "depth" in keys:
            counts[int(keys["depth"])] = counts.get(int(keys["depth"]), 0) + 1
    if depth is not None:
        return counts.get(int(depth), 0)
    return max(counts.values(), default=0)


def point_runs(df: pd.DataFrame, epochs: float, runs: pd.DataFrame) -> Callable[[str, int], int]:
    """The run count of a complete point of a variant at a depth (``protocol.Full``): what the budget's sweeps
    declare there (extra seeds may cover only some depths), else the fullest point's count in ``runs``."""
    fallback = full_grid_size(runs, ["variant", "depth"])

    def full(variant: str, depth: int) -> int:
        return declared_runs(df, epochs, variant, depth) or fallback

    return full


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """Test accuracy vs depth on PubMed with 100% missing vectors: GAT vs GAT-Lip, mean ± std."""
    # matplotlib is imported only when a figure is drawn: the registry loads every artifact module.
    from matplotlib.figure import Figure

    from lipgnn.results import plotting as P

    title = "Fig. 4 — test accuracy vs depth, PubMed, 100% missing vectors"
    runs = fig4_runs(df)
    if runs.empty:
        return P.empty_figure("fig4", title)
    fig = Figure(figsize=(6.2, 4.2), layout="constrained")
    ax = fig.add_subplot()
    drawn = P.SeriesDrawn()
    budgets = epoch_budgets(runs)
    styles = ["--", "-", ":", "-."]
    for i, epochs in enumerate(budgets):
        at_budget = runs[runs["epochs"] == epochs]
        full = point_runs(df, epochs, at_budget)
        for variant, norm in (("GAT", "none"), ("GAT-Lip", "lip")):
            drawn |= P.plot_depth_series(ax, at_budget[at_budget["variant"] == variant],
                                        f"{variant}, {budget_label(epochs)}", P.NORM_COLOURS[norm],
                                        styles[i % len(styles)], "o" if norm == "none" else "s",
                                        full=lambda _label, depth, v=variant, f=full: f(v, depth))
    # The paper prints no numbers for Fig. 4; its Table 1 gives the selected PubMed 100% models.
    for variant in ("GAT", "GAT-Lip"):
        ref = table1.PAPER[variant][("pubmed", 100)]
        P.paper_marker(ax, ref.depth, ref.mean, f"paper Table 1, {variant}: {ref.mean:.1f} ({ref.depth} layers)",
                       "D" if variant == "GAT-Lip" else "X")
    ax.set_xlabel("number of layers")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title + f"\n(best config per depth by validation; {P.seeds_caption(drawn.multi_seed)})"
                 + P.partial_caption(drawn.hollow))
    if drawn.anything:
        ax.legend()
        ax.grid(alpha=0.3)
    else:
        P.note(ax, "no PubMed 100% records in runs/fig4/")
    return fig


def _budget_block(df: pd.DataFrame, runs: pd.DataFrame, epochs: float, found: Findings) -> list[str]:
    """One epoch budget's table (depth x GAT, GAT-Lip) and its two verdicts."""
    label = budget_label(epochs)
    full = point_runs(df, epochs, runs)
    dropouts = sorted({dropout_setting(d) for d in runs["dropout"]})
    grid = f"lr {{{_joined_values(runs['lr'])}}}, dropout {{{', '.join(dropouts)}}}"
    seeds = ", ".join(str(int(s)) for s in sorted(runs["seed"].dropna().unique()))
    per_depth: dict[int, list[int]] = {}
    for depth in depths(runs):
        per_depth.setdefault(max(full(v, depth) for v in VARIANTS), []).append(int(depth))
    if len(per_depth) == 1:
        partial = f"a point is partial below the {next(iter(per_depth))} runs per depth its sweep declares"
    else:
        partial = "a point is partial below the runs its sweeps declare at its depth: " + "; ".join(
            f"{n} at {', '.join(str(d) for d in ds)} layers" for n, ds in sorted(per_depth.items()))
    lines = [f"*{label}* (grid: {grid}; seeds {seeds}; {partial}):", ""]
    rows, results = depth_rows(runs, VARIANTS, full)
    lines += md_table(["depth", f"GAT ({label})", f"GAT-Lip ({label})"], rows)
    lines += ["", found.add(pair_finding(f"PubMed 100%, {label}", results, "GAT-Lip", "GAT", "test accuracy",
                                         full=full, runs=runs))]
    lip = {d: s for d, s in results.get("GAT-Lip", {}).items() if s is not None}
    name = f"PubMed 100%, {label}, GAT-Lip improves with depth"
    if len(lip) >= 2:
        lo, hi = min(lip), max(lip)
        diff = paired_difference(lip[hi].runs, lip[lo].runs)
        best_depth = max(lip, key=lambda d: (lip[d].mean, -d))
        budget = any(under_budget(lip[d].runs) or is_partial(lip[d].n_point_runs, full("GAT-Lip", d)) for d in (lo, hi))
        trend = Finding(name, with_budget(greater(diff), budget),
                        f"{pct(lip[lo].mean)} at {lo} layers vs {pct(lip[hi].mean)} at {hi} layers; paired "
                        f"difference {diff.text()} points; best at {best_depth} layers.",
                        lip[hi].n_runs + lip[lo].n_runs, diff.p_value(), diff.n,
                        dirty_ids(lip[hi].runs, lip[lo].runs),
                        runs=runs[(runs["variant"] == "GAT-Lip") & runs["depth"].astype(float).isin((lo, hi))])
        lines.append(found.add(on_scale(trend, diff, None, lip[hi].runs, lip[lo].runs,
                                        (lip[hi].mean, lip[lo].mean))))
    else:
        lines.append(found.line(name, CANNOT_JUDGE, "fewer than two depths with a GAT-Lip result."))
    return lines + [""]


def _joined_values(values: pd.Series) -> str:
    out = []
    for v in sorted({float(x) for x in values.dropna()}, reverse=True):
        out.append(fmt_value(v))
    return ", ".join(out) or "?"


def _block(df: pd.DataFrame) -> tuple[str, list[Finding]]:
    """Fig. 4: GAT vs GAT-Lip selected test accuracy vs depth on PubMed with 100% missing vectors."""
    found = Findings()
    lines = ["Paper (§7.1, Fig. 4): on PubMed with 100% missing vectors GAT-Lip's accuracy increases with depth "
             "while GAT fails to learn (no numbers printed).", "", runs_line(df, "fig4"), ""]
    every = with_selected_metrics(df) if not df.empty else df
    runs = fig4_runs(df)
    if len(every) > len(runs):
        lines += [f"{len(every) - len(runs)} records of other datasets / missing rates are not part of Fig. 4 and "
                  "are ignored.", ""]
    if runs.empty:
        lines.append(found.line("", CANNOT_JUDGE, f"no PubMed 100% records: {NOT_RUN_BUDGET}."))
        return "\n".join(lines), found
    lines += ["Each epoch budget is its own series: per depth, the configuration (lr, dropout) with the best mean "
              "validation accuracy among the runs of that budget, its test accuracy mean ± std over seeds.", ""]
    for epochs in epoch_budgets(runs):
        lines += _budget_block(df, runs[runs["epochs"] == epochs], epochs, found)
    for epochs, sweep, total in declared_budgets(df):
        if epochs not in epoch_budgets(runs):
            lines += [f"*{budget_label(epochs)}*: no records yet; `conf/{sweep}` declares {total} runs "
                      f"({', '.join(VARIANTS)}).", ""]
    summary = ["**Summary (generated from the records).** " + by_verdict(found, "PubMed 100%, ") + ".", ""]
    lines = lines[:4] + summary + lines[4:]
    lines += [LEGEND, "", VERDICT_LEGEND]
    return "\n".join(lines), found


def report(df: pd.DataFrame) -> dict[str, str]:
    return {"claim-fig4": _block(df)[0]}


def claims(df: pd.DataFrame) -> list[Claim]:
    return [Claim("lipschitznorm", SECTION, f"{QUOTE} — {f.label}" if f.label else QUOTE, f.verdict, f.reason,
                  f.n_runs, "#claim-fig4", p_value=f.p_value, n_seeds=f.n_seeds,
                  dirty=f.dirty, scale=f.scale, runs=f.runs) for f in _block(df)[1]]


ARTIFACT = Artifact(name="fig4", paper="lipschitznorm", title="Fig. 4: PubMed 100%, accuracy vs depth",
                    experiments=("fig4",), figure=figure, report=report, claims=claims)
