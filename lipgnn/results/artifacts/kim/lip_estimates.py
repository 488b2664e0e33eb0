"""Beyond the papers: per-layer Lipschitz estimates (lower bounds) against LipschitzNorm's upper bounds for
GAT, GAT-Lip, GT, GT-Lip and GT-L2 on Cora, at initialization and after training, at 2 and 30 layers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.kim._common import budget_of, by_seed, completed, md_text, outputs, payloads, seed_of
from lipgnn.results.plotting import legend
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS, NOT_RUN, Claim

EXPERIMENT = "lip_estimates"
LABELS = {"gat": "GAT", "gat_lip": "GAT-Lip", "gt": "GT", "gt_lip": "GT-Lip", "gt_l2": "GT-L2"}
ORDER = list(LABELS)


def frame(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for d in sorted(payloads(records), key=lambda d: (ORDER.index(d["variant"]) if d["variant"] in ORDER else 99,
                                                      int(d["depth"]), seed_of(d))):
        for stage in ("init", "trained"):
            res = d[stage]
            est = [float(r["estimate"]) for r in res["layers"]]
            bound = [float(r["bound"]) if r["bound"] is not None else math.inf for r in res["layers"]]
            ratios = [b / e for b, e in zip(bound, est, strict=True) if e > 0 and math.isfinite(b)]
            finite_bounds = all(math.isfinite(b) for b in bound)
            acc = d["training"]["last"].get("test") if stage == "trained" else None
            rows.append({
                "variant": LABELS.get(d["variant"], d["variant"]), "depth": int(d["depth"]), "seed": seed_of(d),
                "stage": stage,
                "test_acc": float(acc) * 100 if acc is not None else math.nan,
                "layer_est_median": float(np.median(est)), "layer_est_max": max(est),
                "layer_bound_max": max(bound) if finite_bounds else math.inf,
                "bound_over_est_min": min(ratios) if ratios else math.nan,
                "bound_holds": bool(finite_bounds and all(e <= b for e, b in zip(est, bound, strict=True)))
                if finite_bounds else "no bound",
                "network_est": float(res["network_estimate"]),
                "product_est": float(res["product_estimate"]),
                "product_bound": float(res["product_bound"]) if res["product_bound"] is not None else math.inf,
            })
    cols = ["variant", "depth", "seed", "stage", "test_acc", "layer_est_median", "layer_est_max", "layer_bound_max",
            "bound_over_est_min", "bound_holds", "network_est", "product_est", "product_bound"]
    return pd.DataFrame(rows, columns=cols)


def table(records: pd.DataFrame) -> dict[str, str]:
    return outputs(frame(records))


def figure(records: pd.DataFrame):
    import matplotlib.pyplot as plt

    data = [d for d in payloads(records) if int(d["depth"]) == max(int(x["depth"]) for x in payloads(records))]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, stage in zip(axes, ("init", "trained"), strict=True):
        for d in sorted(data, key=lambda d: ORDER.index(d["variant"]) if d["variant"] in ORDER else 99):
            layers = d[stage]["layers"]
            colour = f"C{(ORDER.index(d['variant']) if d['variant'] in ORDER else 9) % 10}"   # one per variant
            line, = ax.plot([r["layer"] for r in layers], [r["estimate"] for r in layers], marker=".",
                            color=colour, label=LABELS.get(d["variant"], d["variant"]))
            bounds = [r["bound"] for r in layers]
            if all(b is not None and math.isfinite(float(b)) for b in bounds):
                ax.plot([r["layer"] for r in layers], bounds, ls="--", color=line.get_color())
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(f"{stage} (dashed: LipschitzNorm bound)")
    axes[0].set_ylabel(r"estimated $\mathrm{Lip}_2$ of the layer")
    legend(axes[0], fontsize=7)
    fig.suptitle(f"Cora, per-layer Lipschitz estimates (budget {budget_of(records)})", fontsize=9)
    fig.tight_layout()
    return fig


def looseness(records: pd.DataFrame) -> pd.DataFrame:
    """For every model state with a LipschitzNorm bound: how many layers' estimates stay within their
    bounds, the per-layer ratio bound / estimate (min, median, max over layers), the whole network's
    ratio, product of the layer bounds / the network's estimate, and the trained model's test accuracy (%).
    The estimates are lower bounds on the Lipschitz constants, so each ratio is an upper bound on how far
    the bound is from the true constant."""
    rows = []
    for d in sorted(payloads(records), key=lambda d: (ORDER.index(d["variant"]) if d["variant"] in ORDER else 99,
                                                      int(d["depth"]), seed_of(d))):
        for stage in ("init", "trained"):
            res = d[stage]
            pairs = [(float(r["estimate"]), float(r["bound"]) if r["bound"] is not None else math.inf)
                     for r in res["layers"]]
            if not all(math.isfinite(b) for _, b in pairs):
                continue
            ratios = [b / e for e, b in pairs if e > 0]
            network = float(res["network_estimate"])
            acc = d["training"]["last"].get("test") if stage == "trained" else None
            rows.append({
                "variant": LABELS.get(d["variant"], d["variant"]), "depth": int(d["depth"]), "seed": seed_of(d),
                "stage": stage,
                "layers_within_bound": f"{sum(e <= b for e, b in pairs)}/{len(pairs)}",
                "ratio_min": min(ratios) if ratios else math.nan,
                "ratio_median": float(np.median(ratios)) if ratios else math.nan,
                "ratio_max": max(ratios) if ratios else math.nan,
                "network_ratio": float(res["product_bound"]) / network if network > 0 else math.nan,
                "test_acc": float(acc) * 100 if acc is not None else math.nan,
            })
    cols = ["variant", "depth", "stage", "layers_within_bound", "ratio_min", "ratio_median", "ratio_max",
            "network_ratio", "test_acc"]
    return pd.DataFrame(rows, columns=cols)


def answer(records: pd.DataFrame) -> str:
    """Does LipschitzNorm's bound hold in trained networks, and how loose is it: one sentence per depth, from
    :func:`looseness`."""
    t = looseness(records)
    trained = t[t["stage"] == "trained"]
    if trained.empty:
        return "not run\n"
    lines = []
    for depth, sub in trained.groupby("depth", sort=True):
        within = sum(int(x.split("/")[0]) for x in sub["layers_within_bound"])
        total = sum(int(x.split("/")[1]) for x in sub["layers_within_bound"])
        models = ", ".join(sub["variant"])
        held = "holds in every layer" if within == total else f"holds in {within} of {total} layers"
        lines.append(
            f"- **{depth} layers, trained** ({models}): the bound {held} ({within}/{total}); it exceeds the "
            f"estimate by a factor {sub['ratio_min'].min():.3g} to {sub['ratio_max'].max():.3g} per layer (median "
            f"{float(np.median(sub['ratio_median'])):.3g}), and the product of the layer bounds exceeds the whole "
            f"network's estimate by a factor {sub['network_ratio'].min():.3g} to {sub['network_ratio'].max():.3g}; "
            f"test accuracy after training {sub['test_acc'].min():.3g}–{sub['test_acc'].max():.3g} %.\n")
    return "".join(lines)


def _blocks(records: pd.DataFrame) -> dict[str, str]:
    t = frame(records)
    loose = looseness(records)
    return {"lip_estimates-table": md_text(t) if not t.empty else "not run\n",
            "lip_estimates-looseness": md_text(loose) if not loose.empty else "not run\n",
            "lip_estimates-answer": answer(records)}


def claims(records: pd.DataFrame) -> list[Claim]:
    quote = ("The attention layer with score function as defined in Eq. (17) is Lipschitz continuous and "
             "L_F(Att) ≤ e√(m/n) + √8 [Corollary 1; Corollary 2: e^√3 √(m/n) + 2√6 for Eq. (19)]")
    t = frame(records)
    lip = t[t["variant"].isin(["GAT-Lip", "GT-Lip"])]
    if lip.empty:
        return [Claim("lipschitznorm", "§5, Corollaries 1–2", quote, NOT_RUN, "no lip_estimates records", 0,
                      "lip-estimates")]
    holds = bool((lip["bound_holds"] == True).all())  # noqa: E712 (the column mixes bools and text)
    trained = lip[lip["stage"] == "trained"]
    evidence = (f"on Cora every GAT-Lip/GT-Lip layer's estimate stays below its bound ({len(lip)} model states); "
                f"tightest bound/estimate ratio {lip['bound_over_est_min'].min():.3g} (trained: "
                f"{trained['bound_over_est_min'].min():.3g}); budget {budget_of(records)}")
    if not holds:
        evidence = "a layer's estimate exceeds its bound: " + evidence
    return [Claim("lipschitznorm", "§5, Corollaries 1–2 (graphs, trained)", quote, HOLDS if holds else DOES_NOT_HOLD,
                  evidence, len(completed(records)), "lip-estimates")]


def report(records: pd.DataFrame) -> dict[str, str]:
    return _blocks(records)


ARTIFACT = Artifact(
    name="lip_estimates",
    paper="kim",
    title="Per-layer Lipschitz estimates vs LipschitzNorm bounds on Cora (GAT, GAT-Lip, GT, GT-Lip, GT-L2)",
    experiments=(EXPERIMENT,),
    table=table,
    figure=figure,
    report=report,
    claims=by_seed(claims),
)
