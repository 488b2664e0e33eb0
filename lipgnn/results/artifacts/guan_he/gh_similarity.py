r"""gh_similarity — Guan & He Fig. 2: inter-layer cosine similarity after training, nonlocal Post-LN vs Pre-LN.

.. math::
    \mathrm{sim}(X^s, X^t) = \frac{1}{n} \sum_{i} \frac{X^s(i) \cdot X^t(i)}{|X^s(i)|\,|X^t(i)|} \qquad \text{(eq. 1)}

over the encoder output :math:`X^0` and the block outputs :math:`X^1, \dots, X^L` of the trained model
(final weights, eval mode, Cora), from the ``similarity`` diagnostics of the gh_depth records.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.guan_he._common import (
    ARCH_LABELS,
    EXPERIMENT,
    PAPER,
    budget_line,
    compared_depth,
    completed_san,
    longest_trained,
    of_budget,
    table_files,
    with_shorter_budgets,
)
from lipgnn.results.stats import MIN_SEEDS, greater, t_interval
from lipgnn.results.verdict import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS, NOT_RUN, TIE, Claim

SHOWN = ("nonlocal", "pre", "post")
MIN_DEPTH = 32  # the claims are about deep models
COLUMNS = ["architecture", "dataset", "depth", "seed", "mean_all", "mean_adjacent_deep_half", "mean_to_last_deep_half",
           "min"]


def _with_similarity(frame: pd.DataFrame) -> pd.DataFrame:
    """The completed Cora records with a similarity matrix, of every budget."""
    runs = completed_san(frame)
    return runs[(runs["dataset"] == "cora") & runs["diagnostics"].map(lambda d: "similarity" in d)]


def deepest(frame: pd.DataFrame) -> pd.DataFrame:
    """The Cora records with a similarity matrix, of the longest training budget with deep nonlocal Post-LN and
    Pre-LN models, at the deepest depth run for both (per architecture its deepest, while no depth has both)."""
    runs = _with_similarity(frame)
    if runs.empty:
        return runs
    runs = longest_trained(runs, ("nonlocal", "pre"), MIN_DEPTH)
    depth = compared_depth(runs)
    if depth is not None:  # nonlocal and Pre-LN at the deepest depth both have
        return runs[runs["depth"] == depth]
    keep = [g[g["depth"] == g["depth"].max()] for _, g in runs.groupby("arch")]
    return pd.concat(keep)


def _stats(matrix: np.ndarray) -> dict[str, float]:
    layers = matrix.shape[0]
    half = layers // 2
    adjacent = [matrix[k, k + 1] for k in range(half, layers - 1)]
    to_last = [matrix[k, layers - 1] for k in range(half, layers - 1)]
    off = matrix[~np.eye(layers, dtype=bool)]
    return {"mean_all": float(off.mean()), "mean_adjacent_deep_half": float(np.mean(adjacent)) if adjacent else np.nan,
            "mean_to_last_deep_half": float(np.mean(to_last)) if to_last else np.nan, "min": float(off.min())}


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r in deepest(frame).itertuples():
        stats = _stats(np.asarray(r.diagnostics["similarity"], dtype=float))
        rows.append({"architecture": r.arch, "dataset": r.dataset, "depth": int(r.depth), "seed": int(r.seed),
                     **{k: round(v, 4) for k, v in stats.items()}})
    order = {a: i for i, a in enumerate(SHOWN)}
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["seed", "architecture"], key=lambda c: c.map(order) if c.name == "architecture" else c,
                             kind="stable").reset_index(drop=True)


def _markdown(t: pd.DataFrame) -> str:
    lines = ["| architecture | depth | seed | mean sim (all pairs) | mean sim(X^k, X^k+1), deep half "
             "| mean sim(X^k, X^L), deep half | min |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in t.itertuples():
        lines.append(f"| {ARCH_LABELS[r.architecture]} | {r.depth} | {r.seed} | {r.mean_all:.3f} | "
                     f"{r.mean_adjacent_deep_half:.3f} | {r.mean_to_last_deep_half:.3f} | {r.min:.3f} |")
    return "\n".join(lines) + "\n"


def table(frame: pd.DataFrame) -> dict[str, str]:
    t = summary(frame)
    return table_files(t, _markdown(t), "%.3f")


def figure(frame: pd.DataFrame):  # -> matplotlib.figure.Figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = deepest(frame)
    archs = [a for a in SHOWN if a in set(runs["arch"])] if not runs.empty else []
    fig, axes = plt.subplots(1, max(len(archs), 1), figsize=(4.2 * max(len(archs), 1), 3.8), squeeze=False)
    for ax, arch in zip(axes[0], archs, strict=False):
        r = runs[runs["arch"] == arch].sort_values("seed").iloc[0]
        image = ax.imshow(np.asarray(r["diagnostics"]["similarity"]), vmin=-1, vmax=1, cmap="viridis",
                          origin="lower")
        ax.set_title(f"{ARCH_LABELS[arch]}, {int(r['depth'])} layers, seed {int(r['seed'])}")
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, shrink=0.8)
    if not archs:
        axes[0][0].text(0.5, 0.5, "not run", ha="center")
    fig.suptitle("Inter-layer cosine similarity after training (Cora, eq. 1)")
    fig.tight_layout()
    return fig


def report(frame: pd.DataFrame) -> dict[str, str]:
    return {"gh_similarity-table": budget_line(deepest(frame)) + " Final weights, eval mode. "
            "The paper shows Fig. 2 as heat maps only (no numbers).\n\n" + _markdown(summary(frame))}


def claims(frame: pd.DataFrame) -> list[Claim]:
    """The claim judged on the longest budget (:func:`deepest`); its evidence also gives the verdict of every
    shorter budget with deep models of both from three seeds."""
    claim = _claim(frame)
    if claim.n_runs:
        evidence = with_shorter_budgets(claim.evidence, _with_similarity(frame), ("nonlocal", "pre"), MIN_DEPTH,
                                        lambda epochs: _claim(of_budget(frame, epochs)))
        claim = replace(claim, evidence=evidence)
    return [claim]


def _claim(frame: pd.DataFrame) -> Claim:
    """Pre-LN's layers more alike than nonlocal Post-LN's, on two measures (all pairs; adjacent layers in the deep
    half). With three or more seeds trained for both, each is the paired per-seed difference Pre-LN − nonlocal with
    the suite's t-interval rule, and the claim holds when both hold; with fewer, as in the paper's one trained model
    each, the seed means are compared directly."""
    t = summary(frame)
    quote = ("In the non-local SAN with Post-LN, representations from distant layers display low similarity, "
             "indicating continuous feature transformation. In contrast, deeper layers in the Pre-LN SAN exhibit "
             "increasingly high similarity")
    if t.empty or not {"nonlocal", "pre"} <= set(t["architecture"]):
        return Claim(PAPER, "§5", quote, NOT_RUN, "needs trained nonlocal Post-LN and Pre-LN SANs", 0,
                      "gh_similarity")
    nl = t[t["architecture"] == "nonlocal"].set_index("seed")
    pre = t[t["architecture"] == "pre"].set_index("seed")
    depths = (int(nl["depth"].iloc[0]), int(pre["depth"].iloc[0]))
    models = len(nl) + len(pre)
    if min(depths) < MIN_DEPTH:
        return Claim(PAPER, "§5", quote, CANNOT_JUDGE, f"only {min(depths)}-layer models trained so far; the claim "
                      f"is about deep ones (>= {MIN_DEPTH} layers)", models, "gh_similarity")
    measures = (("mean_all", "mean similarity all pairs"), ("mean_adjacent_deep_half", "adjacent deep-half layers"))
    seeds = sorted(set(nl.index) & set(pre.index))
    where = f"{depths[0]}/{depths[1]} layers, Cora"
    if len(seeds) >= MIN_SEEDS:
        diffs = {m: t_interval([pre.loc[s, m] - nl.loc[s, m] for s in seeds]) for m, _ in measures}
        verdicts = [greater(d) for d in diffs.values()]
        verdict = HOLDS if all(v == HOLDS for v in verdicts) else DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else TIE
        evidence = "; ".join(f"{label} Pre-LN − nonlocal {diffs[m].text(scale=1.0, digits=3)} seeds"
                             for m, label in measures) + f" ({where}; paired by seed)"
        return Claim(PAPER, "§5", quote, verdict, evidence, models, "gh_similarity")
    a, b = nl.mean(numeric_only=True), pre.mean(numeric_only=True)
    holds = all(b[m] > a[m] for m, _ in measures)
    models_each = "one trained model each as in the paper" if models == 2 else \
        f"means over {len(nl)}/{len(pre)} seeds, fewer than the {MIN_SEEDS} paired seeds an interval needs"
    evidence = (f"mean similarity all pairs {a['mean_all']:.3f} (nonlocal) vs {b['mean_all']:.3f} (Pre-LN); "
                f"adjacent deep-half layers {a['mean_adjacent_deep_half']:.3f} vs {b['mean_adjacent_deep_half']:.3f}"
                f" ({where}, {models_each})")
    return Claim(PAPER, "§5", quote, HOLDS if holds else DOES_NOT_HOLD, evidence, models, "gh_similarity")


ARTIFACT = Artifact(
    name="gh_similarity",
    paper=PAPER,
    title="Inter-layer cosine similarity after training, nonlocal Post-LN vs Pre-LN SAN (Guan & He Fig. 2)",
    experiments=(EXPERIMENT,),
    table=table,
    figure=figure,
    report=report,
    claims=claims,
)
