"""Extra rows for the LipschitzNorm paper's Fig. 6 (beyond both papers): GT with Kim et al.'s L2 attention
(GT-L2, tied; and untied) on Cora against depth, on Fig. 6's cpu grid; records in runs/fig6_l2/, apart from
the paper's fig6 records, which are shown beside them for GT and GT-Lip on the same grid."""

from __future__ import annotations

import math

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.kim._common import completed, md_text, outputs
from lipgnn.results.plotting import legend
from lipgnn.results.protocol import select_best, with_selected_metrics

EXPERIMENTS = ("fig6_l2", "fig6")


def _label(cfg: dict) -> str | None:
    model, norm = cfg.get("model", {}), cfg.get("norm", {}).get("name")
    if model.get("name") != "gt" or model.get("residual"):
        return None
    if model.get("score", "dot") == "l2":
        return "GT-L2" if model.get("tie_qk") else "GT-L2 (untied)"
    return {"none": "GT", "lip": "GT-Lip"}.get(norm)


def _on_grid(cfg: dict) -> bool:
    return (cfg.get("dataset", {}).get("name") == "cora" and (cfg.get("budget") or {}).get("name") == "cpu"
            and cfg.get("norm", {}).get("variant", "paper") == "paper")


def _runs(records: pd.DataFrame) -> pd.DataFrame:
    """Completed in-grid Cora cpu-budget records of the rows above, with their ``label``."""
    runs = completed(records)
    if runs.empty:
        return runs
    runs = with_selected_metrics(runs)
    labels = pd.Series([_label(c or {}) for c in runs["config"]], index=runs.index)
    keep = labels.notna() & pd.Series([_on_grid(c or {}) for c in runs["config"]], index=runs.index)
    return runs.assign(label=labels)[keep]


def frame(records: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) at the best-validation epoch per variant and depth: the mean over seeds of the learning
    rate whose mean validation accuracy is best (``select_best``, as every Fig. 6 cell), with the number of
    seeds. Averaging before selecting keeps a variant with more seeds from being shown at its luckiest seed."""
    columns = ["variant", "experiment", "depth", "lr", "seeds", "val_acc", "test_acc"]
    runs = _runs(records)
    rows = []
    for (variant, depth), point in (runs.groupby(["label", "depth"], sort=False) if not runs.empty else ()):
        chosen = select_best(point)
        if chosen is None:
            continue
        rows.append({"variant": variant, "experiment": str(chosen.runs["experiment"].iloc[0]), "depth": int(depth),
                     "lr": float(chosen.runs["lr"].iloc[0]), "seeds": int(chosen.runs["seed"].nunique()),
                     "val_acc": 100 * chosen.val_mean, "test_acc": 100 * chosen.mean})
    t = pd.DataFrame(rows, columns=columns)
    order = {"GT": 0, "GT-Lip": 1, "GT-L2": 2, "GT-L2 (untied)": 3}
    t = t.sort_values(["variant", "depth"], key=lambda s: s.map(order) if s.name == "variant" else s)
    return t.reset_index(drop=True)


def table(records: pd.DataFrame) -> dict[str, str]:
    return outputs(frame(records))


def figure(records: pd.DataFrame):
    import matplotlib.pyplot as plt

    t = frame(records)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for variant, sub in t.groupby("variant", sort=False):
        style = "--" if variant in ("GT", "GT-Lip") else "-"
        ax.plot(sub["depth"], sub["test_acc"], style, marker="o", label=variant)
    ax.set_xlabel("layers")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Cora, Fig. 6 cpu grid: GT-L2 extra rows (dashed: the paper's variants)", fontsize=8)
    legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def report(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    if t.empty:
        return {"kim_fig6_l2-table": "not run\n"}
    wide = t.pivot_table(index="variant", columns="depth", values="test_acc", aggfunc="first")
    wide = wide.reindex([v for v in ("GT", "GT-Lip", "GT-L2", "GT-L2 (untied)") if v in wide.index])
    wide.columns = [f"L={c}" for c in wide.columns]
    seeds = t.groupby("variant")["seeds"].agg(lambda s: "-".join(str(v) for v in sorted(set(s))))
    wide = wide.reset_index()
    for col in wide.columns[1:]:
        wide[col] = [v if not (isinstance(v, float) and math.isnan(v)) else math.nan for v in wide[col]]
    wide["seeds"] = [seeds[v] for v in wide["variant"]]
    return {"kim_fig6_l2-table": md_text(wide, "{:.1f}")}


ARTIFACT = Artifact(
    name="kim_fig6_l2",
    paper="kim",
    title="Fig. 6 extra rows: GT-L2 (Kim et al.'s L2 attention in GT) on Cora against depth, cpu grid",
    experiments=EXPERIMENTS,
    table=table,
    figure=figure,
    report=report,
)
