"""Extra rows for the LipschitzNorm paper's Fig. 6 (beyond both papers): GT with Kim et al.'s L2 attention
(GT-L2, tied; and untied) on Cora against depth, on Fig. 6's cpu grid; records in runs/fig6_l2/, apart from
the paper's fig6 records, which are shown beside them for GT and GT-Lip on the same grid."""

from __future__ import annotations

import math

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.kim._common import completed, md_text, outputs
from lipgnn.results.plotting import legend

EXPERIMENTS = ("fig6_l2", "fig6")


def _label(cfg: dict) -> str | None:
    model, norm = cfg.get("model", {}), cfg.get("norm", {}).get("name")
    if model.get("name") != "gt" or model.get("residual"):
        return None
    if model.get("score", "dot") == "l2":
        return "GT-L2" if model.get("tie_qk") else "GT-L2 (untied)"
    return {"none": "GT", "lip": "GT-Lip"}.get(norm)


def frame(records: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) at the best-validation epoch per variant and depth: the mean over seeds of the learning
    rate whose mean validation accuracy is best (as every Fig. 6 cell), with the number of seeds. Averaging
    before selecting keeps a variant with more seeds from being shown at its luckiest seed."""
    rows = []
    for _, row in completed(records).iterrows():
        cfg = row["config"] or {}
        label = _label(cfg)
        on_grid = cfg.get("dataset", {}).get("name") == "cora" and (cfg.get("budget") or {}).get("name") == "cpu"
        if label is None or not on_grid or cfg.get("norm", {}).get("variant", "paper") != "paper":
            continue
        rows.append({"variant": label, "depth": int(row["depth"]), "lr": row["lr"], "seed": row["seed"],
                     "val": row["best_val"], "test": row["best_test"], "experiment": row["experiment"]})
    columns = ["variant", "experiment", "depth", "lr", "seeds", "val_acc", "test_acc"]
    if not rows:
        return pd.DataFrame(columns=columns)
    t = pd.DataFrame(rows).groupby(["variant", "experiment", "depth", "lr"], as_index=False).agg(
        seeds=("seed", "nunique"), val=("val", "mean"), test=("test", "mean"))
    t = t.sort_values("val", ascending=False).groupby(["variant", "depth"], as_index=False).first()
    t["val_acc"] = t["val"] * 100
    t["test_acc"] = t["test"] * 100
    order = {"GT": 0, "GT-Lip": 1, "GT-L2": 2, "GT-L2 (untied)": 3}
    t = t.sort_values(["variant", "depth"], key=lambda s: s.map(order) if s.name == "variant" else s)
    return t[columns].reset_index(drop=True)


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
