"""Figures 2–6 of the paper rebuilt from run records alone (``make figures``).

Each ``figN(df)`` takes the records of experiment ``figN`` (``load_records(results_dir, "figN")``) and
returns a matplotlib ``Figure``; an empty frame still gives a figure that says "no records yet", so
``make figures`` always writes every file. Wherever a figure aggregates over hyper-parameters it uses the
tables' protocol (``tables.select_best``): per depth, the configuration with the best mean validation
metric, then mean ± sample std (ddof=1) over its non-diverged seeds. Accuracies are shown in percent.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot, hence no GUI backend or global state:
``savefig`` renders PNG with Agg and PDF with the pdf backend) and saved with the metadata that embeds
dates/versions removed, so identical records give byte-identical PNG and PDF files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lipgnn.results import paper
from lipgnn.results.store import load_records
from lipgnn.results.tables import (
    DATASET_NAMES,
    NEEDS_OGB,
    NOT_RUN,
    OGB_DATASETS,
    full_grid_size,
    is_partial,
    select_best,
    with_selected_metrics,
)

# Stable styling: one colour per normalisation, one line style/marker per model family.
NORM_COLOURS = {"none": "#1f77b4", "layernorm": "#2ca02c", "pairnorm": "#ff7f0e", "lip": "#d62728"}
FIG5_MARKERS = {"none": "o", "pairnorm": "^", "lip": "s"}   # the paper's Fig. 5: circle, triangle, square
MODEL_STYLE = {"gat": ("-", "o"), "gt": ("--", "s")}
FIG6_VARIANTS = ("GAT", "GAT-Ln", "GAT-Pn", "GAT-Lip", "GT", "GT-Ln", "GT-Pn", "GT-Lip")
FIG6_DATASETS = ("cora", "pubmed", "ogbn-arxiv", "ogbn-proteins")
FIG5_MODELS = ("gcn", "gin", "ggnn", "gat")
NEEDS_HISTORY = frozenset({"fig2", "fig3"})   # the others use only the best/last metrics

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


# ------------------------------------------------------------------------------------------- helpers


def _note(ax, text: str) -> None:
    """An explanatory message in the middle of an empty panel (whose meaningless ticks are removed)."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True,
            fontsize=9, color="0.35", bbox={"boxstyle": "round", "fc": "0.95", "ec": "0.8"})


def _empty_figure(name: str, title: str) -> Figure:
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    _note(ax, f"no records yet\n(run the {name} experiment: results_dir/runs/{name}/)")
    return fig


def _pct(values) -> np.ndarray:
    return 100.0 * np.asarray(values, dtype=float)


def _seed_range(runs: pd.DataFrame) -> str:
    n = int(pd.to_numeric(runs["seed"], errors="coerce").nunique())
    return f"{n} seed{'s' if n != 1 else ''}"


def _series(history: dict, key: str) -> np.ndarray:
    values = history.get(key) or []
    return np.array([math.nan if v is None else float(v) for v in values], dtype=float)


def _mean_curves(runs: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray]:
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


def _pick_config(runs: pd.DataFrame) -> pd.DataFrame:
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


def _by_depth(runs: pd.DataFrame, depth_col: str = "depth", value: str = "sel_test") -> DepthPoints:
    """Per depth, the configuration with the best validation and its aggregated metric."""
    points = DepthPoints([], [], [], [], [], [])
    depths = sorted(pd.to_numeric(runs[depth_col], errors="coerce").dropna().unique())
    for d in depths:
        here = runs[pd.to_numeric(runs[depth_col], errors="coerce") == d]
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
    """What ``_plot_depth_series`` put on the axes; ``|`` merges two series' (or panels') answers."""

    anything: bool = False      # a point or an all-diverged mark
    hollow: bool = False        # a hollow (partial) marker, which the caption then explains

    def __or__(self, other: SeriesDrawn) -> SeriesDrawn:
        return SeriesDrawn(self.anything or other.anything, self.hollow or other.hollow)


def _plot_depth_series(ax, runs: pd.DataFrame, label: str, colour: str, linestyle: str, marker: str,
                       depth_col: str = "depth", value: str = "sel_test", full: int = 0) -> SeriesDrawn:
    """One variant's selected metric against depth; a point whose sweep has not finished (fewer runs
    than ``full``) gets a hollow marker, so it is not read as final."""
    series = _by_depth(runs, depth_col, value)
    xs, all_div = series.xs, series.all_div
    points = []
    if xs:
        ax.errorbar(xs, series.means, yerr=series.stds, label=label, color=colour, linestyle=linestyle,
                    marker=marker, markersize=4, capsize=2, linewidth=1.2)
        points = [(x, m) for x, m, n in zip(xs, series.means, series.point_runs, strict=True)
                  if is_partial(n, full)]
        if points:
            ax.plot(*zip(*points, strict=True), linestyle="none", marker=marker, markersize=6, color=colour,
                    markerfacecolor="white", markeredgecolor=colour, zorder=3)
    if all_div:
        # Depths where every seed diverged: an x at the bottom of the panel instead of a fake value.
        ax.plot(all_div, [0.03] * len(all_div), linestyle="none", marker="x", color=colour, markersize=6,
                transform=ax.get_xaxis_transform(), label=f"{label}: all seeds diverged")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return SeriesDrawn(bool(xs or all_div), bool(points))


def _partial_caption(hollow: bool, full: int) -> str:
    """A caption line explaining hollow markers, when any was drawn."""
    if not hollow:
        return ""
    return f"\nhollow marker: partial point (sweep not finished: fewer than the {full} runs of the fullest point)"


def _describe(runs: pd.DataFrame) -> str:
    names = sorted({DATASET_NAMES.get(str(d).lower(), str(d)) for d in runs["dataset"].dropna()})
    rates = sorted({float(r) for r in pd.to_numeric(runs["missing_rate"], errors="coerce").dropna()})
    text = ", ".join(names)
    if rates and rates != [0.0]:
        text += " (" + ", ".join(f"{r:g}%" for r in rates) + " missing)"
    return text


# ------------------------------------------------------------------------------------------- figures


def fig2(df: pd.DataFrame) -> Figure:
    """Heat maps (layer × epoch) of the attention-parameter gradient norms, GAT vs GAT-Lip, log colours."""
    title = "Fig. 2 — gradient norm of the attention parameters per layer (log scale)"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return _empty_figure("fig2", title)
    has_grads = runs["history"].map(lambda h: bool(h.get("grad_norms")))
    runs = runs[has_grads]
    panels = []
    for variant in ("GAT", "GAT-Lip"):
        sub = runs[runs["variant"] == variant]
        if sub.empty:
            panels.append((variant, None, ""))
            continue
        deepest = pd.to_numeric(sub["depth"], errors="coerce").max()
        sub = _pick_config(sub[pd.to_numeric(sub["depth"], errors="coerce") == deepest])
        mats = []
        for h in sub["history"]:
            rows = [[math.nan if v is None else float(v) for v in epoch] for epoch in h["grad_norms"]]
            width = max((len(r) for r in rows), default=0)
            mats.append(np.array([r + [math.nan] * (width - len(r)) for r in rows], dtype=float))
        epochs = min(m.shape[0] for m in mats)
        layers = min(m.shape[1] for m in mats)
        with np.errstate(all="ignore"):
            mat = np.nanmean(np.stack([m[:epochs, :layers] for m in mats]), axis=0)
        info = f"{_describe(sub)}, {int(deepest)} layers, mean of {_seed_range(sub)}"
        panels.append((variant, mat, info))
    if all(m is None for _, m, _ in panels):
        return _empty_figure("fig2", title + "\n(records have no history.grad_norms: set log.grad_norms=true)")
    positive = np.concatenate([m[np.isfinite(m) & (m > 0)] for _, m, _ in panels if m is not None])
    vmin, vmax = (positive.min(), positive.max()) if positive.size else (1e-3, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin / 10, vmax * 10
    norm = LogNorm(vmin=vmin, vmax=vmax)
    cmap = matplotlib.colormaps["magma"].with_extremes(bad="0.85")
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    image = None
    for ax, (variant, mat, info) in zip(axes, panels, strict=True):
        ax.set_xlabel("epoch")
        ax.set_title(f"{variant}" + (f" — {info}" if info else ""))
        if mat is None:
            _note(ax, NOT_RUN)
            continue
        shown = np.ma.masked_where(~np.isfinite(mat) | (mat <= 0), mat).T  # layers on the y-axis
        image = ax.imshow(shown, aspect="auto", origin="lower", interpolation="nearest", cmap=cmap,
                          norm=norm, extent=(0.5, mat.shape[0] + 0.5, 0.5, mat.shape[1] + 0.5))
    axes[0].set_ylabel("layer")
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="‖∇ attention parameters‖₂", shrink=0.95)
    fig.suptitle(title)
    return fig


def fig3(df: pd.DataFrame) -> Figure:
    """Train-accuracy curves vs epoch, one line per depth: GAT (left) and GAT-Lip (right)."""
    title = "Fig. 3 — train accuracy during training, without (GAT) and with LipschitzNorm (GAT-Lip)"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return _empty_figure("fig3", title)
    depths = sorted(int(d) for d in pd.to_numeric(runs["depth"], errors="coerce").dropna().unique())
    colour = matplotlib.colormaps["viridis"]
    scale = Normalize(vmin=min(depths), vmax=max(depths) if max(depths) > min(depths) else min(depths) + 1)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, variant in zip(axes, ("GAT", "GAT-Lip"), strict=True):
        sub = runs[runs["variant"] == variant]
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 100)
        if sub.empty:
            ax.set_title(variant)
            _note(ax, NOT_RUN)
            continue
        ax.set_title(f"{variant} — {_describe(sub)}")
        for d in depths:
            at = sub[pd.to_numeric(sub["depth"], errors="coerce") == d]
            if at.empty:
                continue
            chosen = _pick_config(at)
            x, y = _mean_curves(chosen, "train")
            if x.size:
                ax.plot(x, _pct(y), color=colour(scale(d)), linewidth=1.2,
                        label=f"{d} layers ({_seed_range(chosen)})")
        ax.legend(loc="lower right", title="depth")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("train accuracy (%)")
    fig.suptitle(title)
    return fig


def fig4(df: pd.DataFrame) -> Figure:
    """Test accuracy vs depth on PubMed with 100% missing vectors: GAT vs GAT-Lip, mean ± std."""
    title = "Fig. 4 — test accuracy vs depth, PubMed, 100% missing vectors"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return _empty_figure("fig4", title)
    runs = runs[(runs["dataset"].astype(str).str.lower() == "pubmed")
                & (pd.to_numeric(runs["missing_rate"], errors="coerce") == 100)]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    drawn = SeriesDrawn()
    full = full_grid_size(runs, ["variant", "depth"])
    for variant, norm in (("GAT", "none"), ("GAT-Lip", "lip")):
        drawn |= _plot_depth_series(ax, runs[runs["variant"] == variant], variant, NORM_COLOURS[norm],
                                    "-", "o" if norm == "none" else "s", full=full)
    ax.set_xlabel("number of layers")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title + "\n(best config per depth by validation; mean ± std over seeds)"
                 + _partial_caption(drawn.hollow, full))
    if drawn.anything:
        ax.legend()
        ax.grid(alpha=0.3)
    else:
        _note(ax, "no PubMed 100% records in runs/fig4/")
    return fig


def fig5(df: pd.DataFrame) -> Figure:
    """TREES train accuracy vs tree depth, one panel per model; markers: none ○, PairNorm △, Lip □."""
    title = "Fig. 5 — TREES: train accuracy vs tree depth"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return _empty_figure("fig5", title)
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    axes = fig.subplots(1, 4, sharey=True)
    full = full_grid_size(runs, ["variant", "tree_depth"])
    hollow = False
    for ax, model in zip(axes, FIG5_MODELS, strict=True):
        sub = runs[runs["model"].astype(str).str.lower() == model]
        ax.set_title(model.upper())
        ax.set_xlabel("tree depth")
        ax.set_ylim(0, 105)
        drawn = SeriesDrawn()
        for norm, marker in FIG5_MARKERS.items():
            series = sub[sub["norm"].astype(str).str.lower() == norm]
            if series.empty:
                continue
            label = {"none": "None", "pairnorm": "PairNorm", "lip": "LipschitzNorm"}[norm]
            drawn |= _plot_depth_series(ax, series, label, NORM_COLOURS[norm], "-", marker,
                                        depth_col="tree_depth", value="max_train", full=full)
        hollow = hollow or drawn.hollow
        if model == "gat":
            for variant, value in paper.FIG5_TREE_DEPTH10.items():
                norm = "lip" if variant.endswith("Lip") else "pairnorm"
                ax.plot([10], [value], linestyle="none", marker=FIG5_MARKERS[norm], markersize=9,
                        markerfacecolor="none", markeredgecolor="black",
                        label=f"paper {variant} (d=10): {value}")
        if drawn.anything or model == "gat":
            ax.legend(loc="best", fontsize="small")
        if not drawn.anything:
            _note(ax, NOT_RUN)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("train accuracy (%)")
    fig.suptitle(title + " (best train accuracy over epochs, Alon & Yahav's protocol; mean ± std over seeds)"
                 + _partial_caption(hollow, full))
    return fig


def fig6(df: pd.DataFrame) -> Figure:
    """Test metric vs depth per dataset for GAT/GT with no norm, LayerNorm, PairNorm and LipschitzNorm."""
    title = "Fig. 6 — test accuracy vs depth (ogbn-proteins: ROC-AUC)"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return _empty_figure("fig6", title)
    fig = Figure(figsize=(13, 3.9), layout="constrained")
    axes = fig.subplots(1, 4)
    handles: dict[str, object] = {}
    full = full_grid_size(runs, ["dataset", "variant", "depth"])
    hollow = False
    for ax, dataset in zip(axes, FIG6_DATASETS, strict=True):
        sub = runs[runs["dataset"].astype(str).str.lower() == dataset]
        ax.set_title(DATASET_NAMES[dataset])
        ax.set_xlabel("number of layers")
        ax.set_ylabel("test ROC-AUC (%)" if dataset == "ogbn-proteins" else "test accuracy (%)")
        drawn = SeriesDrawn()
        for variant in FIG6_VARIANTS:
            series = sub[sub["variant"] == variant]
            if series.empty:
                continue
            model, _, suffix = variant.partition("-")
            norm = {"": "none", "Ln": "layernorm", "Pn": "pairnorm", "Lip": "lip"}[suffix]
            linestyle, marker = MODEL_STYLE[model.lower()]
            drawn |= _plot_depth_series(ax, series, variant, NORM_COLOURS[norm], linestyle, marker, full=full)
        hollow = hollow or drawn.hollow
        if drawn.anything:
            ax.grid(alpha=0.3)
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)
        else:
            _note(ax, NEEDS_OGB if dataset in OGB_DATASETS else NOT_RUN)
    if handles:
        order = [v for v in FIG6_VARIANTS if v in handles]
        order += sorted(k for k in handles if k not in order)
        fig.legend([handles[k] for k in order], order, loc="outside lower center", ncol=min(len(order), 8))
    fig.suptitle(title + " — best config per depth by validation; mean ± std over seeds"
                 + _partial_caption(hollow, full))
    return fig


FIGURES: dict[str, Callable[[pd.DataFrame], Figure]] = {
    "fig2": fig2, "fig3": fig3, "fig4": fig4, "fig5": fig5, "fig6": fig6,
}


def save_figure(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``stem.<fmt>`` with date/version metadata removed (byte-identical reruns)."""
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


def make_figures(results_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                 names: tuple[str, ...] = tuple(FIGURES)) -> list[Path]:
    """Write ``<out_dir>/figN.{png,pdf}`` (default ``results_dir/figures``) for every figure; return paths."""
    out = Path(out_dir) if out_dir is not None else Path(results_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(RC):
        for name in names:
            fig = FIGURES[name](load_records(results_dir, name, history=name in NEEDS_HISTORY))
            written += save_figure(fig, out / name)
    return written
