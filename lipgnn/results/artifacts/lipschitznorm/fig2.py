"""Fig. 2 (§6): attention-parameter gradient norms per layer and epoch, GAT vs GAT-Lip (20 layers, Cora).

The figure is a pair of heat maps (layer × epoch, log colours); the report block compares the largest
gradient norms and judges "explodes without LipschitzNorm, stable with it" by their ratio.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.labels import NOT_RUN, NOT_RUN_BUDGET, dataset_name
from lipgnn.results.protocol import at as rows_at
from lipgnn.results.protocol import depths as depths_of
from lipgnn.results.protocol import with_selected_metrics
from lipgnn.results.render.text import joined, md_table, pct, sci
from lipgnn.results.reporting import Finding, datasets, floats, runs_line
from lipgnn.results.stats import LEGEND as VERDICT_LEGEND
from lipgnn.results.stats import greater, t_interval, under_budget, with_budget
from lipgnn.results.verdict import CANNOT_JUDGE, Claim

if TYPE_CHECKING:
    import matplotlib.figure

# §6 text: GAT with 20 layers on Cora, 100 epochs; attention-weight gradients reach ~1e8.
PAPER_DEPTH = 20
PAPER_EPOCHS = 100
PAPER_PEAK_GRAD_NORM = 1e8
# Our reading of "explodes without LipschitzNorm, stable with it": the largest GAT gradient norm is at least
# this many times the largest GAT-Lip one.
GRADIENT_RATIO_THRESHOLD = 100.0

SECTION = "§6"
QUOTE = ("Throughout 100 epochs of training, the gradients of the attention weights in each GAT layer exhibit a "
         "steep increase, reaching extremely large value of the order of 10^8. However, Fig. 2 (right picture) "
         "shows that LipschitzNorm is able to prevent gradient explosion")


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """Heat maps (layer × epoch) of the attention-parameter gradient norms, GAT vs GAT-Lip, log colours."""
    # matplotlib is imported only when a figure is drawn: the registry loads every artifact module.
    import matplotlib
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from lipgnn.results import plotting as P

    title = "Fig. 2 — gradient norm of the attention parameters per layer (log scale)"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return P.empty_figure("fig2", title)
    has_grads = runs["history"].map(lambda h: bool(h.get("grad_norms")))
    runs = runs[has_grads]
    panels = []
    for variant in ("GAT", "GAT-Lip"):
        sub = runs[runs["variant"] == variant]
        if sub.empty:
            panels.append((variant, None, ""))
            continue
        deepest = sub["depth"].max()
        sub = P.pick_config(sub[sub["depth"] == deepest])
        mats = []
        for h in sub["history"]:
            rows = [[math.nan if v is None else float(v) for v in epoch] for epoch in h["grad_norms"]]
            width = max((len(r) for r in rows), default=0)
            mats.append(np.array([r + [math.nan] * (width - len(r)) for r in rows], dtype=float))
        epochs = min(m.shape[0] for m in mats)
        layers = min(m.shape[1] for m in mats)
        with np.errstate(all="ignore"):
            mat = np.nanmean(np.stack([m[:epochs, :layers] for m in mats]), axis=0)
        info = f"{P.describe(sub)}, {int(deepest)} layers, mean of {P.seed_range(sub)}"
        panels.append((variant, mat, info))
    if all(m is None for _, m, _ in panels):
        return P.empty_figure("fig2", title + "\n(records have no history.grad_norms: set log.grad_norms=true)")
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
            P.note(ax, NOT_RUN)
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


def _grad_matrix(history: Any) -> np.ndarray:
    """history.grad_norms as an [epochs, layers] float array (nulls -> NaN, ragged rows padded)."""
    rows = (history or {}).get("grad_norms") if isinstance(history, dict) else None
    rows = [floats(r if isinstance(r, list) else [r]) for r in rows or []]
    width = max((len(r) for r in rows), default=0)
    mat = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        mat[i, : len(r)] = r
    return mat


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
        "epochs": joined(pd.Series([m.shape[0] for m in mats], dtype=object)),
        "layers": joined(pd.Series([m.shape[1] for m in mats], dtype=object)),
    }


def _block(df: pd.DataFrame) -> tuple[str, list[Finding]]:
    """Fig. 2: attention-gradient norms of GAT vs GAT-Lip and the explosion ratio."""
    lines = [f"Paper (§6, Fig. 2): a {PAPER_DEPTH}-layer GAT on Cora, {PAPER_EPOCHS} epochs: the "
             f"attention-weight gradients reach ~{PAPER_PEAK_GRAD_NORM:.0e} without LipschitzNorm and "
             "stay stable with it.", "", runs_line(df, "fig2"), ""]
    runs = with_selected_metrics(df)
    has_grads = runs["history"].map(lambda h: isinstance(h, dict) and bool(h.get("grad_norms")))
    header = ["variant", "runs (div.)", "dataset", "layers", "epochs", "max ‖∇‖", "median ‖∇‖",
              "epoch 1 (mean over layers)", "last epoch (mean over layers)", "final train acc (%)"]
    rows, maxima, notes, n_runs, per_seed = [], {}, [], 0, {}
    runs_at_deepest: pd.DataFrame | None = None
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
        deepest = max(depths_of(sub)) if depths_of(sub) else None
        if deepest is not None:
            sub = rows_at(sub, "depth", deepest)
        runs_at_deepest = pd.concat([runs_at_deepest, sub]) if runs_at_deepest is not None else sub
        st = _gradient_stats(sub)
        maxima[variant] = st["max"]
        per_seed[variant] = {seed: float(np.nanmax(m)) if np.isfinite(m).any() else math.nan
                             for seed, m in zip(sub["seed"], map(_grad_matrix, sub["history"]), strict=True)}
        n_runs += len(sub)
        final = sub["last_train"].dropna()
        rows.append([variant, f"{len(sub)} ({int(sub['diverged'].sum())})",
                     ", ".join(dataset_name(d) for d in datasets(sub)), st["layers"], st["epochs"],
                     sci(st["max"]), sci(st["median"]), sci(st["first"]), sci(st["last"]),
                     pct(float(final.mean())) if not final.empty else "-"])
        if st["nonfinite"]:
            notes.append(f"- {variant}: {st['nonfinite']} non-finite gradient norms (stored as null) are left "
                         "out, so its max is a lower bound.")
    lines += md_table(header, rows)
    lines += ["", "Statistics pool every layer × epoch of every seed at the deepest depth run; final train "
              "accuracy is the last epoch's, mean over seeds.", *notes, ""]
    if "GAT" in maxima and "GAT-Lip" in maxima:
        gat, lip = maxima["GAT"], maxima["GAT-Lip"]
        ratio = gat / lip if lip > 0 else math.inf
        # Per seed, log10 of max(GAT) / max(GAT-Lip); the claim needs it above log10(threshold).
        seeds = sorted(set(per_seed["GAT"]) & set(per_seed["GAT-Lip"]))
        logs = t_interval([math.log10(per_seed["GAT"][k] / per_seed["GAT-Lip"][k]) for k in seeds
                           if per_seed["GAT-Lip"][k] > 0 and per_seed["GAT"][k] > 0])
        runs = runs_at_deepest
        outcome = with_budget(greater(logs, math.log10(GRADIENT_RATIO_THRESHOLD)), under_budget(runs))
        finding = Finding("", outcome, f"log10 of the per-seed ratio {logs.text(scale=1.0, digits=2)}; the claim "
                                       f"needs it above log10({GRADIENT_RATIO_THRESHOLD:g}) = "
                                       f"{math.log10(GRADIENT_RATIO_THRESHOLD):g} (our criterion for 'explodes "
                                       "without LipschitzNorm, stable with it').", n_runs)
        lines += [f"Ratio max(GAT) / max(GAT-Lip) = {sci(gat)} / {sci(lip)} = {ratio:.3g}.", "", finding.line(), "",
                  VERDICT_LEGEND]
    else:
        missing = [v for v in ("GAT", "GAT-Lip") if v not in maxima]
        finding = Finding("", CANNOT_JUDGE, f"no gradient norms for {' and '.join(missing)} ({NOT_RUN_BUDGET}).",
                          n_runs)
        lines.append(finding.line())
    return "\n".join(lines), [finding]


def report(df: pd.DataFrame) -> dict[str, str]:
    return {"claim-gradients": _block(df)[0]}


def claims(df: pd.DataFrame) -> list[Claim]:
    return [Claim("lipschitznorm", SECTION, QUOTE, f.verdict, f.reason, f.n_runs, "#claim-gradients",
                  p_value=f.p_value, n_seeds=f.n_seeds, dirty=f.dirty, scale=f.scale, runs=f.runs)
            for f in _block(df)[1]]


ARTIFACT = Artifact(name="fig2", paper="lipschitznorm", title="Fig. 2: attention gradient norms, GAT vs GAT-Lip",
                    experiments=("fig2",), needs_history=True, figure=figure, report=report, claims=claims)
