r"""Extra rows for the LipschitzNorm paper's Fig. 6 (beyond both papers): GAT and GT, with and without
LipschitzNorm, with Guan & He's nonlocal message passing (§4.1), on Cora against depth, Fig. 6's cpu protocol;
and GAT and GT in Guan & He's Post-LN block :math:`\mathrm{LN}(X + f(X))`, with and without the factor (the factor is
cubic in the feature scale, which the Post-LN LayerNorm fixes in the SAN).

.. math::
    \mathrm{NonlocalMP}(X) = \big\Vert_{h} \tfrac{1}{n}\|P_h X - X\|^2\, P_h X V_h \quad (+\ \text{root term})

Records: ``python train.py -m experiment=fig6_nonlocal budget=cpu`` writes ``runs/fig6_nonlocal/``, apart from
the paper's fig6 records; the paper's GAT, GAT-Lip, GT and GT-Lip on the same grid (``runs/fig6/``) are shown
beside them as reference rows. No paper has these cells, so there is no claim and no paper value.
Selection follows the suite's protocol (:mod:`lipgnn.results.protocol`): per (variant, depth) the lr with the
best validation accuracy; its test accuracy at the best-validation epoch. A point whose runs all diverged is
shown as such, not left out.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.guan_he._common import PAPER, table_files
from lipgnn.results.grid import declared_sweeps
from lipgnn.results.plotting import legend
from lipgnn.results.protocol import partial_text, select_best, with_selected_metrics
from lipgnn.results.render.text import fmt_value, joined, md_table
from lipgnn.store.records import label_extras

NAME = "gh_fig6_nonlocal"
EXPERIMENT = "fig6_nonlocal"
REFERENCE_EXPERIMENT = "fig6"
EXPERIMENTS = (EXPERIMENT, REFERENCE_EXPERIMENT)
DATASET = "cora"
BUDGET = "cpu"
REFERENCE = ("GAT", "GAT-Lip", "GT", "GT-Lip")
NONLOCAL = tuple(f"nonlocal {v}" for v in REFERENCE)
# In Guan & He's Post-LN block LN(x + f(x)), with and without the factor (rows of conf/grid/fig6_nonlocal_cpu.yaml).
POSTLN = ("Post-LN GAT", "Post-LN GT")
NONLOCAL_POSTLN = tuple(f"nonlocal {v}" for v in POSTLN)
ROWS = NONLOCAL + NONLOCAL_POSTLN + POSTLN + REFERENCE   # the table's row order
ORDER = {v: i for i, v in enumerate(REFERENCE + NONLOCAL + POSTLN + NONLOCAL_POSTLN)}
BEYOND = "beyond the papers"
REFERENCE_GROUP = "reference (LipschitzNorm paper's Fig. 6 grid)"
COLUMNS = ["group", "variant", "experiment", "depth", "lr", "val_acc", "test_acc", "runs", "declared", "diverged"]


def label(cfg: dict[str, Any]) -> str | None:
    """The row of a record: ``GAT``, ``GT-Lip``, ``nonlocal GAT``, ``nonlocal Post-LN GT`` ...; None for any
    other configuration (residual, Pre-LN, LayerNorm/PairNorm, L2 scores, a LipschitzNorm setting other than the
    paper's, or a nonlocal option other than the paper's formula)."""
    model, norm = cfg.get("model") or {}, cfg.get("norm") or {}
    name = model.get("name")
    layer_norm = model.get("layer_norm", "none")
    if name not in ("gat", "gt") or model.get("residual") or layer_norm not in ("none", "post"):
        return None
    if model.get("score", "dot") != "dot" or model.get("tie_qk", False):
        return None
    if norm.get("name") not in ("none", "lip") or label_extras(cfg):
        return None
    base = {"gat": "GAT", "gt": "GT"}[name] + ("-Lip" if norm["name"] == "lip" else "")
    if layer_norm == "post":
        base = f"Post-LN {base}"
    if not model.get("nonlocal", False):
        return base
    if model.get("nonlocal_source", "x") != "x" or not model.get("nonlocal_grad", True):
        return None
    return f"nonlocal {base}"


def _point_config(point: dict[str, Any]) -> dict[str, Any]:
    """The nested config (``{"model": {...}, "norm": {...}}``) a declared grid point's dotted keys fix."""
    cfg: dict[str, Any] = {}
    for key, value in point.items():
        head, _, rest = key.partition(".")
        if rest:
            cfg.setdefault(head, {})[rest] = value
        else:
            cfg[head] = value
    return cfg


def _declared(records: pd.DataFrame, variant: str, depth: int) -> int | None:
    """Runs the declared cpu grid(s) put in the row ``variant`` at ``depth`` on Cora: grid points are labelled
    with :func:`label` itself, because the suite's variant label does not tell nonlocal or Post-LN rows apart."""
    experiment = REFERENCE_EXPERIMENT if variant in REFERENCE else EXPERIMENT
    sweeps = declared_sweeps(records, experiment, budgets=(BUDGET,))
    if not sweeps:
        return None
    return sum(1 for s in sweeps for p in s.points if p.get("dataset.name", DATASET) == DATASET
               and int(p.get("depth", -1)) == depth and label(_point_config(p)) == variant)


def _runs(records: pd.DataFrame) -> pd.DataFrame:
    """Non-failed in-grid Cora cpu-budget records of the rows above, with ``label`` (reference rows from
    ``fig6`` only, every other row from ``fig6_nonlocal`` only)."""
    if records.empty:
        return records.assign(label=pd.Series(dtype=str))
    runs = with_selected_metrics(records)
    labels = [label(c or {}) for c in runs["config"]]
    runs = runs.assign(label=labels)
    on_grid = [(c or {}).get("dataset", {}).get("name") == DATASET and (c.get("budget") or {}).get("name") == BUDGET
               for c in runs["config"]]
    expected = [REFERENCE_EXPERIMENT if lb in REFERENCE else EXPERIMENT for lb in runs["label"]]
    keep = runs["label"].notna() & pd.Series(on_grid, index=runs.index) & (runs["experiment"] == expected)
    return runs[keep]


def frame(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, depth): the lr chosen by validation, val/test accuracy (%) at the best-validation
    epoch, the runs compared, the runs its declared grid asks for, and how many diverged (all of them: lr and
    accuracies NaN)."""
    runs = _runs(records)
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for (variant, depth), point in runs.groupby(["label", "depth"], sort=False):
        chosen = select_best(point)
        experiment = str(point["experiment"].iloc[0])
        declared = _declared(point, str(variant), int(depth))
        lr = math.nan if chosen is None else float(chosen.runs["lr"].iloc[0])
        rows.append({"group": REFERENCE_GROUP if variant in REFERENCE else BEYOND, "variant": variant,
                     "experiment": experiment, "depth": int(depth), "lr": lr,
                     "val_acc": math.nan if chosen is None else 100 * chosen.val_mean,
                     "test_acc": math.nan if chosen is None else 100 * chosen.mean,
                     "runs": len(point), "declared": len(point) if declared is None else declared,
                     "diverged": int(point["diverged"].sum())})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out = out.assign(_v=out["variant"].map(ORDER)).sort_values(["_v", "depth"]).drop(columns="_v")
    return out.reset_index(drop=True)


def _cell(row: pd.Series | None) -> str:
    """A test accuracy (%), ``diverged (k/k)`` when every run of the point diverged, ``–`` when not run; a
    point with fewer runs than its declared grid asks for is marked partial."""
    if row is None:
        return "–"
    partial = partial_text(int(row["runs"]), int(row["declared"]))
    if not math.isfinite(row["test_acc"]):
        return f"diverged ({row['diverged']}/{row['runs']}){partial}"
    mark = f" [{row['diverged']}/{row['runs']} diverged]" if row["diverged"] else ""
    return f"{row['test_acc']:.1f}{mark}{partial}"


def _wide(t: pd.DataFrame) -> list[str]:
    """Markdown lines: one row per variant (nonlocal rows first), one column per depth run."""
    depths = sorted(int(d) for d in t["depth"].unique())
    rows = []
    for variant in ROWS:
        sub = t[t["variant"] == variant]
        if sub.empty:
            continue
        group = "reference" if variant in REFERENCE else "beyond the papers"
        cells = [_cell(sub[sub["depth"] == d].iloc[0] if (sub["depth"] == d).any() else None) for d in depths]
        rows.append([variant, group, *cells])
    return md_table(["variant", "rows", *[f"L={d}" for d in depths]], rows)


def _protocol(records: pd.DataFrame) -> str:
    """One sentence of the budget the rows ran under, from the records."""
    runs = _runs(records)
    if runs.empty:
        return ""
    parts = []
    for experiment in EXPERIMENTS:
        sub = runs[runs["experiment"] == experiment]
        if sub.empty:
            continue
        cfgs = list(sub["config"])
        epochs = joined(pd.Series([c["train"]["epochs"] for c in cfgs]))
        impl = joined(pd.Series([c["model"].get("impl", "pyg") for c in cfgs]))
        parts.append(f"`runs/{experiment}/`: {len(sub)} runs, lr {joined(sub['lr'])}, {epochs} epochs, "
                     f"seeds {joined(sub['seed'])}, hidden {joined(sub['hidden'])}, heads {joined(sub['heads'])}, "
                     f"model.impl={impl}")
    return "; ".join(parts) + "."


def table(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    md = [f"# {NAME} — Fig. 6 extra rows ({BEYOND}): nonlocal GAT / GT on Cora, cpu budget", "",
          "Test accuracy (%) at the best-validation epoch; per (variant, depth) the lr with the best validation "
          "accuracy. Reference rows: the LipschitzNorm paper's variants on the same grid (runs/fig6/).", ""]
    if t.empty:
        md.append("not run")
    else:
        body = [[str(r.group), str(r.variant), str(r.experiment), str(r.depth),
                 fmt_value(r.lr) if math.isfinite(r.lr) else "–",
                 f"{r.val_acc:.1f}" if math.isfinite(r.val_acc) else "–",
                 f"{r.test_acc:.1f}" if math.isfinite(r.test_acc) else "–", str(r.runs), str(r.declared),
                 str(r.diverged)]
                for r in t.itertuples(index=False)]
        md += md_table(COLUMNS, body)
    return table_files(t, "\n".join(md) + "\n", "%.1f")


def figure(records: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    t = frame(records)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    colors = {"GAT": "C0", "GAT-Lip": "C1", "GT": "C2", "GT-Lip": "C3"}
    for variant, sub in t.groupby("variant", sort=False):
        nonlocal_row = variant.startswith("nonlocal ")
        postln = "Post-LN " in variant
        base = variant.removeprefix("nonlocal ").removeprefix("Post-LN ")
        style = {(True, False): "-", (False, False): "--", (True, True): "-.", (False, True): ":"}[
            (nonlocal_row, postln)]
        ok = sub[sub["test_acc"].map(math.isfinite)]
        ax.plot(ok["depth"], ok["test_acc"], style, marker="o" if nonlocal_row else ".",
                color=colors[base], label=variant, alpha=0.6 if variant in REFERENCE else 1.0)
        gone = sub[~sub["test_acc"].map(math.isfinite)]
        if len(gone):
            ax.plot(gone["depth"], [0.0] * len(gone), "x", color=colors[base], ms=8)
    ax.set_xlabel("layers")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(bottom=-3)
    ax.set_title(f"Cora, Fig. 6 cpu grid — nonlocal rows ({BEYOND})\n"
                 "dashed: the paper's variants; dotted: Post-LN; x at 0: every run of the point diverged",
                 fontsize=7)
    legend(ax, fontsize=6, ncol=2)
    fig.tight_layout()
    return fig


def report(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    if t.empty:
        return {f"{NAME}-table": "not run\n"}
    lines = [f"Test accuracy (%) on Cora at the best-validation epoch, the lr chosen by validation per point "
             f"({BEYOND}: no paper has the nonlocal rows; the reference rows are the LipschitzNorm paper's "
             "variants on the same grid). " + _protocol(records), "", *_wide(t)]
    return {f"{NAME}-table": "\n".join(lines) + "\n"}


ARTIFACT = Artifact(
    name=NAME,
    paper=PAPER,
    title="Fig. 6 extra rows (beyond the papers): nonlocal GAT and GT on Cora against depth, cpu grid",
    experiments=EXPERIMENTS,
    table=table,
    figure=figure,
    report=report,
)
