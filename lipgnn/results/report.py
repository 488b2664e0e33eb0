"""results/REPRODUCTION.md: hand-written discussion around number blocks regenerated from run records.

The report mixes prose (written by people) with numbers that must never be typed by hand. Each number
block lives between two marker lines::

    <!-- auto:claim-residual -->
    ... regenerated ...
    <!-- /auto:claim-residual -->

``update_report`` rewrites only what lies between the markers of the blocks in ``BLOCKS``; every other
byte of the file (headings, discussion, unknown ``auto`` blocks) is left as it was. A missing report is
created as a skeleton holding every block under a heading per claim. Markers must stand alone on their
line (so the syntax can be quoted inline in the prose without being treated as a block).

Numbers come only from the records (``load_records``) and, where the paper prints one, from
``lipgnn.results.paper``. Table cells use the tables' own computation (``tables.build_cells``), and every
other aggregate follows the same protocol (``tables.with_selected_metrics`` + ``tables.select_best``:
the configuration with the best mean validation metric; its mean ± sample std over non-diverged seeds;
diverged runs counted, failed runs ignored), so a number here equals the one in the tables and figures.
Accuracies are printed in percent with one decimal. The output has no timestamps and a fixed order:
identical records give a byte-identical report.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from lipgnn.errors import ConfigError
from lipgnn.results import paper
from lipgnn.results.store import _atomic_write_text, load_records, read_record, record_paths
from lipgnn.results.tables import (
    DATASET_NAMES,
    DIVERGED,
    NEEDS_OGB,
    NOT_RUN,
    OGB_DATASETS,
    TABLES,
    Cell,
    Selection,
    TableSpec,
    _fmt_value,
    _joined,
    _ranges,
    build_cells,
    full_grid_size,
    is_partial,
    partial_text,
    select_best,
    with_selected_metrics,
)

log = logging.getLogger("lipgnn.results")

REPORT_NAME = "REPRODUCTION.md"
PLACEHOLDER = "_(discussion to be written)_"
NOT_RUN_BUDGET = "not run in this budget"

EXPERIMENTS: tuple[str, ...] = ("table1", "table2", "table3", "fig2", "fig3", "fig4", "fig5", "fig6",
                               "fig6_protocol")
# Only these blocks read per-epoch curves (grad norms, train accuracy); the others skip them for memory.
NEEDS_HISTORY = frozenset({"fig2", "fig3", "fig5", "fig6_protocol"})
DATASET_ORDER = ("cora", "citeseer", "pubmed", "ogbn-arxiv", "ogbn-proteins", "trees")
FIG6_VARIANTS = ("GAT", "GAT-Ln", "GAT-Pn", "GAT-Lip", "GT", "GT-Ln", "GT-Pn", "GT-Lip")
FIG6_DATASETS = ("cora", "pubmed", "ogbn-arxiv", "ogbn-proteins")
FIG6_PAIRS = (("GAT-Lip", "GAT"), ("GT-Lip", "GT"))
FIG5_VARIANTS = ("GCN", "GCN-Pn", "GIN", "GIN-Pn", "GGNN", "GGNN-Pn", "GAT", "GAT-Pn", "GAT-Lip")
FIG5_PAPER_TREE_DEPTHS = tuple(range(2, 11))
GRADIENT_RATIO_THRESHOLD = 100.0
AUTHORS_DROPOUT = "authors'"

HOLDS = "holds"
HOLDS_WITHIN_STD = "holds within one std"
HOLDS_IN_PART = "holds in part"
# Our reading of "trains properly" (Fig. 3) and of "stays near the state of the art" (Fig. 6); the paper
# gives no number for either. Metrics are fractions here (0.9 = 90%).
TRAINS_PROPERLY = 0.90
NEAR_BEST = 0.05
DOES_NOT_HOLD = "does not hold"
CANNOT_JUDGE = "cannot be judged"

LEGEND = ("Cells: test metric of the configuration with the best mean validation metric, mean ± sample std "
          "(ddof=1) over its non-diverged seeds, in %; [1 seed]: a single usable seed (no std); [k/n div.]: "
          "k of its n seeds diverged and are left out of the mean; diverged (k/n): every run diverged; "
          "[partial: k/K runs]: the sweep has not finished this point (k runs where the fullest point has K), "
          f"so fewer configurations or seeds were compared; {NOT_RUN}: no records.")


# ------------------------------------------------------------------------------------------ records


class RecordSet:
    """The records of one ``results_dir``, loaded once per experiment (corrupt files skipped by the store)."""

    def __init__(self, results_dir: str | os.PathLike) -> None:
        self.results_dir = Path(results_dir)
        self._frames: dict[str, pd.DataFrame] = {}

    def folders(self) -> list[str]:
        """Experiment folders present under ``runs/`` (sorted; hidden folders ignored)."""
        runs = self.results_dir / "runs"
        if not runs.is_dir():
            return []
        return sorted(p.name for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))

    def frame(self, experiment: str) -> pd.DataFrame:
        """``load_records(results_dir, experiment)`` plus ``max_train`` (max of history.train)."""
        if experiment not in self._frames:
            df = load_records(self.results_dir, experiment, history=experiment in NEEDS_HISTORY)
            self._frames[experiment] = df
        return self._frames[experiment]

    def n_files(self, experiment: str) -> int:
        return len(record_paths(self.results_dir, experiment))


def _floats(values: Iterable[Any] | None) -> np.ndarray:
    out = []
    for v in values or []:
        try:
            out.append(math.nan if v is None else float(v))
        except (TypeError, ValueError):
            out.append(math.nan)
    return np.asarray(out, dtype=float)


def _grad_matrix(history: Any) -> np.ndarray:
    """history.grad_norms as an [epochs, layers] float array (nulls -> NaN, ragged rows padded)."""
    rows = (history or {}).get("grad_norms") if isinstance(history, dict) else None
    rows = [_floats(r if isinstance(r, list) else [r]) for r in rows or []]
    width = max((len(r) for r in rows), default=0)
    mat = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        mat[i, : len(r)] = r
    return mat


# ------------------------------------------------------------------------------------ formatting helpers


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}" if math.isfinite(value) else "-"


def _sci(value: float) -> str:
    return f"{value:.2e}" if math.isfinite(value) else "-"


def _lr_text(lr: float) -> str:
    return _fmt_value(float(lr)) if math.isfinite(float(lr)) else "?"


def _dataset_name(dataset: str) -> str:
    return DATASET_NAMES.get(str(dataset).lower(), str(dataset))


def _missing(dataset: str) -> str:
    return NEEDS_OGB if str(dataset).lower() in OGB_DATASETS else NOT_RUN_BUDGET


def _datasets(df: pd.DataFrame) -> list[str]:
    present = {str(d).lower() for d in df["dataset"].dropna()} if not df.empty else set()
    return [d for d in DATASET_ORDER if d in present] + sorted(present - set(DATASET_ORDER))


def _numeric(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def _depths(df: pd.DataFrame, column: str = "depth") -> list[int]:
    return sorted(int(d) for d in _numeric(df[column]).dropna().unique()) if not df.empty else []


def _at(df: pd.DataFrame, column: str, value: float) -> pd.DataFrame:
    return df[_numeric(df[column]) == float(value)]


def _of_dataset(df: pd.DataFrame, dataset: str) -> pd.DataFrame:
    return df[df["dataset"].astype(str).str.lower() == dataset]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    # Written by hand: pandas' to_markdown needs the optional `tabulate` package.
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + [":---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _selection_text(sel: Selection | None, runs: pd.DataFrame, full: int = 0) -> str:
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


def _select(runs: pd.DataFrame, value: str = "sel_test", full: int = 0) -> tuple[Selection | None, str]:
    sel = select_best(runs, value=value) if not runs.empty else None
    return sel, _selection_text(sel, runs, full)


def _summary(df: pd.DataFrame) -> dict[str, str]:
    """Counts and protocol facts of a set of records, all read from the records themselves."""
    status = df["status"].astype(str).value_counts()
    seeds = sorted(int(s) for s in _numeric(df["seed"]).dropna().unique())
    per_config = sorted({int(n) for n in df.groupby("config_key")["seed"].nunique()})
    per = "" if not per_config else (
        f" ({per_config[0]} per configuration)" if len(per_config) == 1
        else f" ({per_config[0]}-{per_config[-1]} per configuration)")
    run = _numeric(df["epochs_run"]).dropna()
    hours = float(_numeric(df["wall_time_s"]).fillna(0.0).sum()) / 3600.0
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


def _runs_line(df: pd.DataFrame, experiment: str) -> str:
    if df.empty:
        return f"Records: none under `runs/{experiment}/` — {NOT_RUN_BUDGET}."
    s = _summary(df)
    return (f"Records: {s['records']} in `runs/{experiment}/` (completed {s['completed']}, diverged "
            f"{s['diverged']}, failed {s['failed']}); budget {s['budget']}; epochs {s['epochs']} (run: "
            f"{s['epochs_run']}); seeds {s['seeds']}; per-run selection {s['selection']}.")


def _short_commit(commit: Any) -> str:
    if not commit:
        return "unknown"
    head, sep, rest = str(commit).partition("-")
    return head[:10] + sep + rest


def _verdict(label: str, outcome: str, reason: str) -> str:
    return f"- {label}: **{outcome}** — {reason}" if label else f"**Verdict: {outcome}** — {reason}"


# ------------------------------------------------------------------------------------------- blocks


def block_protocol(rs: RecordSet) -> str:
    """Per experiment folder: records by status, budgets, epochs, seeds, selection rule, git commits."""
    folders = rs.folders()
    order = list(EXPERIMENTS) + [f for f in folders if f not in EXPERIMENTS]
    header = ["experiment", "records", "completed", "diverged", "failed", "budget", "epochs (run)", "seeds",
              "selection", "wall time (h)", "git commits"]
    rows, notes = [], []
    for exp in order:
        if exp not in folders:
            rows.append([exp, NOT_RUN_BUDGET] + ["-"] * (len(header) - 2))
            continue
        df = rs.frame(exp)
        skipped = rs.n_files(exp) - len(df)
        if skipped:
            notes.append(f"- `runs/{exp}/`: {skipped} file(s) skipped (unreadable JSON, not a lipgnn record, "
                         "or another experiment's record; the log names them).")
        if df.empty:
            rows.append([exp, "0"] + ["-"] * (len(header) - 2))
            continue
        s = _summary(df)
        commits: dict[str, int] = {}
        for path in df["path"]:
            record = read_record(path) or {}
            key = _short_commit(record.get("git_commit"))
            commits[key] = commits.get(key, 0) + 1
        commit_text = ", ".join(f"`{c}` ({n})" for c, n in sorted(commits.items()))
        rows.append([exp, s["records"], s["completed"], s["diverged"], s["failed"], s["budget"],
                     f"{s['epochs']} ({s['epochs_run']})", s["seeds"], s["selection"], s["hours"], commit_text])
    lines = _table(header, rows)
    lines += ["", "- Selection rule per run: `best_val` = metrics at the epoch of best validation (the paper's "
              "text); `last` = metrics at the last epoch (the authors' code). Per table cell and figure point, "
              "the configuration (hyper-parameters, and for Tables 1–2 the depth) with the best mean "
              "validation metric is selected; its test metric is reported as mean ± sample std over its "
              "non-diverged seeds. Diverged runs (non-finite loss or metric) are excluded and counted; "
              "failed runs (crashes) are ignored.",
              "- A commit ending in `-dirty` was recorded with uncommitted changes in the working tree.",
              "- Budgets: `paper` = the paper's grid (§10); `cpu` = the reduced grid each "
              "`conf/grid/<experiment>_cpu.yaml` documents."]
    lines += notes
    return "\n".join(lines)


def _gradient_stats(runs: pd.DataFrame) -> dict[str, Any]:
    mats = [_grad_matrix(h) for h in runs["history"]]
    mats = [m for m in mats if m.size]
    values = np.concatenate([m.ravel() for m in mats]) if mats else np.array([])
    finite = values[np.isfinite(values)]
    with np.errstate(all="ignore"):
        first = [np.nanmean(m[0]) for m in mats if np.isfinite(m[0]).any()]
        last = [np.nanmean(m[-1]) for m in mats if np.isfinite(m[-1]).any()]
    return {
        "max": float(finite.max()) if finite.size else math.nan,
        "median": float(np.median(finite)) if finite.size else math.nan,
        "first": float(np.mean(first)) if first else math.nan,
        "last": float(np.mean(last)) if last else math.nan,
        "nonfinite": int(values.size - finite.size),
        "epochs": _joined(pd.Series([m.shape[0] for m in mats], dtype=object)),
        "layers": _joined(pd.Series([m.shape[1] for m in mats], dtype=object)),
    }


def block_gradients(rs: RecordSet) -> str:
    """Fig. 2: attention-gradient norms of GAT vs GAT-Lip and the explosion ratio."""
    df = rs.frame("fig2")
    lines = [f"Paper (§6, Fig. 2): a {paper.FIG2_DEPTH}-layer GAT on Cora, {paper.FIG2_EPOCHS} epochs: the "
             f"attention-weight gradients reach ~{paper.FIG2_PEAK_GRAD_NORM:.0e} without LipschitzNorm and "
             "stay stable with it.", "", _runs_line(df, "fig2"), ""]
    runs = with_selected_metrics(df)
    has_grads = runs["history"].map(lambda h: isinstance(h, dict) and bool(h.get("grad_norms")))
    header = ["variant", "runs (div.)", "dataset", "layers", "epochs", "max ‖∇‖", "median ‖∇‖",
              "epoch 1 (mean over layers)", "last epoch (mean over layers)", "final train acc (%)"]
    rows, maxima, notes = [], {}, []
    for variant in ("GAT", "GAT-Lip"):
        sub = runs[runs["variant"] == variant]
        if sub.empty:
            rows.append([variant, NOT_RUN_BUDGET] + ["-"] * (len(header) - 2))
            continue
        sub = sub[has_grads.loc[sub.index]]
        if sub.empty:
            rows.append([variant, "no history.grad_norms (rerun with log.grad_norms=true)"]
                        + ["-"] * (len(header) - 2))
            continue
        deepest = max(_depths(sub)) if _depths(sub) else None
        if deepest is not None:
            sub = _at(sub, "depth", deepest)
        st = _gradient_stats(sub)
        maxima[variant] = st["max"]
        final = _numeric(sub["last_train"]).dropna()
        rows.append([variant, f"{len(sub)} ({int(sub['diverged'].sum())})",
                     ", ".join(_dataset_name(d) for d in _datasets(sub)), st["layers"], st["epochs"],
                     _sci(st["max"]), _sci(st["median"]), _sci(st["first"]), _sci(st["last"]),
                     _pct(float(final.mean())) if not final.empty else "-"])
        if st["nonfinite"]:
            notes.append(f"- {variant}: {st['nonfinite']} non-finite gradient norms (stored as null) are left "
                         "out, so its max is a lower bound.")
    lines += _table(header, rows)
    lines += ["", "Statistics pool every layer × epoch of every seed at the deepest depth run; final train "
              "accuracy is the last epoch's, mean over seeds.", *notes, ""]
    if "GAT" in maxima and "GAT-Lip" in maxima:
        gat, lip = maxima["GAT"], maxima["GAT-Lip"]
        ratio = gat / lip if lip > 0 else math.inf
        outcome = HOLDS if ratio >= GRADIENT_RATIO_THRESHOLD else DOES_NOT_HOLD
        lines += [f"Ratio max(GAT) / max(GAT-Lip) = {_sci(gat)} / {_sci(lip)} = {ratio:.3g}.", "",
                  _verdict("", outcome, f"the ratio is {'≥' if outcome == HOLDS else '<'} "
                                        f"{GRADIENT_RATIO_THRESHOLD:g} (the criterion for 'explodes without "
                                        "LipschitzNorm, stable with it').")]
    else:
        missing = [v for v in ("GAT", "GAT-Lip") if v not in maxima]
        lines.append(_verdict("", CANNOT_JUDGE, f"no gradient norms for {' and '.join(missing)} "
                                                f"({NOT_RUN_BUDGET})."))
    return "\n".join(lines)


def _column_verdict(cells: list[Cell], row_order: tuple[str, ...], target: str = "GAT-Lip") -> tuple[str, str]:
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


def _cells_table(spec: TableSpec, cells: list[Cell], columns: list[tuple[str, int]]) -> list[str]:
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


def _partial_note(cells: list[Cell]) -> str:
    """`` (partial grid: ...)`` naming the cells of a column whose sweep has not finished, else ``""``."""
    short = [f"{c.row} {c.grid_runs}/{c.full_grid_runs}" for c in cells if c.partial]
    return f" (partial grid: {', '.join(short)} runs; may change when the sweep finishes)" if short else ""


def _spec_verdicts(spec: TableSpec, cells: list[Cell], columns: list[tuple[str, int]]) -> list[str]:
    lines = []
    for column in columns:
        label = spec.column_label(column)
        here = [c for c in cells if c.column == label]
        outcome, reason = _column_verdict(here, spec.rows)
        note = _partial_note(here)
        lines.append(_verdict(label, outcome, reason[:-1] + note + "." if note else reason))
    return lines


def block_missing_vector(rs: RecordSet) -> str:
    """Tables 1–2 at 100% missing vectors (and Table 2's ogbn-arxiv): is GAT-Lip our best row?"""
    lines = ["Paper (§7.1): with 100% missing vectors GAT-Lip is best on Cora and PubMed (Table 1; GAT-Pn is best "
             "on CiteSeer), and GAT-Lip vs GCNII shows no clear lead on Cora/PubMed 100% while GAT-Lip leads "
             "ogbn-arxiv 0% by > 1.5 points (Table 2). Numbers below are the tables' cells "
             "(`results/tables/table{1,2}`), with the selected depth in parentheses.", ""]
    for name in ("table1", "table2"):
        spec = TABLES[name]
        df = rs.frame(spec.experiment)
        cells = build_cells(df, spec)
        columns = [c for c in spec.columns if c[1] == 100 or name == "table2"]
        lines += [f"**{spec.title.split('.')[0]}** — {_runs_line(df, spec.experiment)}", ""]
        lines += _cells_table(spec, cells, columns)
        lines += ["", f"Verdict (is GAT-Lip our best {spec.title.split('.')[0]} row?):"]
        lines += _spec_verdicts(spec, cells, columns)
        lines.append("")
    lines += [LEGEND, f"{NEEDS_OGB}: the OGB datasets are not mirrored here; download them into the data root "
              "and run the experiment. The 0% columns of Table 1 are in `results/tables/table1.md`."]
    return "\n".join(lines)


class Bar(NamedTuple):
    """A level the Lip variant must also reach to "hold" (not only beat the plain one); ``depth`` and
    ``n_point_runs`` name the figure point it was read from, if any, so a partial one can be flagged."""

    value: float
    text: str
    depth: int | None = None
    n_point_runs: int = 0


def _pair_verdict(label: str, results: dict[str, dict[int, Selection | None]],
                  lip: str, plain: str, what: str, bar: Bar | None = None, full: int = 0) -> str:
    """At the deepest depth both variants ran, does ``lip`` beat ``plain``? With a ``bar`` the claim also
    needs ``lip`` to reach ``bar.value`` there: beating ``plain`` below it holds only in part."""
    both = sorted(set(results.get(lip, {})) & set(results.get(plain, {})))
    if not both:
        missing = [v for v in (lip, plain) if not results.get(v)]
        return _verdict(f"{label}, {lip} vs {plain}", CANNOT_JUDGE,
                        f"{' and '.join(missing) or 'a common depth'} {NOT_RUN_BUDGET}.")
    depth = both[-1]
    sel_lip, sel_plain = results[lip][depth], results[plain][depth]
    if sel_lip is None:
        return _verdict(f"{label}, {lip} vs {plain}", DOES_NOT_HOLD,
                        f"at {depth} layers every {lip} run diverged.")
    if sel_plain is None:
        return _verdict(f"{label}, {lip} vs {plain}", HOLDS,
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
    return _verdict(f"{label}, {lip} vs {plain}", outcome, reason + ".")


def _near_best_bar(results: dict[int, Selection | None]) -> Bar | None:
    """Fig. 6's "stays near the state of the art": within NEAR_BEST of the variant's best depth."""
    chosen = {depth: sel for depth, sel in results.items() if sel is not None}
    if not chosen:
        return None
    best = max(chosen, key=lambda depth: chosen[depth].mean)
    mean = chosen[best].mean
    return Bar(mean - NEAR_BEST,
               f"{_pct(mean - NEAR_BEST)} ({_pct(NEAR_BEST)} points under its best depth, "
               f"{best} layers: {_pct(mean)}; our reading of 'near the state of the art')",
               best, chosen[best].n_point_runs)


def block_depth(rs: RecordSet) -> str:
    """Fig. 3 (train accuracy vs depth, GAT vs GAT-Lip) and Fig. 6 (test accuracy vs depth, 8 variants)."""
    lines = ["Paper (§6, Fig. 3): a 30-layer GAT shows no improvement of its train accuracy; GAT-Lip trains "
             "properly at every depth. Paper (§7.3, Fig. 6): for l > 15 the unnormalized models fail to "
             "converge while the -Lip variants stay near the state of the art and beat -Ln and -Pn. The paper "
             "prints no numbers for these figures.", "", "**Fig. 3** — " + _runs_line(rs.frame("fig3"), "fig3"),
             ""]
    runs = with_selected_metrics(rs.frame("fig3"))
    full3 = full_grid_size(runs, ["dataset", "variant", "depth"])
    if runs.empty:
        lines.append(_verdict("Fig. 3, GAT-Lip vs GAT", CANNOT_JUDGE, f"fig3 {NOT_RUN_BUDGET}."))
    for dataset in _datasets(runs):
        here = _of_dataset(runs, dataset)
        header = ["depth", "GAT final", "GAT best", "GAT-Lip final", "GAT-Lip best"]
        rows, results = [], {}
        for depth in _depths(here):
            row = [str(depth)]
            for variant in ("GAT", "GAT-Lip"):
                at = _at(here[here["variant"] == variant], "depth", depth)
                _, final = _select(at, "last_train", full3)
                sel_best, best = _select(at, "max_train", full3)
                row += [final, best]
                if not at.empty:
                    results.setdefault(variant, {})[depth] = sel_best
            rows.append(row)
        lines += [f"Train accuracy (%) on {_dataset_name(dataset)}: final = last epoch, best = max over epochs "
                  "(mean ± std over seeds of the best-validation configuration).", ""]
        lines += _table(header, rows)
        # A mean of exactly 90% can come out as 0.8999…: the bar sits just under it.
        bar = Bar(TRAINS_PROPERLY - 1e-9, f"{_pct(TRAINS_PROPERLY)}% (our reading of 'trains properly')")
        lines += ["", _pair_verdict(f"Fig. 3 {_dataset_name(dataset)}", results, "GAT-Lip", "GAT",
                                    "best train accuracy", bar, full3), ""]
    df6 = rs.frame("fig6")
    runs6 = with_selected_metrics(df6)
    full6 = full_grid_size(runs6, ["dataset", "variant", "depth"])
    lines += ["", "**Fig. 6** — " + _runs_line(df6, "fig6"), ""]
    present = _datasets(runs6)
    for dataset in [d for d in FIG6_DATASETS if d not in present]:
        lines.append(f"- {_dataset_name(dataset)}: {_missing(dataset)}.")
    if any(d not in present for d in FIG6_DATASETS):
        lines.append("")
    for dataset in [d for d in FIG6_DATASETS if d in present] + [d for d in present if d not in FIG6_DATASETS]:
        here = _of_dataset(runs6, dataset)
        metric = _joined(here["metric"]) or "acc"
        variants = list(FIG6_VARIANTS) + sorted(set(here["variant"].dropna()) - set(FIG6_VARIANTS))
        rows, results = _depth_rows(here, variants, full6)
        lines += [f"Selected test {metric} (%) on {_dataset_name(dataset)} by depth:", ""]
        lines += _table(["depth"] + variants, rows)
        lines += [""] + [_pair_verdict(f"Fig. 6 {_dataset_name(dataset)}", results, lip, plain, f"test {metric}",
                                       _near_best_bar(results.get(lip, {})), full6)
                         for lip, plain in FIG6_PAIRS] + [""]
    lines.append(LEGEND)
    return "\n".join(lines)


def dropout_setting(dropout: Any) -> str:
    """``authors'`` when the model's feature dropout is on (> 0), ``none`` when it is 0, ``?`` if unrecorded."""
    try:
        value = float(dropout)
    except (TypeError, ValueError):
        return "?"
    if math.isnan(value):
        return "?"
    return AUTHORS_DROPOUT if value > 0 else "none"


def grid_breakdown(df: pd.DataFrame, variants: tuple[str, ...]) -> pd.DataFrame:
    """Per (dataset, depth, variant, lr, dropout setting): runs, diverged, failed, mean val/test (fractions).

    Every variant gets a row at every grid point present for its (dataset, depth) (``runs == 0``: not run).
    ``selected`` marks the grid point holding the configuration the tables' cell selects.
    """
    columns = ["dataset", "depth", "variant", "lr", "dropout", "runs", "diverged", "failed", "configs",
               "val", "test", "selected"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    # An unrecorded lr (NaN) becomes +inf so that it forms one grid point of its own (NaN != NaN).
    all_runs = df.assign(dropout_setting=df["dropout"].map(dropout_setting),
                         lr_key=_numeric(df["lr"]).fillna(math.inf))
    runs = with_selected_metrics(all_runs)
    out = []
    for dataset in _datasets(all_runs):
        for depth in _depths(_of_dataset(all_runs, dataset)):
            cell_all = _at(_of_dataset(all_runs, dataset), "depth", depth)
            cell = _at(_of_dataset(runs, dataset), "depth", depth)
            points = sorted({(float(lr), str(d)) for lr, d in zip(cell_all["lr_key"], cell_all["dropout_setting"],
                                                                  strict=True)},
                            key=lambda p: (-p[0], p[1]))
            names = list(variants) + sorted(set(cell_all["variant"].dropna()) - set(variants))
            for variant in names:
                mine = cell[cell["variant"] == variant]
                chosen = select_best(mine) if not mine.empty else None
                for lr, setting in points:
                    def at_point(frame: pd.DataFrame, lr: float = lr, setting: str = setting) -> pd.DataFrame:
                        return frame[(frame["lr_key"] == lr) & (frame["dropout_setting"] == setting)]
                    here = at_point(mine)
                    ok = here[~here["diverged"].astype(bool)]
                    failed = at_point(cell_all[cell_all["variant"] == variant])
                    out.append({
                        "dataset": dataset, "depth": depth, "variant": variant, "lr": lr, "dropout": setting,
                        "runs": len(here), "diverged": int(here["diverged"].sum()),
                        "failed": int((failed["status"] == "failed").sum()),
                        "configs": int(here["config_key"].nunique()),
                        "val": float(ok["sel_val"].mean()) if not ok.empty else math.nan,
                        "test": float(ok["sel_test"].mean()) if not ok.empty else math.nan,
                        "selected": chosen is not None and chosen.config_key in set(here["config_key"]),
                    })
    return pd.DataFrame(out, columns=columns)


def block_residual(rs: RecordSet) -> str:
    """Table 3 cells (ours vs paper) and the per-grid-point breakdown behind them."""
    spec = TABLES["table3"]
    df = rs.frame(spec.experiment)
    cells = build_cells(df, spec)
    lines = ["Paper (§7.3, Table 3): at 15 and 30 layers GAT-Lip beats GAT-res (+6 points on Cora at 30 layers) "
             "and GAT-Lip-res is slightly better still; plain GAT collapses.", "", _runs_line(df, "table3"), "",
             "Table 3 cells (the tables' computation: best mean validation over the grid, its test mean ± std):",
             ""]
    lines += _cells_table(spec, cells, list(spec.columns))
    lines += ["", LEGEND, "", "Verdict (which variant the validation-selected cells rank first):"]
    rank = {r: i for i, r in enumerate(spec.rows)}
    for column in spec.columns:
        label = spec.column_label(column)
        here = [c for c in cells if c.column == label]
        ok = sorted((c for c in here if c.state == "ok"), key=lambda c: (-c.ours_mean, rank[c.row]))
        paper_order = sorted((c for c in here if c.paper is not None), key=lambda c: (-c.paper.mean, rank[c.row]))
        paper_first = paper_order[0].row if paper_order else "-"
        if not ok:
            lines.append(f"- {label}: **{here[0].state if here else NOT_RUN}** — paper ranks {paper_first} first.")
            continue
        order = " > ".join(f"{c.row} {c.ours_mean:.1f}" for c in ok)
        missing = [c.row for c in here if c.state != "ok"]
        agree = "agrees with" if ok[0].row == paper_first else "differs from"
        lines.append(f"- {label}: ours ranks **{ok[0].row}** first ({order}"
                     + (f"; {', '.join(missing)}: {', '.join(sorted({c.state for c in here if c.state != 'ok'}))}"
                        if missing else "")
                     + f"); this {agree} the paper ({paper_first} first){_partial_note(here)}.")
    lines += ["", "Grid breakdown: mean over seeds (non-diverged) of the per-run validation and test accuracy "
              "(%) at every grid point; dropout setting: authors' = the model's own dropouts (config.model."
              "dropout > 0), none = no dropout. ✓ marks the grid point holding the configuration the Table 3 "
              "cell selects. div. = diverged runs (left out of the means).", ""]
    grid = grid_breakdown(df, spec.rows)
    present = {(d, int(k)) for d, k in zip(grid["dataset"], grid["depth"], strict=True)}
    for dataset, depth in spec.columns:
        if (dataset, depth) not in present:
            lines.append(f"- {_dataset_name(dataset)} {depth} layers: {_missing(dataset)}.")
    for (dataset, depth), block in grid.groupby(["dataset", "depth"], sort=False):
        lines += ["", f"*{_dataset_name(dataset)}, {depth} layers*", ""]
        rows, pooled = [], 0
        for r in block.itertuples(index=False):
            runs_text = str(r.runs) + (f" (+{r.failed} failed)" if r.failed else "")
            if r.runs == 0 and not r.failed:
                rows.append([r.variant, _lr_text(r.lr), r.dropout, NOT_RUN, "-", "-", "-", ""])
                continue
            pooled += r.configs > 1
            rows.append([r.variant, _lr_text(r.lr), r.dropout, runs_text, str(r.diverged),
                         _pct(r.val) if r.runs else "-", _pct(r.test) if r.runs else "-",
                         "✓" if r.selected else ""])
        lines += _table(["variant", "lr", "dropout", "runs", "div.", "mean val", "mean test", "selected"], rows)
        if pooled:
            lines.append(f"\n{pooled} grid point(s) pool several configurations (other hyper-parameters vary); "
                         "their means are over all of them.")
        leaders = []
        for (lr, setting), point in block.groupby(["lr", "dropout"], sort=False):
            scored = point[np.isfinite(point["val"].to_numpy(dtype=float))]
            if scored.empty:
                leaders.append((lr, setting, None))
                continue
            order = {v: i for i, v in enumerate(point["variant"])}
            best = min(scored.itertuples(index=False), key=lambda r: (-r.val, order[r.variant]))
            leaders.append((lr, setting, best))
        texts = [f"lr {_lr_text(lr)}, {s} → " + (f"{b.variant} (val {_pct(b.val)}, test {_pct(b.test)})"
                                                     if b is not None else "no converged run")
                 for lr, s, b in leaders]
        names = {b.variant for _, _, b in leaders if b is not None}
        same = ("the same variant leads at every grid point" if len(names) == 1 and len(leaders) > 1
                else "the leader depends on the grid point" if len(names) > 1 else "a single grid point")
        lines += ["", "Leader by mean validation at each grid point: " + "; ".join(texts) + f" — {same}."]
    return "\n".join(lines)


def block_trees(rs: RecordSet) -> str:
    """Fig. 5: best train accuracy on TREES per tree depth and variant; who leads at the deepest depth."""
    df = rs.frame("fig5")
    others = ", ".join(v for v in FIG5_VARIANTS if v not in paper.FIG5_TREE_DEPTH10)
    lines = ["Paper (§7.2, Fig. 5): at tree depth 10, "
             + ", ".join(f"{v} {x:.1f}" for v, x in paper.FIG5_TREE_DEPTH10.items())
             + f"; all others ({others}) < {paper.FIG5_OTHERS_BELOW:g} (train accuracy, %).", "",
             _runs_line(df, "fig5"), ""]
    runs = with_selected_metrics(df)
    depths = _depths(runs, "tree_depth")
    if not depths:
        lines.append(_verdict("", CANNOT_JUDGE, f"fig5 {NOT_RUN_BUDGET}."))
        return "\n".join(lines)
    variants = list(FIG5_VARIANTS) + sorted(set(runs["variant"].dropna()) - set(FIG5_VARIANTS))
    full5 = full_grid_size(runs, ["variant", "tree_depth"])
    rows, deepest = [], {}
    for variant in variants:
        row = [variant]
        for d in depths:
            at = _at(runs[runs["variant"] == variant], "tree_depth", d)
            sel, text = _select(at, "max_train", full5)
            row.append(text)
            if d == depths[-1] and sel is not None:
                deepest[variant] = sel.mean
        rows.append(row)
    lines += ["Best train accuracy (%) = max over epochs of history.train (Alon & Yahav's protocol), mean ± std "
              "over seeds of the best-validation configuration:", ""]
    lines += _table(["variant"] + [f"d={d}" for d in depths], rows)
    not_run = [d for d in FIG5_PAPER_TREE_DEPTHS if d not in depths]
    if not_run:
        lines += ["", f"Tree depths {NOT_RUN_BUDGET}: {', '.join(str(d) for d in not_run)} (paper: 2–10)."]
    missing = [v for v in FIG5_VARIANTS if v not in deepest]
    if missing:
        lines.append(f"No result at d={depths[-1]} (not run or all diverged): {', '.join(missing)}.")
    lines.append("")
    d = depths[-1]
    if not deepest:
        lines.append(_verdict("", CANNOT_JUDGE, f"every run at d={d} diverged."))
        return "\n".join(lines)
    order = {v: i for i, v in enumerate(variants)}
    leader = min(deepest, key=lambda v: (-deepest[v], order[v]))
    ranking = " > ".join(f"{v} {_pct(m)}" for v, m in sorted(deepest.items(), key=lambda x: (-x[1], order[x[0]])))
    lines.append(f"At the deepest tree depth run (d={d}): {ranking}.")
    if d == 10:
        comp = [f"{v} {_pct(deepest[v]) if v in deepest else NOT_RUN} (paper {x:.1f})"
                for v, x in paper.FIG5_TREE_DEPTH10.items()]
        rest = [m for v, m in deepest.items() if v not in paper.FIG5_TREE_DEPTH10]
        comp.append(f"best other {_pct(max(rest)) if rest else '-'} (paper < {paper.FIG5_OTHERS_BELOW:g})")
        lines.append("At d=10 vs the paper: " + "; ".join(comp) + ".")
    else:
        lines.append(f"The paper's numbers are at d=10; the deepest run here is d={d}, so only the ordering "
                     "is compared.")
    if leader == "GAT-Lip":
        reason = f"GAT-Lip leads at d={d}."
    else:
        lip = _pct(deepest["GAT-Lip"]) if "GAT-Lip" in deepest else NOT_RUN
        reason = f"{leader} leads at d={d}; GAT-Lip: {lip}."
    # Without a GAT-Lip result at that depth the claim is untested, not refuted.
    status = HOLDS if leader == "GAT-Lip" else DOES_NOT_HOLD if "GAT-Lip" in deepest else CANNOT_JUDGE
    lines += ["", _verdict("", status, reason)]
    return "\n".join(lines)


def block_fig4(rs: RecordSet) -> str:
    """Fig. 4: GAT vs GAT-Lip selected test accuracy vs depth on PubMed with 100% missing vectors."""
    df = rs.frame("fig4")
    lines = ["Paper (§7.1, Fig. 4): on PubMed with 100% missing vectors GAT-Lip's accuracy increases with depth "
             "while GAT fails to learn (no numbers printed).", "", _runs_line(df, "fig4"), ""]
    runs = with_selected_metrics(df)
    if not runs.empty:
        keep = (runs["dataset"].astype(str).str.lower() == "pubmed") & (_numeric(runs["missing_rate"]) == 100)
        if int((~keep).sum()):
            lines += [f"{int((~keep).sum())} records of other datasets / missing rates are not part of Fig. 4 and "
                      "are ignored.", ""]
        runs = runs[keep]
    if runs.empty:
        lines.append(_verdict("", CANNOT_JUDGE, f"no PubMed 100% records: {NOT_RUN_BUDGET}."))
        return "\n".join(lines)
    full4 = full_grid_size(runs, ["variant", "depth"])
    rows, results = _depth_rows(runs, ("GAT", "GAT-Lip"), full4)
    lines += ["Selected test accuracy (%) by depth:", ""]
    lines += _table(["depth", "GAT", "GAT-Lip"], rows)
    lines += ["", LEGEND, "", "Verdict:", _pair_verdict("PubMed 100%", results, "GAT-Lip", "GAT", "test accuracy",
                                                             full=full4)]
    lip = {d: s for d, s in results.get("GAT-Lip", {}).items() if s is not None}
    if len(lip) >= 2:
        lo, hi = min(lip), max(lip)
        grows = lip[hi].mean > lip[lo].mean
        best_depth = max(lip, key=lambda d: (lip[d].mean, -d))
        lines.append(_verdict("PubMed 100%, GAT-Lip improves with depth", HOLDS if grows else DOES_NOT_HOLD,
                              f"{_pct(lip[lo].mean)} at {lo} layers vs {_pct(lip[hi].mean)} at {hi} layers; "
                              f"best at {best_depth} layers."))
    else:
        lines.append(_verdict("PubMed 100%, GAT-Lip improves with depth", CANNOT_JUDGE,
                              "fewer than two depths with a GAT-Lip result."))
    return "\n".join(lines)


PROTOCOL_EXPERIMENT = "fig6_protocol"
# The authors' code's Lip formula for GT (norm.variant=reference) gets its own row and verdict.
AUTHORS_FORMULA = " (authors' formula)"


def _median_text(values: pd.Series, fmt: Callable[[float], str]) -> str:
    finite = _floats(values.tolist())
    finite = finite[np.isfinite(finite)]
    return fmt(float(np.median(finite))) if finite.size else "-"


def _int_text(value: float) -> str:
    return str(int(round(value)))


def _final_lr(history: Any) -> float:
    lrs = _floats(history.get("lr") if isinstance(history, dict) else None)
    return float(lrs[-1]) if lrs.size else math.nan


def _final_lr_epoch(history: Any) -> float:
    """The first epoch from which the learning rate stays at its final value (when a schedule froze it)."""
    if not isinstance(history, dict):
        return math.nan
    lrs, epochs = _floats(history.get("lr")), _floats(history.get("epoch"))
    if not lrs.size or len(epochs) != len(lrs):
        return math.nan
    changed = np.flatnonzero(lrs != lrs[-1])
    return float(epochs[changed[-1] + 1] if changed.size else epochs[0])


def _formula_label(variant: Any, config: Any) -> Any:
    """``variant``, marked when its LipschitzNorm uses the authors' code's formula (``norm.variant``)."""
    norm = config.get("norm") if isinstance(config, dict) else None
    formula = norm.get("formula", norm.get("variant")) if isinstance(norm, dict) else None  # old records: variant
    if isinstance(norm, dict) and norm.get("name") == "lip" and formula == "reference":
        return f"{variant}{AUTHORS_FORMULA}"
    return variant


def block_gt_protocol(rs: RecordSet) -> str:
    """Fig. 6's deep GT points rerun under the authors' training protocol (``conf/experiment/fig6_protocol``):
    last-epoch and best-validation test accuracy beside Fig. 6's own selected point."""
    df = rs.frame(PROTOCOL_EXPERIMENT)
    lines = ["Question: does the authors' own training protocol (lr 0.001, up to 1000 epochs, learning rate "
             "reduced on validation-loss plateaus, the last epoch's test accuracy; `REFERENCE.md`) make the deep "
             "GT-Lip that fails in Fig. 6's cpu grid trainable, with the paper's eq. 19 or with the authors' "
             f"code's formula (rows marked \"{AUTHORS_FORMULA.strip()}\": ‖Q‖_F over all edges' queries, 1/√d "
             "kept)? These runs are kept out of Fig. 6's grid.", "", _runs_line(df, PROTOCOL_EXPERIMENT), ""]
    runs = with_selected_metrics(df)
    if runs.empty:
        lines.append(_verdict("", CANNOT_JUDGE, f"{PROTOCOL_EXPERIMENT} {NOT_RUN_BUDGET}."))
        return "\n".join(lines)
    runs = runs.assign(row=[_formula_label(v, c) for v, c in zip(runs["variant"], runs["config"], strict=True)])
    fig6 = with_selected_metrics(rs.frame("fig6"))
    header = ["variant", "runs", "test, last epoch", "test, best-val epoch", "train, last epoch",
              "best-val epoch (median)", "final lr (median)", "final lr from epoch (median)",
              "Fig. 6 cpu grid: selected test"]
    for dataset in _datasets(runs):
        here = _of_dataset(runs, dataset)
        fig6_here = _of_dataset(fig6, dataset)
        order = [v + suffix for v in FIG6_VARIANTS for suffix in ("", AUTHORS_FORMULA)]
        labels = [v for v in order if v in set(here["row"])] + sorted(set(here["row"].dropna()) - set(order))
        results: dict[str, dict[int, Selection | None]] = {}
        for depth in _depths(here):
            rows = []
            for label in labels:
                at = _at(here[here["row"] == label], "depth", depth)
                if at.empty:
                    continue
                sel, last_test = _select(at, "last_test")
                results.setdefault(label, {})[depth] = sel
                _, best_test = _select(at, "best_test")
                _, last_train = _select(at, "last_train")
                chosen = sel.runs if sel is not None else at
                # Fig. 6 ran eq. 19 only: the authors' formula has no Fig. 6 point to compare with.
                theirs = _at(fig6_here[fig6_here["variant"] == label], "depth", depth)
                rows.append([label, str(len(at)), last_test, best_test, last_train,
                             _median_text(chosen["best_epoch"], _int_text),
                             _median_text(chosen["history"].map(_final_lr), _sci),
                             _median_text(chosen["history"].map(_final_lr_epoch), _int_text),
                             _select(theirs)[1]])
            lines += [f"*{_dataset_name(dataset)}, {depth} layers* (accuracy in %, mean ± std over seeds):", ""]
            lines += _table(header, rows) + [""]
        for lip in [label for label in labels if label.startswith("GT-Lip")]:
            lines.append(_pair_verdict(f"{_dataset_name(dataset)}, authors' protocol", results, lip, "GT",
                                       "last-epoch test acc"))
        lines.append("")
    lines.append(LEGEND)
    return "\n".join(lines)


@dataclass(frozen=True)
class Block:
    name: str
    heading: str
    build: Callable[[RecordSet], str]


BLOCKS: tuple[Block, ...] = (
    Block("protocol", "Protocol and run inventory", block_protocol),
    Block("claim-gradients", "Claim (§6, Fig. 2): LipschitzNorm prevents gradient explosion in a deep GAT",
          block_gradients),
    Block("claim-missing-vector", "Claim (§7.1, Tables 1–2): GAT-Lip is the best model with 100% missing vectors",
          block_missing_vector),
    Block("claim-depth", "Claim (§6 Fig. 3, §7.3 Fig. 6): LipschitzNorm lets deep attention GNNs train",
          block_depth),
    Block("claim-residual", "Claim (§7.3, Table 3): LipschitzNorm beats residual connections in deep GATs",
          block_residual),
    Block("claim-trees", "Claim (§7.2, Fig. 5): GAT-Lip captures long-range interactions on TREES", block_trees),
    Block("claim-fig4", "Claim (§7.1, Fig. 4): on PubMed 100% GAT-Lip improves with depth, GAT fails", block_fig4),
    Block("check-gt-protocol", "Check (Fig. 6): deep GT under the authors' training protocol", block_gt_protocol),
)
BLOCK_NAMES: tuple[str, ...] = tuple(b.name for b in BLOCKS)


def render_blocks(results_dir: str | os.PathLike) -> dict[str, str]:
    """The body of every block (markdown without the markers), in ``BLOCKS`` order."""
    rs = RecordSet(results_dir)
    return {b.name: b.build(rs) for b in BLOCKS}


# ------------------------------------------------------------------------------------------ markers

_MARKER = re.compile(r"^[ \t]*<!--[ \t]*(/?)auto:([A-Za-z0-9_.-]+)[ \t]*-->[ \t]*\r?$", re.MULTILINE)


def open_marker(name: str) -> str:
    return f"<!-- auto:{name} -->"


def close_marker(name: str) -> str:
    return f"<!-- /auto:{name} -->"


def replace_blocks(text: str, blocks: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """``text`` with the content between each known block's markers replaced by its body.

    Returns (new text, names of the blocks replaced, names of unknown blocks left as they were). Bytes
    outside the replaced contents are kept exactly. Raises ConfigError on unbalanced or nested markers
    (nothing is written then).
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    out, found, unknown = [], [], []
    pos, opened = 0, None
    for m in _MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not closing:
            if opened is not None:
                raise ConfigError(f"report line {line}: {open_marker(name)} opens inside the unclosed block "
                                  f"{opened.group(2)!r}: add {close_marker(opened.group(2))} before it")
            opened = m
            continue
        if opened is None or opened.group(2) != name:
            raise ConfigError(f"report line {line}: {close_marker(name)} has no matching {open_marker(name)} "
                              "before it: add the opening marker or delete this line")
        if name in blocks:
            start = opened.end() + 1  # the content begins after the opening marker's line break
            body = blocks[name].strip("\n").replace("\r\n", "\n").replace("\n", newline)
            out += [text[pos:start], newline, body, newline, newline]
            pos = m.start()
            found.append(name)
        else:
            unknown.append(name)
        opened = None
    if opened is not None:
        line = text.count("\n", 0, opened.start()) + 1
        raise ConfigError(f"report line {line}: {open_marker(opened.group(2))} is never closed: add "
                          f"{close_marker(opened.group(2))} after its content")
    out.append(text[pos:])
    return "".join(out), found, unknown


def skeleton(blocks: dict[str, str]) -> str:
    """A new report: a title, then per block a heading, the block and the discussion placeholder."""
    parts = ["# Reproduction report: LipschitzNorm (Dasoulas, Scaman & Virmaux, ICML 2021)", "",
             "Every number in this file sits between `auto` marker comments and is regenerated from the run "
             "records under `runs/` by `make report` (lipgnn/results/report.py); none is typed by hand. Text "
             "outside the markers is never touched: the discussion goes there.", ""]
    for block in BLOCKS:
        if block.name in blocks:
            parts += [_section(block, blocks[block.name])]
    return "\n".join(parts)


def _section(block: Block, body: str) -> str:
    return "\n".join([f"## {block.heading}", "", open_marker(block.name), "", body.strip("\n"), "",
                      close_marker(block.name), "", PLACEHOLDER, ""])


@dataclass(frozen=True)
class ReportUpdate:
    """What ``update_report`` did."""

    path: Path
    created: bool
    changed: bool
    updated: tuple[str, ...]     # blocks rewritten in place
    appended: tuple[str, ...]    # blocks whose markers were absent and were appended (append_missing=True)
    missing: tuple[str, ...]     # blocks whose markers are absent from the report (left out)
    unknown: tuple[str, ...]     # auto blocks in the report that this version does not know (left as is)


def update_report(results_dir: str | os.PathLike, report_path: str | os.PathLike | None = None, *,
                  append_missing: bool = False, write: bool = True) -> ReportUpdate:
    """Regenerate the ``auto`` blocks of ``report_path`` (default ``results_dir/REPRODUCTION.md``).

    Creates the skeleton if the file does not exist. A block whose markers are absent from an existing
    report is reported in ``missing`` (with a warning) or, with ``append_missing``, appended at the end
    under its heading. ``write=False`` computes the result without touching the file (for ``--check``).
    """
    path = Path(report_path) if report_path is not None else Path(results_dir) / REPORT_NAME
    blocks = render_blocks(results_dir)
    if not path.exists():
        text = skeleton(blocks)
        if write:
            _atomic_write_text(path, text)
        return ReportUpdate(path, True, True, BLOCK_NAMES, (), (), ())
    try:
        old = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): fix or move it") from exc
    new, found, unknown = replace_blocks(old, blocks)
    missing = [name for name in BLOCK_NAMES if name not in found]
    appended: list[str] = []
    if missing and append_missing:
        newline = "\r\n" if "\r\n" in old else "\n"
        tail = "".join(_section(b, blocks[b.name]) for b in BLOCKS if b.name in missing)
        sep = "" if not new or new.endswith(newline * 2) else (newline if new.endswith(newline) else newline * 2)
        new += sep + tail.replace("\n", newline)
        appended, missing = missing, []
    for name in missing:
        log.warning("%s has no %s ... %s markers: block %r not written (use --append-missing)",
                    path, open_marker(name), close_marker(name), name)
    for name in unknown:
        log.warning("%s: unknown block %r left unchanged (known blocks: %s)", path, name, ", ".join(BLOCK_NAMES))
    changed = new != old
    if changed and write:
        # newline="\n" in the store's writer: the text already carries the file's own line endings.
        _atomic_write_text(path, new)
    return ReportUpdate(path, False, changed, tuple(found), tuple(appended), tuple(missing),
                        tuple(dict.fromkeys(unknown)))


def _depth_rows(runs: pd.DataFrame, variants: Sequence[str], full: int = 0
                ) -> tuple[list[list[str]], dict[str, dict]]:
    """One table row per depth (the selected test text of each variant) and the selections behind them;
    ``full``: run count of the fullest point, to mark partial ones."""
    rows: list[list[str]] = []
    results: dict[str, dict] = {}
    for depth in _depths(runs):
        row = [str(depth)]
        for variant in variants:
            at = _at(runs[runs["variant"] == variant], "depth", depth)
            sel, text = _select(at, full=full)
            row.append(text)
            if not at.empty:
                results.setdefault(variant, {})[depth] = sel
        rows.append(row)
    return rows, results
