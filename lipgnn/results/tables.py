"""Tables 1–3 of the paper rebuilt from run records alone (``make tables``).

Protocol of one cell (the paper's §10 model selection, made explicit):

1. take the cell's runs (experiment ``table1``/``table2``/``table3``; variant, dataset, missing rate, and for
   Table 3 the fixed depth); failed runs (crashes) are ignored;
2. per run, the validation and test metrics are those of its ``config.train.selection`` rule: ``best_val``
   (metrics at the epoch of best validation, the paper's text) or ``last`` (last epoch, the authors' code);
3. runs are grouped by configuration = the whole config but the seed (``config_key``: model, norm,
   residual, dataset, missing rate, depth, lr, hidden, heads, dropout, ...);
4. a run is *diverged* when its record says so or its selected val/test metric is not finite. Diverged
   runs are excluded from the means and counted (``[k/n div.]`` in the cell); a configuration whose
   seeds all diverged cannot be selected, and a cell whose configurations all diverged reads "diverged";
5. the configuration with the best mean VALIDATION metric over its non-diverged seeds is selected
   (ties: shallower, then the smaller config hash) — for Tables 1–2 this also selects the depth;
6. the cell reports that configuration's TEST metric, mean ± sample standard deviation (ddof=1) over its
   non-diverged seeds, in percent with one decimal, and its depth in parentheses (Tables 1–2);
7. a sweep gives every cell the same grid, so a cell with fewer runs than the fullest cell of its table
   is *partial* (its sweep was stopped, or runs failed): ``[partial: k/K runs]``, selected among fewer
   configurations or seeds than the others.

Outputs are deterministic (fixed row/column order, no timestamps): identical records give identical files.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lipgnn.results import paper
from lipgnn.results.paper import PaperValue
from lipgnn.results.store import load_records

OGB_DATASETS = frozenset({"ogbn-arxiv", "ogbn-proteins"})
DATASET_NAMES = {
    "cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed", "ogbn-arxiv": "ogbn-arxiv",
    "ogbn-proteins": "ogbn-proteins", "trees": "TREES",
}
NOT_RUN = "not run"
NEEDS_OGB = "needs the OGB download"
DIVERGED = "diverged"

CSV_COLUMNS = (
    "row", "column", "ours_mean", "ours_std", "n_runs", "paper", "ours_depth", "n_diverged",
    "paper_mean", "paper_std", "paper_depth", "selection", "budget", "grid_runs", "full_grid_runs", "note",
)
GRID_KEYS = ("depth", "lr", "hidden", "heads", "dropout")


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


TABLES: dict[str, TableSpec] = {
    "table1": TableSpec(
        "table1", "table1",
        "Table 1. Classification accuracy (%) in the missing-vector setting (0% / 100% of the non-train "
        "node features erased); in parentheses the number of layers of the selected model.",
        paper.TABLE1_ROWS, paper.TABLE1_COLUMNS, "missing_rate", paper.TABLE1,
    ),
    "table2": TableSpec(
        "table2", "table2",
        "Table 2. GAT-Lip vs GCNII: accuracy (%) on ogbn-arxiv (0%) and Cora/PubMed (100% missing "
        "vectors); in parentheses the number of layers of the selected model.",
        paper.TABLE2_ROWS, paper.TABLE2_COLUMNS, "missing_rate", paper.TABLE2, paper.TABLE2_FOOTNOTE,
    ),
    "table3": TableSpec(
        "table3", "table3",
        "Table 3. Accuracy (%) of deep GAT models (15 and 30 layers) with/without residual connections "
        "and with/without LipschitzNorm.",
        paper.TABLE3_ROWS, paper.TABLE3_COLUMNS, "depth", paper.TABLE3,
    ),
}


# ------------------------------------------------------------------------------------------ selection


def with_selected_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``sel_val``/``sel_test`` (per the run's selection rule) and ``diverged``; drop failed runs."""
    out = df[df["status"] != "failed"].copy()
    last = (out["selection"] == "last").to_numpy(dtype=bool)
    best_val = pd.to_numeric(out["best_val"], errors="coerce").to_numpy(dtype=float)
    best_test = pd.to_numeric(out["best_test"], errors="coerce").to_numpy(dtype=float)
    last_val = pd.to_numeric(out["last_val"], errors="coerce").to_numpy(dtype=float)
    last_test = pd.to_numeric(out["last_test"], errors="coerce").to_numpy(dtype=float)
    out["sel_val"] = np.where(last, last_val, best_val)
    out["sel_test"] = np.where(last, last_test, best_test)
    finite = np.isfinite(out["sel_val"].to_numpy(dtype=float)) & np.isfinite(
        out["sel_test"].to_numpy(dtype=float))
    out["diverged"] = (out["status"] == "diverged").to_numpy(dtype=bool) | ~finite
    return out


@dataclass
class Selection:
    """The selected configuration of a group of runs and its aggregated metrics (fractions, not %)."""

    config_key: str
    runs: pd.DataFrame          # every non-failed run of the selected configuration
    n_runs: int
    n_diverged: int
    val_mean: float
    mean: float                 # of ``value`` over non-diverged seeds
    std: float                  # sample std (ddof=1); NaN with one seed
    depth: int | None
    n_configs: int              # configurations compared
    n_point_runs: int = 0       # non-failed runs of every configuration compared (the cell's grid)


def select_best(runs: pd.DataFrame, value: str = "sel_test", score: str = "sel_val") -> Selection | None:
    """Select the configuration with the best mean ``score`` (validation) and aggregate ``value`` (test).

    ``runs`` must come from ``with_selected_metrics``. Returns None when no configuration has a
    non-diverged run.
    """
    candidates = []
    for key, group in runs.groupby("config_key", sort=True):
        ok = group[~group["diverged"]]
        if ok.empty:
            continue
        depth = _depth_of(group)
        candidates.append((-float(ok[score].mean()), depth if depth is not None else -1, str(key), group))
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[:3])
    neg_val, _, key, group = candidates[0]
    ok = group[~group["diverged"]]
    values = ok[value].to_numpy(dtype=float)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return Selection(key, group, len(group), int(group["diverged"].sum()), -neg_val,
                     float(np.mean(values)), std, _depth_of(group), len(candidates), len(runs))


def full_grid_size(runs: pd.DataFrame, keys: list[str]) -> int:
    """Runs in the fullest group of ``keys`` (a table cell or figure point) among non-failed ``runs``.

    A sweep gives every cell one grid of configurations and seeds, so a group with fewer runs is one
    whose sweep has not finished. Read from the records, since they are all a table is built from.
    """
    if runs.empty:
        return 0
    return int(runs.groupby(keys, dropna=False, sort=False).size().max())


def is_partial(n_runs: int, full: int) -> bool:
    """A cell or point with runs, but fewer than the fullest one (``full_grid_size``): its sweep has not
    finished."""
    return 0 < n_runs < full


def partial_text(n_runs: int, full: int) -> str:
    """`` [partial: k/K runs]`` for a partial cell or point (``is_partial``), else ``""``."""
    return f" [partial: {n_runs}/{full} runs]" if is_partial(n_runs, full) else ""


def _depth_of(group: pd.DataFrame) -> int | None:
    depths = pd.to_numeric(group["depth"], errors="coerce").dropna().unique()
    return int(depths[0]) if len(depths) == 1 else None


# ---------------------------------------------------------------------------------------------- cells


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
    full_grid_runs: int = 0          # the same count in the fullest cell of the table

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
                     _column=pd.to_numeric(df[_column_key(spec)], errors="coerce"))


def cell_runs(keyed: pd.DataFrame, row: str, column: tuple[str, int]) -> pd.DataFrame:
    """The runs of one table cell (all configurations and seeds) from a ``with_cell_key`` frame."""
    dataset, value = column
    return keyed[(keyed["variant"] == row) & (keyed["_dataset"] == dataset) & (keyed["_column"] == float(value))]


def _column_key(spec: TableSpec) -> str:
    return "missing_rate" if spec.column_kind == "missing_rate" else "depth"


def build_cells(df: pd.DataFrame, spec: TableSpec) -> list[Cell]:
    """Every cell of ``spec`` (row-major, the paper's order) from the records in ``df``."""
    keyed_all = with_cell_key(df, spec)
    runs = with_selected_metrics(keyed_all)     # keeps the key columns: it filters and adds, never drops
    full = full_grid_size(runs, _CELL_KEY)
    cells = []
    for row in spec.rows:
        for column in spec.columns:
            dataset = column[0]
            cell = Cell(row, spec.column_label(column), dataset, spec.paper.get(row, {}).get(column))
            here = cell_runs(runs, row, column)
            n_failed = int((cell_runs(keyed_all, row, column)["status"] == "failed").sum())
            cell.grid_runs, cell.full_grid_runs = len(here), full
            notes = []
            if here.empty:
                cell.state = NEEDS_OGB if dataset in OGB_DATASETS else NOT_RUN
                notes.append(
                    f"no records: download OGB's {dataset} into the data root, then run experiment "
                    f"{spec.experiment}" if dataset in OGB_DATASETS
                    else f"no records in runs/{spec.experiment}/ for this cell")
            else:
                chosen = select_best(here)
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
                notes.append(f"partial grid: {len(here)} of the {full} runs the fullest cell has")
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
    seeds = sorted(int(s) for s in pd.to_numeric(runs["seed"], errors="coerce").dropna())
    parts.append(f"seeds={_ranges(seeds)}")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- protocol


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
    proto = Protocol(spec.experiment, len(df), selects_depth=spec.show_depth)
    if df.empty:
        return proto
    proto.budget = _joined(df["budget"]) or "none"
    proto.epochs = _joined(df["epochs"]) or "?"
    seeds = sorted(int(s) for s in pd.to_numeric(df["seed"], errors="coerce").dropna().unique())
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
    # Written by hand: pandas' to_markdown needs the optional `tabulate` package and cannot add the
    # caption and notes; the layout is a plain grid.
    labels = [spec.column_label(c) for c in spec.columns]
    lines = [f"# {spec.title}", "", proto.sentence(), ""]
    header = ["model"] + [f"{label} {who}" for label in labels for who in ("ours", "paper")]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join([":---"] + [":---:"] * (len(header) - 1)) + "|")
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
        r"\caption{" + _tex(spec.title + " " + proto.sentence()) + "}",
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
            "note": c.note if ok else f"{c.state}: {c.note}",
        })
    frame = pd.DataFrame(rows, columns=list(CSV_COLUMNS))
    for col in ("ours_depth", "paper_depth", "n_runs", "n_diverged", "grid_runs", "full_grid_runs"):
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
    if any(c.state == "ok" and not math.isfinite(c.ours_std) for c in cells):
        legend.append("- [1 seed]: a single usable seed, so no standard deviation.")
    if any(c.partial for c in cells):
        legend.append("- [partial: k/K runs]: the cell's sweep has not finished: it has k runs where the fullest "
                      "cell has K, so fewer configurations or seeds were compared.")
    if spec.footnote:
        legend.append(f"- Paper: {spec.footnote}")
    return legend


# -------------------------------------------------------------------------------------------- driver


def build_table(results_dir: str | os.PathLike, name: str, budget: str | None = None
                ) -> tuple[TableSpec, list[Cell], Protocol]:
    """Cells and protocol of table ``name`` from the records under ``results_dir`` (optionally one budget)."""
    spec = TABLES[name]
    df = load_records(results_dir, spec.experiment, history=False)
    if budget is not None and not df.empty:
        df = df[df["budget"].astype(str) == budget]
    return spec, build_cells(df, spec), protocol_of(df, spec)


def make_tables(results_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                names: tuple[str, ...] = tuple(TABLES), budget: str | None = None) -> list[Path]:
    """Write ``<out_dir>/<table>.{md,tex,csv}`` (default ``results_dir/tables``); return the paths."""
    out = Path(out_dir) if out_dir is not None else Path(results_dir) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        spec, cells, proto = build_table(results_dir, name, budget)
        for suffix, text in (("md", render_markdown(spec, cells, proto)),
                             ("tex", render_latex(spec, cells, proto)),
                             ("csv", render_csv(cells))):
            path = out / f"{name}.{suffix}"
            path.write_text(text, encoding="utf-8", newline="\n")
            written.append(path)
    return written


# ---------------------------------------------------------------------------------------------- utils


def _joined(values: pd.Series) -> str:
    """Sorted distinct non-missing values, comma-separated (deterministic caption text)."""
    seen = set()
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            continue
        seen.add(v)
    return ", ".join(_fmt_value(v) for v in sorted(seen, key=_sort_key))


def _sort_key(value: object) -> tuple:
    return (0, float(value), "") if isinstance(value, (int, float, np.number)) else (1, 0.0, str(value))


def _fmt_value(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 4] -> '0-2, 4'."""
    if not values:
        return "-"
    parts, start, prev = [], values[0], values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "±": r"$\pm$", "–": "--", "—": "---", "≥": r"$\geq$", "×": r"$\times$"}


def _tex(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in text)
