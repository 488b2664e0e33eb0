"""The paper-table builder every table artifact uses: cells from records, then Markdown, LaTeX and CSV.

A cell follows ``protocol`` (best mean validation configuration, its test mean ± sample std over
non-diverged seeds); Tables 1–2 also select the depth, Table 3 fixes it. Outputs are deterministic (fixed
row/column order, no timestamps): identical records give identical files.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from lipgnn.results.grid import expected_runs
from lipgnn.results.labels import DATASET_NAMES, DIVERGED, NEEDS_OGB, NOT_RUN, OGB_DATASETS
from lipgnn.results.protocol import full_grid_size, partial_text, select_best, with_selected_metrics
from lipgnn.results.render.latex import tex as _tex
from lipgnn.results.render.text import fmt_value as _fmt_value
from lipgnn.results.render.text import joined as _joined
from lipgnn.results.render.text import md_table
from lipgnn.results.render.text import ranges as _ranges
from lipgnn.results.stats import Interval, t_interval, under_budget

CSV_COLUMNS = (
    "row", "column", "ours_mean", "ours_std", "n_runs", "paper", "ours_depth", "n_diverged",
    "paper_mean", "paper_std", "paper_depth", "selection", "budget", "grid_runs", "full_grid_runs", "note",
    "n_seeds", "ci95_low", "ci95_high", "under_budget",
)
GRID_KEYS = ("depth", "lr", "hidden", "heads", "dropout")


@dataclass(frozen=True)
class PaperValue:
    """One reported cell: ``mean ± std (depth)`` in percent; ``text`` is the paper's own rendering."""

    mean: float
    std: float | None
    depth: int | None
    text: str


def paper_value(mean: float, std: float | None, depth: int | None) -> PaperValue:
    """A regular cell, printed by the paper as ``mean ± std (depth)`` with one decimal."""
    text = f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "") + (f" ({depth})" if depth else "")
    return PaperValue(mean, std, depth, text)


@dataclass(frozen=True)
class TableSpec:
    """Layout of one paper table: rows are variant labels, columns (dataset, missing rate or depth)."""

    name: str
    experiment: str
    title: str
    rows: tuple[str, ...]
    columns: tuple[tuple[str, int], ...]
    column_kind: str            # "missing_rate" (Tables 1–2: depth is selected) | "depth" (Table 3: fixed)
    paper: dict[str, dict[tuple[str, int], PaperValue]]
    footnote: str = ""

    @property
    def show_depth(self) -> bool:
        return self.column_kind == "missing_rate"

    def column_label(self, column: tuple[str, int]) -> str:
        dataset, value = column
        name = DATASET_NAMES.get(dataset, dataset)
        return f"{name} {value}%" if self.column_kind == "missing_rate" else f"{name} {value} layers"


@dataclass
class Cell:
    row: str
    column: str
    dataset: str
    paper: PaperValue | None
    ours_mean: float = math.nan      # percent
    ours_std: float = math.nan       # percent
    ours_depth: int | None = None
    n_runs: int = 0
    n_diverged: int = 0
    selection: str = ""
    budget: str = ""
    note: str = ""
    state: str = NOT_RUN             # "ok" | NOT_RUN | NEEDS_OGB | DIVERGED
    grid_runs: int = 0               # non-failed runs of the cell, every configuration and seed
    full_grid_runs: int = 0          # runs the declared grid puts in the cell (else: the fullest cell's count)
    ci: Interval = Interval(0, math.nan, math.nan, math.nan)   # t-interval of the mean, percent
    under_budget: bool = False       # some run of the selected configuration is below its declared epochs
    runs: pd.DataFrame | None = None  # the selected configuration's runs (for paired comparisons)
    all_runs: pd.DataFrame | None = None  # every run of the cell, all configurations (the selection reads them)

    @property
    def partial(self) -> str:
        return partial_text(self.grid_runs, self.full_grid_runs)

    def ours_text(self, show_depth: bool) -> str:
        if self.state != "ok":
            text = f"{DIVERGED} ({self.n_diverged}/{self.n_runs})" if self.state == DIVERGED else self.state
            return text + self.partial
        text = f"{self.ours_mean:.1f}"
        text += f" ± {self.ours_std:.1f}" if math.isfinite(self.ours_std) else ""
        if show_depth and self.ours_depth is not None:
            text += f" ({self.ours_depth})"
        if not math.isfinite(self.ours_std):
            text += " [1 seed]"
        elif math.isfinite(self.ci.lo):
            text += f" n={self.ci.n} [{self.ci.lo:.1f}, {self.ci.hi:.1f}]"
        if self.n_diverged:
            text += f" [{self.n_diverged}/{self.n_runs} div.]"
        return text + self.partial

    def paper_text(self) -> str:
        return self.paper.text if self.paper is not None else "-"


_CELL_KEY = ["variant", "_dataset", "_column"]


def with_cell_key(df: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """``df`` plus the normalised key of the cell each run belongs to (columns ``_CELL_KEY``): lower-cased
    dataset and the numeric column value, so ``"PubMed"``/``"pubmed"`` and ``30``/``"30"`` meet."""
    return df.assign(_dataset=df["dataset"].astype(str).str.lower(),
                     _column=df[_column_key(spec)])


def cell_runs(keyed: pd.DataFrame, row: str, column: tuple[str, int]) -> pd.DataFrame:
    """The runs of one table cell (all configurations and seeds) from a ``with_cell_key`` frame."""
    dataset, value = column
    return keyed[(keyed["variant"] == row) & (keyed["_dataset"] == dataset) & (keyed["_column"] == float(value))]


def _column_key(spec: TableSpec) -> str:
    return "missing_rate" if spec.column_kind == "missing_rate" else "depth"


def build_cells(df: pd.DataFrame, spec: TableSpec, deeper_than: int | None = None) -> list[Cell]:
    """Every cell of ``spec`` (row-major, the paper's order) from the records in ``df``; with ``deeper_than``,
    each cell's configuration is selected among its runs deeper than that many layers only (a claim about deep
    models), while whether the cell is partial still counts all its runs."""
    keyed_all = with_cell_key(df, spec)
    runs = with_selected_metrics(keyed_all)     # keeps the key columns: it filters and adds, never drops
    fullest = full_grid_size(runs, _CELL_KEY)
    cells = []
    for row in spec.rows:
        for column in spec.columns:
            dataset = column[0]
            cell = Cell(row, spec.column_label(column), dataset, spec.paper.get(row, {}).get(column))
            here = cell_runs(runs, row, column)
            declared = expected_runs(df, spec.experiment, variant=row, dataset=dataset,
                                     **{_column_key(spec): column[1]})
            full = fullest if declared is None else declared
            n_failed = int((cell_runs(keyed_all, row, column)["status"] == "failed").sum())
            cell.grid_runs, cell.full_grid_runs = len(here), full
            cell.all_runs = here
            notes = []
            if here.empty:
                cell.state = NEEDS_OGB if dataset in OGB_DATASETS else NOT_RUN
                notes.append(
                    f"no records: download OGB's {dataset} into the data root, then run experiment "
                    f"{spec.experiment}" if dataset in OGB_DATASETS
                    else f"no records in runs/{spec.experiment}/ for this cell")
            else:
                pool = here if deeper_than is None else here[here["depth"] > deeper_than]
                chosen = select_best(pool) if not pool.empty else None
                cell.budget = _joined(here["budget"])
                cell.selection = _joined(here["selection"])
                if chosen is None:
                    cell.state = DIVERGED
                    cell.n_runs = len(here)
                    cell.n_diverged = int(here["diverged"].sum())
                    notes.append(f"all {len(here)} runs diverged")
                else:
                    cell.state = "ok"
                    cell.ours_mean = 100.0 * chosen.mean
                    cell.ours_std = 100.0 * chosen.std
                    cell.ours_depth = chosen.depth
                    cell.n_runs = chosen.n_runs
                    cell.n_diverged = chosen.n_diverged
                    cell.ci = t_interval(100.0 * chosen.runs.loc[~chosen.runs["diverged"], "sel_test"])
                    cell.under_budget = under_budget(chosen.runs)
                    cell.runs = chosen.runs
                    cell.selection = _joined(chosen.runs["selection"])
                    cell.budget = _joined(chosen.runs["budget"])
                    notes.append(
                        f"best of {chosen.n_configs} configurations by mean val "
                        f"({100.0 * chosen.val_mean:.1f}); {_describe_config(chosen.runs)}")
                    other_div = int(here["diverged"].sum()) - chosen.n_diverged
                    if other_div:
                        notes.append(f"{other_div} diverged runs in other configurations")
            if n_failed:
                notes.append(f"{n_failed} failed runs ignored")
            if cell.partial:
                notes.append(f"partial grid: {len(here)} of the {full} runs "
                             + ("the fullest cell has" if declared is None else "its declared grid has"))
            cell.note = "; ".join(notes)
            cells.append(cell)
    return cells


def _describe_config(runs: pd.DataFrame) -> str:
    first = runs.iloc[0]
    parts = []
    for key in GRID_KEYS:
        value = first[key]
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            parts.append(f"{key}={_fmt_value(value)}")
    seeds = sorted(int(s) for s in runs["seed"].dropna())
    parts.append(f"seeds={_ranges(seeds)}")
    return " ".join(parts)


@dataclass
class Protocol:
    """What the records of one experiment say about how they were produced (for the caption)."""

    experiment: str
    n_records: int
    budget: str = ""
    epochs: str = ""
    seeds: str = ""
    selection: str = ""
    grid: dict[str, str] = field(default_factory=dict)
    selects_depth: bool = False

    def sentence(self) -> str:
        if self.n_records == 0:
            return f"No records yet under runs/{self.experiment}/: every cell of ours is empty."
        rules = {"best_val": "test at the epoch of best validation (best_val)",
                 "last": "test at the last epoch (last)"}
        selection = ", ".join(rules.get(s, s) for s in self.selection.split(", ") if s)
        grid = "; ".join(f"{k} {{{v}}}" for k, v in self.grid.items() if v)
        return (
            f"Ours: {self.n_records} runs of experiment {self.experiment}; budget {self.budget}; "
            f"epochs {self.epochs}; seeds {self.seeds}; per-run metric: {selection}. Grid: {grid}. "
            "Per cell, the configuration (all hyper-parameters"
            f"{' and depth' if self.selects_depth else ''}) with the best mean validation "
            "accuracy is selected and its test accuracy reported as mean ± sample std (ddof=1) over "
            "seeds; diverged runs are excluded from the mean and counted as [k/n div.]; failed runs are "
            "ignored. Paper: the values printed in the paper."
        )


def protocol_of(df: pd.DataFrame, spec: TableSpec) -> Protocol:
    """The caption's account of the records behind the table: those of the declared grid only (a record outside
    it is never a candidate, so it is not counted either; the report lists it)."""
    if "in_grid" in df:
        df = df[df["in_grid"].astype(bool)]
    proto = Protocol(spec.experiment, len(df), selects_depth=spec.show_depth)
    if df.empty:
        return proto
    proto.budget = _joined(df["budget"]) or "none"
    proto.epochs = _joined(df["epochs"]) or "?"
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    per_config = df.groupby("config_key")["seed"].nunique()
    counts = sorted(set(int(c) for c in per_config))
    count_text = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    proto.seeds = f"{_ranges(seeds)} ({count_text} per configuration)"
    proto.selection = _joined(df["selection"])
    for key in GRID_KEYS:
        proto.grid[key] = _joined(df[key])
    return proto


# ------------------------------------------------------------------------------------------ rendering


def render_markdown(spec: TableSpec, cells: list[Cell], proto: Protocol) -> str:
    """A GitHub-flavoured Markdown table with an ours/paper column pair per paper column."""
    labels = [spec.column_label(c) for c in spec.columns]
    lines = [f"# {spec.title}", "", proto.sentence(), ""]
    header = ["model"] + [f"{label} {who}" for label in labels for who in ("ours", "paper")]
    lines += md_table(header, [])
    by_pos = {(c.row, c.column): c for c in cells}
    for row in spec.rows:
        entries = [row]
        for label in labels:
            cell = by_pos[(row, label)]
            entries += [cell.ours_text(spec.show_depth), cell.paper_text()]
        lines.append("| " + " | ".join(entries) + " |")
    lines += ["", *_legend(spec, cells)]
    return "\n".join(lines) + "\n"


def render_latex(spec: TableSpec, cells: list[Cell], proto: Protocol) -> str:
    """A LaTeX ``table`` (plain ``tabular``, no extra packages) with ours/paper sub-columns."""
    labels = [spec.column_label(c) for c in spec.columns]
    by_pos = {(c.row, c.column): c for c in cells}
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        # LaTeX prints "Table N:" itself, so the caption drops the paper's own "Table N." prefix.
        r"\caption{" + _tex(re.sub(r"^Table \d+\.\s*", "", spec.title) + " " + proto.sentence()) + "}",
        r"\label{tab:" + spec.name + "}",
        r"\begin{tabular}{l" + "cc" * len(labels) + "}",
        r"\hline",
        " & ".join([""] + [r"\multicolumn{2}{c}{" + _tex(label) + "}" for label in labels]) + r" \\",
        " & ".join(["Model"] + ["ours", "paper"] * len(labels)) + r" \\",
        r"\hline",
    ]
    for row in spec.rows:
        entries = [_tex(row)]
        for label in labels:
            cell = by_pos[(row, label)]
            entries += [_tex(cell.ours_text(spec.show_depth)), _tex(cell.paper_text())]
        lines.append(" & ".join(entries) + r" \\")
    lines += [r"\hline", r"\end{tabular}"]
    legend = _legend(spec, cells)
    if legend:
        lines.append(r"\par\smallskip\footnotesize " + r" \\ ".join(_tex(x.lstrip("- ")) for x in legend))
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def cells_frame(cells: list[Cell]) -> pd.DataFrame:
    """The long-form CSV: one row per cell, columns ``CSV_COLUMNS``; numbers in percent."""
    rows = []
    for c in cells:
        ok = c.state == "ok"
        rows.append({
            "row": c.row, "column": c.column,
            "ours_mean": round(c.ours_mean, 3) if ok else math.nan,
            "ours_std": round(c.ours_std, 3) if ok and math.isfinite(c.ours_std) else math.nan,
            "n_runs": c.n_runs, "paper": c.paper_text(),
            "ours_depth": c.ours_depth if ok else None, "n_diverged": c.n_diverged,
            "paper_mean": c.paper.mean if c.paper else math.nan,
            "paper_std": c.paper.std if c.paper and c.paper.std is not None else math.nan,
            "paper_depth": c.paper.depth if c.paper else None,
            "selection": c.selection, "budget": c.budget,
            "grid_runs": c.grid_runs, "full_grid_runs": c.full_grid_runs,
            "n_seeds": c.ci.n if ok else 0,
            "ci95_low": round(c.ci.lo, 3) if ok and math.isfinite(c.ci.lo) else math.nan,
            "ci95_high": round(c.ci.hi, 3) if ok and math.isfinite(c.ci.hi) else math.nan,
            "under_budget": c.under_budget,
            "note": c.note if ok else f"{c.state}: {c.note}",
        })
    frame = pd.DataFrame(rows, columns=list(CSV_COLUMNS))
    for col in ("ours_depth", "paper_depth", "n_runs", "n_diverged", "grid_runs", "full_grid_runs", "n_seeds"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Int64")
    return frame


def render_csv(cells: list[Cell]) -> str:
    return cells_frame(cells).to_csv(index=False, lineterminator="\n")


def _legend(spec: TableSpec, cells: list[Cell]) -> list[str]:
    states = {c.state for c in cells}
    legend = []
    if NOT_RUN in states:
        legend.append(f"- {NOT_RUN}: no records for this cell under runs/{spec.experiment}/.")
    if NEEDS_OGB in states:
        legend.append(f"- {NEEDS_OGB}: OGB datasets are not mirrored on this machine; download them into "
                      "the data root and run the experiment to fill these cells.")
    if DIVERGED in states:
        legend.append(f"- {DIVERGED} (k/n): every run of the cell diverged (non-finite loss or metric).")
    if any(c.n_diverged for c in cells if c.state == "ok"):
        legend.append("- [k/n div.]: k of the n seeds of the selected configuration diverged and are "
                      "excluded from its mean.")
    if any(c.state == "ok" and math.isfinite(c.ci.lo) for c in cells):
        legend.append("- n=k [lo, hi]: k non-diverged seeds of the selected configuration and the 95% Student "
                      "t-interval of their mean.")
    if any(c.state == "ok" and not math.isfinite(c.ours_std) for c in cells):
        legend.append("- [1 seed]: a single usable seed, so no standard deviation.")
    if any(c.partial for c in cells):
        legend.append("- [partial: k/K runs]: the cell's sweep has not finished: it has k runs where its declared grid "
                      "(conf/grid/<experiment>_<budget>.yaml) has K, so fewer configurations or seeds were compared.")
    if spec.footnote:
        legend.append(f"- Paper: {spec.footnote}")
    return legend


def table_outputs(df: pd.DataFrame, spec: TableSpec) -> dict[str, str]:
    """The exact contents of ``<name>.md``, ``<name>.tex`` and ``<name>.csv`` from the records in ``df``."""
    df = df[df["experiment"] == spec.experiment] if not df.empty else df
    cells, proto = build_cells(df, spec), protocol_of(df, spec)
    return {"md": render_markdown(spec, cells, proto), "tex": render_latex(spec, cells, proto),
            "csv": render_csv(cells)}
