r"""depth_energy (beyond both papers) — do the LipschitzNorm paper's models over-smooth?

Guan & He's Laplacian energy (§2) of the final hidden layer, per entry,

.. math::
    \mathcal{E}_2(X^L)/d = \frac{1}{n d} \sum_i |\Delta_\mu X^L(i)|^2 \mu_i ,

at initialisation and after training (``log.energy=true``), for GAT, GAT-Pn, GAT-Ln, GAT-Lip, GT, GT-Lip
(and SAN-Lip) against depth. Records: ``python train.py -m experiment=depth_energy budget=cpu``. The decay
over depth at init is also given as :math:`\mathcal{E}_2(X^L)/\mathcal{E}_2(X^0)`.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.frames import energy_frame, sci
from lipgnn.results.plotting import legend
from lipgnn.store import variant_label

VARIANTS: tuple[str, ...] = ("GAT", "GAT-Pn", "GAT-Ln", "GAT-Lip", "GT", "GT-Lip", "SAN-Lip")


def rows(df: pd.DataFrame) -> pd.DataFrame:
    frame = energy_frame(df)
    columns = ["variant", "dataset", "depth", "seed", "epochs", "init_final", "trained_final", "trained_over_init",
               "init_decay", "trained_decay", "last_train", "best_test"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for _, r in frame.iterrows():
        init, trained, width = r["init_lap"], r["trained_lap"], r["width"] or 1
        i_last = init[-1] / width if init else math.nan
        t_last = trained[-1] / width if trained else math.nan
        out.append({
            "variant": variant_label(r["model"], r["norm"]), "dataset": r["dataset"], "depth": r["depth"],
            "seed": r["seed"], "epochs": r["epochs"], "init_final": i_last, "trained_final": t_last,
            "trained_over_init": t_last / i_last if i_last else math.nan,
            "init_decay": init[-1] / init[0] if init and init[0] else math.nan,
            "trained_decay": trained[-1] / trained[0] if trained and trained[0] else math.nan,
            "last_train": r["last_train"], "best_test": r["best_test"],
        })
    table = pd.DataFrame(out, columns=columns)
    order = {v: i for i, v in enumerate(VARIANTS)}
    return table.assign(_v=table["variant"].map(order).fillna(99)).sort_values(["dataset", "_v", "depth", "seed"]) \
        .drop(columns=["_v"]).reset_index(drop=True)


def _md(t: pd.DataFrame) -> list[str]:
    lines = ["| variant | dataset | layers | epochs | E_2(X^L)/d at init | after training | trained/init | "
             "E(X^L)/E(X^0) at init | after training | last train acc | test acc at best val |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        acc = "—" if r["last_train"] is None or r["last_train"] != r["last_train"] else f"{100 * r['last_train']:.1f}"
        test = "—" if r["best_test"] is None or r["best_test"] != r["best_test"] else f"{100 * r['best_test']:.1f}"
        lines.append(f"| {r['variant']} | {r['dataset']} | {r['depth']} | {r['epochs']} | {sci(r['init_final'])} | "
                     f"{sci(r['trained_final'])} | {sci(r['trained_over_init'])} | {sci(r['init_decay'])} | "
                     f"{sci(r['trained_decay'])} | {acc} | {test} |")
    return lines


def table(df: pd.DataFrame) -> dict[str, str]:
    t = rows(df)
    buf = io.StringIO()
    t.to_csv(buf, index=False, float_format="%.6g")
    md = ["# depth_energy — Laplacian energy of the LipschitzNorm paper's models at init and after training", "",
          "Beyond both papers. Per-entry E_2(X^L)/d of the final hidden layer; one seed per cell; 'after training' is "
          "the last epoch's model (the epochs column is the budget).", "", *_md(t)]
    tex = ["\\begin{tabular}{llrrll}", "variant & dataset & $L$ & epochs & init & trained \\\\"]
    for _, r in t.iterrows():
        tex.append(f"{r['variant']} & {r['dataset']} & {r['depth']} & {r['epochs']} & {sci(r['init_final'])} & "
                   f"{sci(r['trained_final'])} \\\\")
    tex.append("\\end{tabular}")
    return {"csv": buf.getvalue(), "md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}


def figure(df: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    t = rows(df)
    datasets = sorted(t["dataset"].dropna().unique()) or ["cora"]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 3.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for i, variant in enumerate(VARIANTS):
            sub = t[(t["dataset"] == dataset) & (t["variant"] == variant)].groupby("depth").mean(numeric_only=True)
            if sub.empty:
                continue
            color = colors[i % len(colors)]
            ax.plot(sub.index, sub["init_final"], "--o", ms=3, color=color, lw=0.8)
            ax.plot(sub.index, sub["trained_final"], "-o", ms=3, color=color, label=variant)
        ax.set_yscale("log")
        ax.set_xlabel("layers")
        ax.set_title(f"{dataset}: dashed = init, solid = after training", fontsize=9)
        legend(ax, fontsize=7)
    axes[0][0].set_ylabel("E_2(X^L) / d")
    fig.tight_layout()
    return fig


def report(df: pd.DataFrame) -> dict[str, str]:
    t = rows(df)
    return {"depth_energy-table": "\n".join(_md(t)) if len(t) else "not run"}


ARTIFACT = Artifact(
    name="depth_energy",
    paper="guan_he",
    title="Laplacian energy at init and after training of GAT/GT variants against depth (beyond the papers)",
    experiments=("depth_energy",),
    table=table,
    figure=figure,
    report=report,
)
