"""Shared plotting for the figure artifacts: styling, empty panels, depth series, deterministic saving.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot, hence no GUI backend or global state:
``savefig`` renders PNG with Agg and PDF with the pdf backend) and saved with the metadata that embeds
dates/versions removed, so identical records give byte-identical PNG and PDF files. Wherever a figure
aggregates over hyper-parameters it uses ``protocol.select_best``: per point, the configuration with the best
mean validation metric, then mean ± sample std (ddof=1) over its non-diverged seeds. Accuracies in percent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lipgnn.results.labels import DATASET_NAMES
from lipgnn.results.protocol import Full, full_at, is_partial, select_best

# Stable styling: one colour per normalisation, one line style/marker per model family.
NORM_COLOURS = {"none": "#1f77b4", "layernorm": "#2ca02c", "pairnorm": "#ff7f0e", "lip": "#d62728"}
MODEL_STYLE = {"gat": ("-", "o"), "gt": ("--", "s")}

RC = {
    "svg.hashsalt": "lipgnn",          # fixed ids in SVG output
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "figure.dpi": 100,
    "savefig.dpi": 150,
}
SAVE_METADATA = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": "lipgnn"},
}


def note(ax, text: str) -> None:
    """An explanatory message in the middle of an empty panel (whose meaningless ticks are removed)."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True,
            fontsize=9, color="0.35", bbox={"boxstyle": "round", "fc": "0.95", "ec": "0.8"})


def legend(ax, **kwargs) -> None:
    """``ax.legend(**kwargs)`` when the axes has labelled artists; a panel drawn from no records has none, and
    matplotlib would warn for every empty figure. A label drawn more than once (one line per seed) is listed once."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        first = {label: handles[labels.index(label)] for label in dict.fromkeys(labels)}
        ax.legend(list(first.values()), list(first.keys()), **kwargs)


def empty_figure(name: str, title: str) -> Figure:
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    note(ax, f"no records yet\n(run the {name} experiment: results_dir/runs/{name}/)")
    return fig


def pct(values) -> np.ndarray:
    return 100.0 * np.asarray(values, dtype=float)


def seed_range(runs: pd.DataFrame) -> str:
    n = int(runs["seed"].nunique())
    return f"{n} seed{'s' if n != 1 else ''}"


def _series(history: dict, key: str) -> np.ndarray:
    values = history.get(key) or []
    return np.array([math.nan if v is None else float(v) for v in values], dtype=float)


def mean_curves(runs: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-epoch mean over seeds of ``history[key]`` (runs of different lengths padded with NaN)."""
    curves = [_series(h, key) for h in runs["history"]]
    epochs = max((list(h.get("epoch") or []) for h in runs["history"]), key=len, default=[])
    length = max((len(c) for c in curves), default=0)
    if length == 0:
        return np.array([]), np.array([])
    stack = np.full((len(curves), length), np.nan)
    for i, c in enumerate(curves):
        stack[i, : len(c)] = c
    x = np.asarray(epochs, dtype=float) if len(epochs) == length else np.arange(1, length + 1, dtype=float)
    with np.errstate(all="ignore"):
        counts = np.isfinite(stack).sum(axis=0)
        mean = np.where(counts > 0, np.nansum(stack, axis=0) / np.maximum(counts, 1), np.nan)
    return x, mean


def pick_config(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs of one configuration: best mean validation if any seed converged, else the first config."""
    chosen = select_best(runs)
    if chosen is not None:
        return chosen.runs
    first = sorted(runs["config_key"].unique())[0]
    return runs[runs["config_key"] == first]


class DepthPoints(NamedTuple):
    """One series' points against depth, each selected by validation (``select_best``)."""

    xs: list[float]             # depths with a selected configuration
    means: list[float]          # selected test metric, %, mean over non-diverged seeds
    stds: list[float]           # its std, % (0 with one seed)
    all_div: list[float]        # depths where every run diverged
    seeds: list[int]            # non-diverged seeds of the selected configuration
    point_runs: list[int]       # runs of every configuration compared at the depth (its grid)


def by_depth(runs: pd.DataFrame, depth_col: str = "depth", value: str = "sel_test") -> DepthPoints:
    """Per depth, the configuration with the best validation and its aggregated metric."""
    points = DepthPoints([], [], [], [], [], [])
    depths = sorted(runs[depth_col].dropna().unique())
    for d in depths:
        here = runs[runs[depth_col] == d]
        chosen = select_best(here, value=value)
        if chosen is None:
            points.all_div.append(float(d))
            continue
        points.xs.append(float(d))
        points.means.append(100.0 * chosen.mean)
        points.stds.append(100.0 * chosen.std if math.isfinite(chosen.std) else 0.0)
        points.seeds.append(chosen.n_runs - chosen.n_diverged)
        points.point_runs.append(chosen.n_point_runs)
    return points


class SeriesDrawn(NamedTuple):
    """What ``plot_depth_series`` put on the axes; ``|`` merges two series' (or panels') answers."""

    anything: bool = False      # a point or an all-diverged mark
    hollow: bool = False        # a hollow (partial) marker, which the caption then explains
    multi_seed: bool = False    # a point averaged over more than one seed (so it has an error bar)

    def __or__(self, other: SeriesDrawn) -> SeriesDrawn:
        return SeriesDrawn(self.anything or other.anything, self.hollow or other.hollow,
                           self.multi_seed or other.multi_seed)


def seeds_caption(multi_seed: bool) -> str:
    """How points aggregate seeds: the ± only where some point has more than one seed."""
    return "mean ± std over seeds" if multi_seed else "one seed per point"


def paper_marker(ax, x: float, y: float, label: str, marker: str = "D") -> None:
    """The paper's printed value at one point: a large hollow black marker (D: with LipschitzNorm, X: without)."""
    ax.plot([x], [y], linestyle="none", marker=marker, markersize=8, markerfacecolor="none", markeredgecolor="black",
            label=label)


def plot_depth_series(ax, runs: pd.DataFrame, label: str, colour: str, linestyle: str, marker: str,
                       depth_col: str = "depth", value: str = "sel_test", full: Full = 0) -> SeriesDrawn:
    """One variant's (``label``'s) selected metric against depth; a point whose sweep has not finished (fewer runs
    than ``full``, one count or per point) gets a hollow marker, so it is not read as final."""
    series = by_depth(runs, depth_col, value)
    xs, all_div = series.xs, series.all_div
    points = []
    if xs:
        ax.errorbar(xs, series.means, yerr=series.stds, label=label, color=colour, linestyle=linestyle,
                    marker=marker, markersize=4, capsize=2, linewidth=1.2)
        points = [(x, m) for x, m, n in zip(xs, series.means, series.point_runs, strict=True)
                  if is_partial(n, full_at(full, label, x))]
        if points:
            ax.plot(*zip(*points, strict=True), linestyle="none", marker=marker, markersize=6, color=colour,
                    markerfacecolor="white", markeredgecolor=colour, zorder=3)
    if all_div:
        # Depths where every seed diverged: an x at the bottom of the panel instead of a fake value.
        ax.plot(all_div, [0.03] * len(all_div), linestyle="none", marker="x", color=colour, markersize=6,
                transform=ax.get_xaxis_transform(), label=f"{label}: all seeds diverged")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return SeriesDrawn(bool(xs or all_div), bool(points), any(n > 1 for n in series.seeds))


def partial_caption(hollow: bool) -> str:
    """A caption line explaining hollow markers, when any was drawn."""
    if not hollow:
        return ""
    return "\nhollow marker: partial point (its sweep has not finished: fewer runs than the sweep puts in a point)"


def describe(runs: pd.DataFrame) -> str:
    names = sorted({DATASET_NAMES.get(str(d).lower(), str(d)) for d in runs["dataset"].dropna()})
    rates = sorted({float(r) for r in runs["missing_rate"].dropna()})
    text = ", ".join(names)
    if rates and rates != [0.0]:
        text += " (" + ", ".join(f"{r:g}%" for r in rates) + " missing)"
    return text


def ensure_bundled_fonts() -> bool:
    """Rebuild matplotlib's font list if its cache lacks matplotlib's own fonts; True if it did.

    matplotlib keeps one font cache per version in the user's cache folder. A cache written by another
    install of the same version (another virtual environment, since deleted) lists no bundled fonts
    (DejaVu, STIX, Computer Modern): math text then falls back to other fonts and PDFs embed system
    font files, so the same records give different figures. The rebuild is what a fresh cache holds
    (same fonts, same order, so the same lookups), and it is written back for later processes."""
    import matplotlib
    from matplotlib import font_manager

    bundled = (Path(matplotlib.get_data_path()) / "fonts" / "ttf").resolve()
    manager = font_manager.fontManager
    if any(Path(entry.fname).resolve().parent == bundled for entry in manager.ttflist):
        return False
    fresh = font_manager.FontManager()
    # The instance is kept (the module's ``findfont`` is bound to it); only its lists are replaced.
    manager.ttflist, manager.afmlist = fresh.ttflist, fresh.afmlist
    manager._findfont_cached.cache_clear()
    cache = Path(matplotlib.get_cachedir()) / f"fontlist-v{font_manager.FontManager.__version__}.json"
    font_manager.json_dump(manager, cache)
    return True


def save_figure(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``stem.<fmt>`` with date/version metadata removed (byte-identical reruns)."""
    ensure_bundled_fonts()
    if fig.get_layout_engine() is not None:
        # Lay out once, then freeze: every format gets the same layout and the (slow) constrained
        # layout solver is not rerun per format.
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        fig.savefig(path, format=fmt, metadata=SAVE_METADATA.get(fmt))
        paths.append(path)
    return paths
