"""Building blocks of the report's number blocks: run summaries, cell texts and verdict lines.

Numbers come only from the records and, where the paper prints one, from the artifact's paper values. Every
aggregate follows ``protocol`` (the configuration with the best mean validation metric; its mean ± sample
std over non-diverged seeds; diverged runs counted, failed runs ignored), so a number in the report equals
the one in the tables and figures. Accuracies are printed in percent with one decimal.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from lipgnn.results.floors import floor
from lipgnn.results.labels import DATASET_ORDER, DIVERGED, NEEDS_OGB, NOT_RUN, NOT_RUN_BUDGET
from lipgnn.results.paper_protocol import budget_fraction
from lipgnn.results.paper_table import Cell, TableSpec
from lipgnn.results.protocol import Full, Selection, at, depths, full_at, is_partial, partial_text, select_best
from lipgnn.results.render.text import fmt_value as _fmt_value
from lipgnn.results.render.text import joined as _joined
from lipgnn.results.render.text import md_table as _table
from lipgnn.results.render.text import pct as _pct
from lipgnn.results.render.text import ranges as _ranges
from lipgnn.results.stats import Interval, greater, no_clear_lead, paired_difference, under_budget, with_budget
from lipgnn.results.verdict import (
    CANNOT_JUDGE,
    DIRECTION_HOLDS,
    DOES_NOT_HOLD,
    HOLDS,
    HOLDS_IN_PART,
    NOT_COMPARABLE,
    SCALE,
    TIE,
    UNDER_BUDGET,
    VERDICTS,
    Claim,
    Outcome,
    Scale,
    not_comparable,
    outcome,
)
from lipgnn.results.verdict import NOT_RUN as NOT_RUN_VERDICT

HOLDS_WITHIN_STD = "holds within one std"

LEGEND = ("Cells: test metric of the configuration with the best mean validation metric, mean ± sample std "
          "(ddof=1) over its non-diverged seeds, in %; [1 seed]: a single usable seed (no std); [k/n div.]: "
          "k of its n seeds diverged and are left out of the mean; diverged (k/n): every run diverged; "
          "[partial: k/K runs]: the sweep has not finished this point (k runs where its declared sweep puts K in "
          "a point, or without one the fullest point has K), "
          f"so fewer configurations or seeds were compared; {NOT_RUN}: no records.")


@dataclass(frozen=True)
class Finding:
    """One verdict line of a block: what is judged (``label``), the outcome and the numbers behind it."""

    label: str
    verdict: str
    reason: str
    n_runs: int = 0
    p_value: float | None = None   # the paired test's two-sided p against the claim's threshold (Holm family)
    n_seeds: int | None = None     # the paired seeds the verdict rests on
    dirty: tuple[str, ...] | None = None   # run ids of the compared records written from uncommitted code
    scale: Scale | None = None     # a comparative claim on the reproduction scale (``on_scale``)
    runs: pd.DataFrame | None = field(default=None, compare=False, repr=False)   # every run the verdict read

    def claim(self, paper: str, section: str, quote: str, anchor: str) -> Claim:
        """This finding as the ``Claim`` of ``quote`` (the paper's words, with the finding's label appended)."""
        return Claim(paper, section, f"{quote} — {self.label}" if self.label else quote, self.verdict, self.reason,
                     self.n_runs, anchor, p_value=self.p_value, n_seeds=self.n_seeds, dirty=self.dirty,
                     scale=self.scale, runs=self.runs)

    def line(self) -> str:
        return verdict_line(self.label, self.verdict, self.reason)


def test_id(a: pd.DataFrame | None, b: pd.DataFrame | None, value: str = "sel_test") -> str:
    """What identifies a paired test: the run ids of both arms and the compared metric (two claims with the same
    id and null value are one member of the multiplicity family)."""
    def ids(frame: pd.DataFrame | None) -> str:
        if frame is None or frame.empty or "run_id" not in frame:
            return ""
        return ",".join(sorted(frame["run_id"].astype(str)))
    return hashlib.sha1(f"{ids(a)}|{ids(b)}|{value}".encode()).hexdigest()[:12]


def arm_floor(runs: pd.DataFrame | None, split: str = "test") -> float | None:
    """The floor (``floors.floor``) of the scored ``split`` of ``runs``' dataset (TREES: of their tree depth)."""
    if runs is None or runs.empty or "dataset" not in runs:
        return None
    tree = runs["tree_depth"].dropna() if "tree_depth" in runs else pd.Series(dtype=float)
    return floor(str(runs["dataset"].iloc[0]), split, float(tree.iloc[0]) if len(tree) else None)


def on_scale(finding: Finding, diff: Interval, paper: float | None, a: pd.DataFrame | None,
             b: pd.DataFrame | None, arms: tuple[float, float], *, value: str = "sel_test", split: str = "test",
             artifact: str | None = None) -> Finding:
    """``finding`` judged on the reproduction scale (``verdict.outcome``): our paired ``diff`` of the runs ``a``
    and ``b`` (whose mean scores are ``arms``, fractions) against the ``paper``'s effect, "not comparable" when
    both arms sit at the ``split``'s floor or the runs are capped under the protocol's budget. A finding that is
    not run, cannot be judged or rests on a partial grid keeps its verdict; a "holds in part" (the claim's bar is
    missed) stays so when the direction holds. The p-value becomes the outcome's."""
    result = outcome(diff, paper, arms=arms, floor=arm_floor(a, split),
                     budget=budget_fraction(a, b, artifact=artifact))
    verdict = finding.verdict
    if verdict not in (UNDER_BUDGET, NOT_RUN_VERDICT, CANNOT_JUDGE):
        verdict = HOLDS_IN_PART if verdict == HOLDS_IN_PART and result.label == DIRECTION_HOLDS else result.label
    reason = finding.reason
    if result.label == NOT_COMPARABLE:
        reason = f"{reason.rstrip('.')}; not comparable: {result.reason}."
    p_value = result.p_value if verdict in SCALE or verdict == HOLDS_IN_PART else None
    runs = finding.runs if finding.runs is not None else both(a, b)
    return replace(finding, verdict=verdict, reason=reason, p_value=p_value,
                   scale=Scale(diff, paper, result, test_id(a, b, value)), runs=runs)


def both(*frames: pd.DataFrame | None) -> pd.DataFrame | None:
    """The rows of ``frames`` together (None when all are empty)."""
    kept = [f for f in frames if f is not None and not f.empty]
    return pd.concat(kept, ignore_index=True) if kept else None


def dirty_ids(*frames: pd.DataFrame | None) -> tuple[str, ...]:
    """``<experiment>/<run id>``, sorted, of the records of ``frames`` whose ``git_commit`` ends in ``-dirty`` (code
    not committed): what ``lipgnn verify`` takes (``lipgnn verify --dirty --replace`` reruns them)."""
    ids = set()
    for frame in frames:
        if frame is not None and not frame.empty and {"git_commit", "run_id", "experiment"} <= set(frame.columns):
            dirty = frame[frame["git_commit"].astype(str).str.endswith("-dirty")]
            ids |= {f"{e}/{r}" for e, r in zip(dirty["experiment"].astype(str), dirty["run_id"].astype(str),
                                               strict=True)}
    return tuple(sorted(ids))


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


def cell_comparison(label: str, a: Cell, b: Cell, *, margin: float = 0.0, tie_band: float | None = None,
                    what: str = "", paper: float | None = None) -> Finding:
    """Paired comparison of two table cells (their selected configurations, paired by seed), in points.

    ``tie_band`` set: the claim is "no clear lead" (``stats.no_clear_lead``); else "a exceeds b by more than
    ``margin``" (``stats.greater``). Cells without a result give NOT_RUN (or CANNOT_JUDGE when diverged);
    partial or under-budget cells make the verdict UNDER_BUDGET. A plain lead (no margin, no band) is then judged
    on the reproduction scale against the ``paper``'s a − b (``on_scale``; ``paper_effect`` of two cells)."""
    if a.state != "ok" or b.state != "ok":
        missing = [f"{c.row} {c.state}" for c in (a, b) if c.state != "ok"]
        verdict = NOT_RUN_VERDICT if all(c.state != DIVERGED for c in (a, b)) else CANNOT_JUDGE
        return Finding(label, verdict, f"{'; '.join(missing)}.", a.n_runs + b.n_runs)
    diff = paired_difference(a.runs, b.runs)
    verdict = no_clear_lead(diff, tie_band / 100.0) if tie_band is not None else greater(diff, margin / 100.0)
    budget = a.under_budget or b.under_budget or bool(a.partial) or bool(b.partial)
    evidence = (f"{a.row} {a.ours_mean:.1f} vs {b.row} {b.ours_mean:.1f}; paired difference {diff.text()} points"
                + (f" (threshold: > {margin:g})" if margin else "")
                + (f" (equivalence band ± {tie_band:g})" if tie_band is not None else "")
                + (f"; {what}" if what else "")
                + ("; partial or under-budget cells" if budget else "") + ".")
    # An equivalence claim's decisive test is the two one-sided tests (TOST) when it holds, else the test of 0.
    p_value = (diff.p_value(margin / 100.0) if tie_band is None
               else diff.equivalence_p(tie_band / 100.0) if verdict == HOLDS else diff.p_value())
    found = Finding(label, with_budget(verdict, budget), evidence, a.n_runs + b.n_runs, p_value, diff.n,
                    dirty_ids(a.all_runs, b.all_runs),   # every configuration: the selection reads them all
                    runs=both(a.all_runs, b.all_runs))
    arms = (a.ours_mean / 100.0, b.ours_mean / 100.0)
    if tie_band is None and not margin:
        return on_scale(found, diff, paper, a.runs, b.runs, arms)
    # A margin or equivalence claim keeps its own test, but never decides on runs at the floor or capped.
    why = not_comparable(arms, arm_floor(a.runs), budget_fraction(a.runs, b.runs))
    if why and found.verdict not in (UNDER_BUDGET, NOT_RUN_VERDICT, CANNOT_JUDGE):
        found = replace(found, verdict=NOT_COMPARABLE, reason=f"{evidence.rstrip('.')}; not comparable: {why}.",
                        p_value=None)
    return replace(found, scale=Scale(diff, paper, Outcome(found.verdict, why, found.p_value or math.nan),
                                      test_id(a.runs, b.runs)))


def paper_effect(a: Cell, b: Cell) -> float | None:
    """The paper's a − b (a fraction) from the two cells' printed values; None when either is not printed."""
    if a.paper is None or b.paper is None:
        return None
    return (a.paper.mean - b.paper.mean) / 100.0


def validation_mean(cell: Cell) -> float:
    """The mean validation metric of a cell's selected configuration (what chose it), over its usable seeds."""
    runs = cell.runs
    if runs is None or runs.empty or "sel_val" not in runs:
        return math.nan
    kept = runs[~runs["diverged"].astype(bool)] if "diverged" in runs else runs
    return float(kept["sel_val"].mean())


def best_other(cells: list[Cell], target: str) -> Cell | None:
    """Our best row other than ``target`` by mean VALIDATION metric (never the test metric the claim compares),
    among cells with a result; ties go to the row order."""
    others = [c for c in cells if c.row != target and c.state == "ok"]
    return max(others, key=lambda c: (validation_mean(c), -others.index(c))) if others else None


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


def lead_findings(spec: TableSpec, cells: list[Cell], columns: list[tuple[str, int]],
                  target: str = "GAT-Lip") -> list[Finding]:
    """Per column: does ``target`` lead our best other row (chosen on validation: ``best_other``)? The paper's
    effect is its ``target`` minus its own best other row."""
    out = []
    for column in columns:
        label = spec.column_label(column)
        here = [c for c in cells if c.column == label]
        mine = next(c for c in here if c.row == target)
        other = best_other(here, target)
        if other is None:
            out.append(Finding(f"{label}, {target} leads", NOT_RUN_VERDICT, "no other row has a result.",
                               mine.n_runs))
            continue
        paper = max((c for c in here if c.paper is not None and c.row != target), key=lambda c: c.paper.mean,
                    default=None)
        note = (f"best other by validation: {other.row}"
                + (f"; the paper's best other: {paper.row} ({paper.paper.text})" if paper is not None else ""))
        effect = paper_effect(mine, paper) if paper is not None else None
        out.append(cell_comparison(f"{label}, {target} leads", mine, other, what=note, paper=effect))
    return out


class Bar(NamedTuple):
    """A level the Lip variant must also reach to "hold" (not only beat the plain one); ``depth`` and
    ``n_point_runs`` name the figure point it was read from, if any, so a partial one can be flagged."""

    value: float
    text: str
    depth: int | None = None
    n_point_runs: int = 0


def pair_finding(label: str, results: dict[str, dict[int, Selection | None]],
                 lip: str, plain: str, what: str, bar: Bar | None = None, full: Full = 0,
                 value: str = "sel_test", paper: float | None = None, runs: pd.DataFrame | None = None) -> Finding:
    """At the deepest depth both variants ran, does ``lip`` beat ``plain``? The paired difference over seeds
    decides (``stats.greater``), then the reproduction scale against the ``paper``'s effect (``on_scale``; None:
    the paper's figure gives a direction only). With a ``bar`` the claim also needs ``lip`` to reach
    ``bar.value`` there: beating ``plain`` below it holds only in part. A partial point or an under-budget run:
    UNDER_BUDGET. ``runs``: the frame the selections came from (every configuration at the compared depth is
    what the verdict read)."""
    name = f"{label}, {lip} vs {plain}"
    both = sorted(set(results.get(lip, {})) & set(results.get(plain, {})))
    if not both:
        missing = [v for v in (lip, plain) if not results.get(v)]
        return Finding(name, NOT_RUN_VERDICT, f"{' and '.join(missing) or 'a common depth'} {NOT_RUN_BUDGET}.")
    depth = both[-1]
    sel_lip, sel_plain = results[lip][depth], results[plain][depth]
    if sel_lip is None or sel_plain is None:
        which = lip if sel_lip is None else plain
        return Finding(name, CANNOT_JUDGE, f"at {depth} layers every {which} run diverged.",
                       sum(s.n_runs for s in (sel_lip, sel_plain) if s is not None))
    diff = paired_difference(sel_lip.runs, sel_plain.runs, value)
    verdict = greater(diff)
    reason = (f"at {depth} layers (deepest run for both) {lip} {what} {_pct(sel_lip.mean)} vs {plain} "
              f"{_pct(sel_plain.mean)}; paired difference {diff.text()} points")
    if verdict == HOLDS and bar is not None and sel_lip.mean < bar.value:
        verdict, reason = HOLDS_IN_PART, f"{reason}, but {lip} stays below {bar.text}"
    short = [f"{v} {s.n_point_runs}/{full_at(full, v, depth)}" for v, s in ((lip, sel_lip), (plain, sel_plain))
             if is_partial(s.n_point_runs, full_at(full, v, depth))]
    partial = [f"at {depth} layers: {', '.join(short)} runs"] if short else []
    if (verdict != DOES_NOT_HOLD and bar is not None and bar.depth not in (None, depth)
            and is_partial(bar.n_point_runs, full_at(full, lip, bar.depth))):
        # The bar decides between "holds" and "in part", and comes from another depth's point: if that
        # point's sweep is unfinished the bar can still move.
        partial.append(f"at {lip}'s best depth, {bar.depth} layers: {bar.n_point_runs}/"
                       f"{full_at(full, lip, bar.depth)} runs")
    if partial:
        reason += f" (partial grid {'; '.join(partial)}; may change when the sweep finishes)"
    budget = bool(partial) or under_budget(sel_lip.runs) or under_budget(sel_plain.runs)
    read = None if runs is None or runs.empty else \
        runs[runs["variant"].isin((lip, plain)) & (runs["depth"].astype(float) == float(depth))]
    found = Finding(name, with_budget(verdict, budget), reason + ".", sel_lip.n_runs + sel_plain.n_runs,
                    diff.p_value(), diff.n, dirty_ids(sel_lip.runs, sel_plain.runs), runs=read)
    return on_scale(found, diff, paper, sel_lip.runs, sel_plain.runs, (sel_lip.mean, sel_plain.mean), value=value,
                    split="train" if "train" in value else "test")


def depth_rows(runs: pd.DataFrame, variants: Sequence[str], full: Full = 0
                ) -> tuple[list[list[str]], dict[str, dict]]:
    """One table row per depth (the selected test text of each variant) and the selections behind them;
    ``full``: the run count of a complete point (one for all, or per point), to mark partial ones."""
    rows: list[list[str]] = []
    results: dict[str, dict] = {}
    for depth in depths(runs):
        row = [str(depth)]
        for variant in variants:
            here = at(runs[runs["variant"] == variant], "depth", depth)
            sel, text = select(here, full=full_at(full, variant, depth))
            row.append(text)
            if not here.empty:
                results.setdefault(variant, {})[depth] = sel
        rows.append(row)
    return rows, results
