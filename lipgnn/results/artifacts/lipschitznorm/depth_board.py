r"""depth_board (beyond the papers) — does LipschitzNorm help PyG's stock attention layers, GATv2 included?

``model=pyg_stack``: PyG's ``GATConv``, ``GATv2Conv`` and ``TransformerConv`` in the suite's deep block, plain
(``norm=none``) and through :func:`lipgnn.nn.lipschitz_norm` (``norm=lip``: eq. 17, eq. 19, and GATv2's bound
of docs/reference.md), at depths 2, 8, 16, 32 on Cora, 3 seeds. Per cell:

* test accuracy at the epoch of best validation accuracy (the suite's protocol), mean ± sample std over seeds;
* the first depth whose mean accuracy is at least :data:`DROP` points below the same layer's 2-layer mean;
* :func:`lipgnn.diagnostics.diagnose`'s energy ratio at initialisation,
  :math:`\mathcal{E}_1(H^1) / \mathcal{E}_1(H^L)` (Dirichlet energy per entry of the first over the last
  message-passing layer's output; geometric mean over seeds): how far the untrained stack smooths;
* LipschitzNorm against plain at each depth, ranked by the suite's seed-spread rule
  (:mod:`lipgnn.results.artifacts.lipschitznorm._spread`).

Records: ``python train.py -m experiment=depth_board budget=cpu``. The budget (epochs) is read from the records
and printed with the table; cells without records are listed as missing.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm._spread import rank, relation
from lipgnn.results.plotting import legend

CONVS: dict[str, str] = {"gat": "GATConv", "gatv2": "GATv2Conv", "transformer": "TransformerConv"}
NORMS: dict[str, str] = {"none": "plain", "lip": "LipschitzNorm"}
DEPTHS: tuple[int, ...] = (2, 8, 16, 32)
SEEDS: tuple[int, ...] = (0, 1, 2)
#: Accuracy loss (points) against the 2-layer mean that counts as "loses accuracy with depth".
DROP = 5.0


def _diagnose_ratio(diagnostics: Any) -> float:
    table = (diagnostics or {}).get("diagnose") if isinstance(diagnostics, dict) else None
    energies = ((table or {}).get("layers") or {}).get("dirichlet") or []
    if not energies or energies[0] is None or energies[-1] is None:
        return math.nan
    from lipgnn.diagnostics.diagnose import energy_ratio

    return energy_ratio([float(e) for e in energies])


def runs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per record: conv, norm, depth, seed, status, diverged, epochs, budget, test (fraction), ratio."""
    columns = ["conv", "norm", "depth", "seed", "status", "diverged", "epochs", "budget", "test", "ratio"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for _, r in df.iterrows():
        config = r["config"] if isinstance(r["config"], dict) else {}
        conv = str((config.get("model") or {}).get("conv", "gat"))
        out.append({"conv": conv, "norm": str(r["norm"]), "depth": int(r["depth"]), "seed": int(r["seed"]),
                    "status": r["status"], "diverged": r["status"] == "diverged", "epochs": r["epochs"],
                    "budget": r["budget"], "test": r["best_test"], "ratio": _diagnose_ratio(r["diagnostics"])})
    frame = pd.DataFrame(out, columns=columns)
    return frame[frame["status"].isin(("completed", "diverged"))].reset_index(drop=True)


def cells(t: pd.DataFrame) -> pd.DataFrame:
    """Per (conv, norm, depth): n, mean/std test accuracy (points), geometric-mean energy ratio at init."""
    rows = []
    for conv in CONVS:
        for norm in NORMS:
            for depth in DEPTHS:
                sub = t[(t["conv"] == conv) & (t["norm"] == norm) & (t["depth"] == depth)]
                acc = 100.0 * sub["test"].to_numpy(dtype=float)
                ratios = sub["ratio"].to_numpy(dtype=float)
                ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
                rows.append({"conv": conv, "norm": norm, "depth": depth, "n": len(sub),
                             "mean": float(acc.mean()) if len(acc) else math.nan,
                             "std": float(acc.std(ddof=1)) if len(acc) > 1 else math.nan,
                             "ratio": float(np.exp(np.log(ratios).mean())) if len(ratios) else math.nan})
    return pd.DataFrame(rows)


def first_drop(c: pd.DataFrame, conv: str, norm: str) -> str:
    """The first depth whose mean is >= DROP points below the 2-layer mean, or why there is none."""
    own = c[(c["conv"] == conv) & (c["norm"] == norm)].set_index("depth")
    if own.loc[2, "n"] == 0:
        return "no 2-layer runs"
    base = own.loc[2, "mean"]
    unrun = []
    for depth in DEPTHS[1:]:
        if own.loc[depth, "n"] == 0:
            unrun.append(depth)
            continue
        if own.loc[depth, "mean"] <= base - DROP:
            return f"{depth}" + (f" (not run: {', '.join(map(str, unrun))})" if unrun else "")
    return "none up to 32" if not unrun else f"none among the depths run (not run: {', '.join(map(str, unrun))})"


def missing(t: pd.DataFrame) -> list[str]:
    """The runs without a record, grouped by depth and seeds: ``L32 seeds 1, 2: all layers`` or a list of
    ``GATv2Conv plain``-style labels."""
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for depth in DEPTHS:
        for conv, label in CONVS.items():
            for norm, nlabel in NORMS.items():
                have = set(t[(t["conv"] == conv) & (t["norm"] == norm) & (t["depth"] == depth)]["seed"])
                lacking = tuple(s for s in SEEDS if s not in have)
                if lacking:
                    groups.setdefault((depth, lacking), []).append(f"{label} {nlabel}")
    everyone = len(CONVS) * len(NORMS)
    return [f"L{depth} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: "
            + ("all layers" if len(labels) == everyone else ", ".join(labels))
            for (depth, seeds), labels in groups.items()]


def _missing_runs(t: pd.DataFrame) -> int:
    return len(CONVS) * len(NORMS) * len(DEPTHS) * len(SEEDS) - len(t.drop_duplicates(["conv", "norm", "depth",
                                                                                          "seed"]))


def budget_line(t: pd.DataFrame) -> str:
    """The budget as the records state it (epochs and budget name), e.g. ``budget cpu: 100 epochs``."""
    if t.empty:
        return "budget: no records yet"
    parts = []
    for (budget, epochs), sub in t.groupby(["budget", "epochs"], dropna=False):
        parts.append(f"budget {budget}: {int(epochs)} epochs ({len(sub)} runs)")
    return ("; ".join(parts) + "; Adam, test accuracy at the epoch of best validation accuracy "
            "(the papers train 1000+ epochs)")


def _fmt(mean: float, std: float, n: int) -> str:
    if n == 0:
        return "—"
    spread = f" ± {std:.1f}" if math.isfinite(std) else ""
    return f"{mean:.1f}{spread} (n={n})"


def _sci(value: float) -> str:
    if not math.isfinite(value):
        return "—" if math.isnan(value) else "inf"
    return f"{value:.3g}" if 0.01 <= value < 1000 else f"{value:.2e}"


def _md(t: pd.DataFrame) -> list[str]:
    c = cells(t)
    head = "| layer | norm | " + " | ".join(f"L{d} acc" for d in DEPTHS) + " | first −5 pts | " + \
        " | ".join(f"L{d} E ratio" for d in DEPTHS) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(DEPTHS))]
    for conv, label in CONVS.items():
        for norm, nlabel in NORMS.items():
            own = c[(c["conv"] == conv) & (c["norm"] == norm)].set_index("depth")
            accs = " | ".join(_fmt(own.loc[d, "mean"], own.loc[d, "std"], int(own.loc[d, "n"])) for d in DEPTHS)
            ratios = " | ".join(_sci(own.loc[d, "ratio"]) for d in DEPTHS)
            lines.append(f"| {label} | {nlabel} | {accs} | {first_drop(c, conv, norm)} | {ratios} |")
    return lines


def _comparisons(t: pd.DataFrame) -> list[str]:
    lines = []
    for conv, label in CONVS.items():
        parts = []
        for depth in DEPTHS:
            lip = t[(t["conv"] == conv) & (t["norm"] == "lip") & (t["depth"] == depth)]
            plain = t[(t["conv"] == conv) & (t["norm"] == "none") & (t["depth"] == depth)]
            if lip.empty or plain.empty:
                parts.append(f"L{depth}: not run")
                continue
            ranking = rank(lip, plain, "test")
            parts.append(f"L{depth}: {relation(ranking, 'Lip', 'plain')} (Lip − plain, points: {ranking.diff.text()})")
        lines.append(f"- {label}: " + "; ".join(parts))
    return lines


def table(df: pd.DataFrame) -> dict[str, str]:
    t = runs(df)
    c = cells(t)
    buf = io.StringIO()
    c.assign(layer=c["conv"].map(CONVS), norm=c["norm"].map(NORMS)).to_csv(buf, index=False, float_format="%.6g")
    lacking = missing(t)
    md = ["# depth_board — PyG's attention layers with and without LipschitzNorm against depth (Cora)", "",
          budget_line(t) + ".", "",
          "Accuracy: test accuracy (%) at best validation, mean ± sample std over seeds. 'first −5 pts': the first "
          "depth whose mean is at least 5 points below the 2-layer mean. 'E ratio': diagnose()'s Dirichlet energy "
          "of the first over the last message-passing layer at initialisation (geometric mean over seeds).", "",
          *_md(t), "", "LipschitzNorm against plain (seed-spread rule):", *_comparisons(t), "",
          f"Missing runs ({_missing_runs(t)}): " + ("; ".join(lacking) if lacking else "none")]
    tex = ["\\begin{tabular}{ll" + "r" * len(DEPTHS) + "}",
           "layer & norm & " + " & ".join(f"$L={d}$" for d in DEPTHS) + " \\\\"]
    for conv, label in CONVS.items():
        for norm, nlabel in NORMS.items():
            own = c[(c["conv"] == conv) & (c["norm"] == norm)].set_index("depth")
            vals = " & ".join("--" if own.loc[d, "n"] == 0 else f"{own.loc[d, 'mean']:.1f}" for d in DEPTHS)
            tex.append(f"{label} & {nlabel} & {vals} \\\\")
    tex.append("\\end{tabular}")
    return {"csv": buf.getvalue(), "md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}


def figure(df: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    t = runs(df)
    c = cells(t)
    fig, axes = plt.subplots(2, len(CONVS), figsize=(4.2 * len(CONVS), 6.2), squeeze=False, sharex=True)
    for col, (conv, label) in enumerate(CONVS.items()):
        top, bottom = axes[0][col], axes[1][col]
        for norm, nlabel in NORMS.items():
            own = c[(c["conv"] == conv) & (c["norm"] == norm) & (c["n"] > 0)]
            style = "-o" if norm == "lip" else "--s"
            if len(own):
                top.errorbar(own["depth"], own["mean"], yerr=own["std"].fillna(0.0), fmt=style, ms=4, capsize=2,
                             label=nlabel)
                bottom.plot(own["depth"], own["ratio"], style, ms=4, label=nlabel)
        top.set_title(label, fontsize=10)
        top.set_xscale("log", base=2)
        top.set_xticks(DEPTHS, [str(d) for d in DEPTHS])
        bottom.set_yscale("log")
        bottom.set_xlabel("layers")
        legend(top, fontsize=7)
    axes[0][0].set_ylabel("test acc. at best val (%)")
    axes[1][0].set_ylabel("E_1 first / last layer at init")
    fig.suptitle(budget_line(t), fontsize=8)
    fig.tight_layout()
    return fig


def report(df: pd.DataFrame) -> dict[str, str]:
    t = runs(df)
    if t.empty:
        return {"depth_board-table": "not run (python train.py -m experiment=depth_board budget=cpu)"}
    lacking = missing(t)
    body = [f"{budget_line(t)}.", "", *_md(t), "", "LipschitzNorm against plain at each depth (seed-spread rule):",
            *_comparisons(t), "",
            f"Missing runs ({_missing_runs(t)}): " + ("; ".join(lacking) if lacking else "none") + "."]
    return {"depth_board-table": "\n".join(body)}


ARTIFACT = Artifact(
    name="depth_board",
    paper="lipschitznorm",
    title="PyG's GATConv, GATv2Conv, TransformerConv with and without lipschitz_norm against depth (beyond the paper)",
    experiments=("depth_board",),
    table=table,
    figure=figure,
    report=report,
)
