"""Building blocks of the report's number blocks: run summaries, cell texts and verdict lines.

Numbers come only from the records and, where the paper prints one, from the artifact's paper values. Every
aggregate follows ``protocol`` (the configuration with the best mean validation metric; its mean ± sample
std over non-diverged seeds; diverged runs counted, failed runs ignored), so a number in the report equals
the one in the tables and figures. Accuracies are printed in percent with one decimal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from lipgnn.results.labels import DATASET_ORDER, DIVERGED, NEEDS_OGB, NOT_RUN, NOT_RUN_BUDGET
from lipgnn.results.paper_table import Cell, TableSpec
from lipgnn.results.protocol import Selection, at, depths, is_partial, partial_text, select_best
from lipgnn.results.render.text import fmt_value as _fmt_value
from lipgnn.results.render.text import joined as _joined
from lipgnn.results.render.text import md_table as _table
from lipgnn.results.render.text import pct as _pct
from lipgnn.results.render.text import ranges as _ranges
from lipgnn.results.verdict import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS, HOLDS_IN_PART, TIE, VERDICTS
from lipgnn.results.verdict import NOT_RUN as NOT_RUN_VERDICT

HOLDS_WITHIN_STD = "holds within one std"

LEGEND = ("Cells: test metric of the configuration with the best mean validation metric, mean ± sample std "
          "(ddof=1) over its non-diverged seeds, in %; [1 seed]: a single usable seed (no std); [k/n div.]: "
          "k of its n seeds diverged and are left out of the mean; diverged (k/n): every run diverged; "
          "[partial: k/K runs]: the sweep has not finished this point (k runs where the fullest point has K), "
          f"so fewer configurations or seeds were compared; {NOT_RUN}: no records.")


@dataclass(frozen=True)
class Finding:
    """One verdict line of a block: what is judged (``label``), the outcome and the numbers behind it."""

    label: str
    verdict: str
    reason: str
    n_runs: int = 0

    def line(self) -> str:
        return verdict_line(self.label, self.verdict, self.reason)


class Findings(list):
    """The findings of one block, collected while its text is written (each call returns the verdict line)."""

    def line(self, label: str, outcome: str, reason: str, n_runs: int = 0) -> str:
        return self.add(Finding(label, outcome, reason, n_runs))

    def add(self, finding: Finding) -> str:
        self.append(finding)
        return finding.line()


def claim_verdict(outcome: str) -> str:
    """The ``verdict`` constant of a displayed outcome: a cell state (not run, needs a download, diverged)
    means the claim was not tested; "within one std" is a tie."""
    if outcome in VERDICTS:
        return outcome
    if outcome == HOLDS_WITHIN_STD:
        return TIE
    return NOT_RUN_VERDICT if outcome.endswith(NOT_RUN) or outcome.endswith(NEEDS_OGB) else CANNOT_JUDGE


def verdict_line(label: str, outcome: str, reason: str) -> str:
    return f"- {label}: **{outcome}** — {reason}" if label else f"**Verdict: {outcome}** — {reason}"


def floats(values: Iterable[Any] | None) -> np.ndarray:
    out = []
    for v in values or []:
        try:
            out.append(math.nan if v is None else float(v))
        except (TypeError, ValueError):
            out.append(math.nan)
    return np.asarray(out, dtype=float)


def lr_text(lr: float) -> str:
    return _fmt_value(float(lr)) if math.isfinite(float(lr)) else "?"


def datasets(df: pd.DataFrame) -> list[str]:
    present = {str(d).lower() for d in df["dataset"].dropna()} if not df.empty else set()
    return [d for d in DATASET_ORDER if d in present] + sorted(present - set(DATASET_ORDER))


def selection_text(sel: Selection | None, runs: pd.DataFrame, full: int = 0) -> str:
    """A cell in the tables' format (without depth): ``mean ± std [k/n div.] [partial: k/K runs]``, or why
    there is none; ``full`` is the run count of the fullest point (``tables.full_grid_size``)."""
    if runs.empty:
        return NOT_RUN
    if sel is None:
        return f"{DIVERGED} ({int(runs['diverged'].sum())}/{len(runs)})" + partial_text(len(runs), full)
    text = f"{100.0 * sel.mean:.1f}"
    text += f" ± {100.0 * sel.std:.1f}" if math.isfinite(sel.std) else " [1 seed]"
    if sel.n_diverged:
        text += f" [{sel.n_diverged}/{sel.n_runs} div.]"
    return text + partial_text(len(runs), full)


def select(runs: pd.DataFrame, value: str = "sel_test", full: int = 0) -> tuple[Selection | None, str]:
    sel = select_best(runs, value=value) if not runs.empty else None
    return sel, selection_text(sel, runs, full)


def summary(df: pd.DataFrame) -> dict[str, str]:
    """Counts and protocol facts of a set of records, all read from the records themselves."""
    status = df["status"].astype(str).value_counts()
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    per_config = sorted({int(n) for n in df.groupby("config_key")["seed"].nunique()})
    per = "" if not per_config else (
        f" ({per_config[0]} per configuration)" if len(per_config) == 1
        else f" ({per_config[0]}-{per_config[-1]} per configuration)")
    run = df["epochs_run"].dropna()
    hours = float(df["wall_time_s"].fillna(0.0).sum()) / 3600.0
    return {
        "records": str(len(df)),
        "completed": str(int(status.get("completed", 0))),
        "diverged": str(int(status.get("diverged", 0))),
        "failed": str(int(status.get("failed", 0))),
        "budget": _joined(df["budget"]) or "none",
        "epochs": _joined(df["epochs"]) or "?",
        "epochs_run": "-" if run.empty else (
            f"{int(run.min())}" if run.min() == run.max() else f"{int(run.min())}-{int(run.max())}"),
        "seeds": _ranges(seeds) + per,
        "selection": _joined(df["selection"]) or "?",
        "hours": f"{hours:.2f}",
    }


def runs_line(df: pd.DataFrame, experiment: str) -> str:
    if df.empty:
        return f"Records: none under `runs/{experiment}/` — {NOT_RUN_BUDGET}."
    s = summary(df)
    return (f"Records: {s['records']} in `runs/{experiment}/` (completed {s['completed']}, diverged "
            f"{s['diverged']}, failed {s['failed']}); budget {s['budget']}; epochs {s['epochs']} (run: "
            f"{s['epochs_run']}); seeds {s['seeds']}; per-run selection {s['selection']}.")


def short_commit(commit: Any) -> str:
    if not commit:
        return "unknown"
    head, sep, rest = str(commit).partition("-")
    return head[:10] + sep + rest


def column_verdict(cells: list[Cell], row_order: tuple[str, ...], target: str = "GAT-Lip") -> tuple[str, str]:
    """Is ``target`` our best row in one table column (or within one std of the best)?"""
    ok = [c for c in cells if c.state == "ok"]
    rank = {r: i for i, r in enumerate(row_order)}
    with_paper = [c for c in cells if c.paper is not None]
    paper_best = max(with_paper, key=lambda c: (c.paper.mean, -rank.get(c.row, 99))) if with_paper else None
    paper_text = f"paper's best: {paper_best.row} ({paper_best.paper.text})" if paper_best else "paper: -"
    if not ok:
        state = cells[0].state if cells else NOT_RUN
        return state if state != "ok" else NOT_RUN, f"no row has records; {paper_text}."
    best = max(ok, key=lambda c: (c.ours_mean, -rank.get(c.row, 99)))
    mine = next((c for c in cells if c.row == target), None)
    if mine is None or mine.state != "ok":
        state = mine.state if mine is not None else NOT_RUN
        return (f"{target} {state}", f"our best row is {best.row} ({best.ours_mean:.1f}); {paper_text}.")
    if best.row == target:
        return HOLDS, f"{target} is our best row ({mine.ours_mean:.1f}); {paper_text}."
    std = best.ours_std if math.isfinite(best.ours_std) else mine.ours_std
    gap = best.ours_mean - mine.ours_mean
    if math.isfinite(std) and gap <= std:
        return HOLDS_WITHIN_STD, (f"our best row is {best.row} ({best.ours_mean:.1f}); {target} "
                                  f"({mine.ours_mean:.1f}) is {gap:.1f} points behind, within one std "
                                  f"({std:.1f}); {paper_text}.")
    return DOES_NOT_HOLD, (f"our best row is {best.row} ({best.ours_mean:.1f}); {target} ({mine.ours_mean:.1f}) "
                           f"is {gap:.1f} points behind"
                           + (f", more than one std ({std:.1f})" if math.isfinite(std) else " (no std: 1 seed)")
                           + f"; {paper_text}.")


def cells_table(spec: TableSpec, cells: list[Cell], columns: list[tuple[str, int]]) -> list[str]:
    labels = [spec.column_label(c) for c in columns]
    by_pos = {(c.row, c.column): c for c in cells}
    rows = []
    for row in spec.rows:
        entries = [row]
        for label in labels:
            cell = by_pos[(row, label)]
            entries += [cell.ours_text(spec.show_depth), cell.paper_text()]
        rows.append(entries)
    return _table(["model"] + [f"{label} {who}" for label in labels for who in ("ours", "paper")], rows)


def partial_note(cells: list[Cell]) -> str:
    """`` (partial grid: ...)`` naming the cells of a column whose sweep has not finished, else ``""``."""
    short = [f"{c.row} {c.grid_runs}/{c.full_grid_runs}" for c in cells if c.partial]
    return f" (partial grid: {', '.join(short)} runs; may change when the sweep finishes)" if short else ""


def spec_findings(spec: TableSpec, cells: list[Cell], columns: list[tuple[str, int]]) -> list[Finding]:
    """Per column: is GAT-Lip our best row (``column_verdict``)?"""
    lines = []
    for column in columns:
        label = spec.column_label(column)
        here = [c for c in cells if c.column == label]
        outcome, reason = column_verdict(here, spec.rows)
        note = partial_note(here)
        n_runs = sum(c.n_runs for c in here)
        lines.append(Finding(label, outcome, reason[:-1] + note + "." if note else reason, n_runs))
    return lines


class Bar(NamedTuple):
    """A level the Lip variant must also reach to "hold" (not only beat the plain one); ``depth`` and
    ``n_point_runs`` name the figure point it was read from, if any, so a partial one can be flagged."""

    value: float
    text: str
    depth: int | None = None
    n_point_runs: int = 0


def pair_finding(label: str, results: dict[str, dict[int, Selection | None]],
                 lip: str, plain: str, what: str, bar: Bar | None = None, full: int = 0) -> Finding:
    """At the deepest depth both variants ran, does ``lip`` beat ``plain``? With a ``bar`` the claim also
    needs ``lip`` to reach ``bar.value`` there: beating ``plain`` below it holds only in part."""
    both = sorted(set(results.get(lip, {})) & set(results.get(plain, {})))
    if not both:
        missing = [v for v in (lip, plain) if not results.get(v)]
        return Finding(f"{label}, {lip} vs {plain}", CANNOT_JUDGE,
                        f"{' and '.join(missing) or 'a common depth'} {NOT_RUN_BUDGET}.")
    depth = both[-1]
    sel_lip, sel_plain = results[lip][depth], results[plain][depth]
    if sel_lip is None:
        return Finding(f"{label}, {lip} vs {plain}", DOES_NOT_HOLD,
                        f"at {depth} layers every {lip} run diverged.")
    if sel_plain is None:
        return Finding(f"{label}, {lip} vs {plain}", HOLDS,
                        f"at {depth} layers every {plain} run diverged; {lip} {what} {_pct(sel_lip.mean)}.")
    outcome = HOLDS if sel_lip.mean > sel_plain.mean else DOES_NOT_HOLD
    reason = (f"at {depth} layers (deepest run for both) {lip} {what} {_pct(sel_lip.mean)} vs {plain} "
              f"{_pct(sel_plain.mean)}")
    if outcome == HOLDS and bar is not None and sel_lip.mean < bar.value:
        outcome, reason = HOLDS_IN_PART, f"{reason}, but {lip} stays below {bar.text}"
    short = [f"{v} {s.n_point_runs}/{full}" for v, s in ((lip, sel_lip), (plain, sel_plain))
             if is_partial(s.n_point_runs, full)]
    partial = [f"at {depth} layers: {', '.join(short)} runs"] if short else []
    if (outcome != DOES_NOT_HOLD and bar is not None and bar.depth not in (None, depth)
            and is_partial(bar.n_point_runs, full)):
        # The bar decides between "holds" and "in part", and comes from another depth's point: if that
        # point's sweep is unfinished the bar can still move.
        partial.append(f"at {lip}'s best depth, {bar.depth} layers: {bar.n_point_runs}/{full} runs")
    if partial:
        reason += f" (partial grid {'; '.join(partial)}; may change when the sweep finishes)"
    return Finding(f"{label}, {lip} vs {plain}", outcome, reason + ".", sel_lip.n_runs + sel_plain.n_runs)


def depth_rows(runs: pd.DataFrame, variants: Sequence[str], full: int = 0
                ) -> tuple[list[list[str]], dict[str, dict]]:
    """One table row per depth (the selected test text of each variant) and the selections behind them;
    ``full``: run count of the fullest point, to mark partial ones."""
    rows: list[list[str]] = []
    results: dict[str, dict] = {}
    for depth in depths(runs):
        row = [str(depth)]
        for variant in variants:
            here = at(runs[runs["variant"] == variant], "depth", depth)
            sel, text = select(here, full=full)
            row.append(text)
            if not here.empty:
                results.setdefault(variant, {})[depth] = sel
        rows.append(row)
    return rows, results
