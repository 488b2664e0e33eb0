"""gh_pruning — Guan & He Table 8: single-layer pruning of a trained deep SAN, nonlocal Post-LN vs Pre-LN.

Block k is skipped at evaluation (its input passes straight to block k+1) and the trained model is re-scored
on the test split, from the ``pruning`` diagnostics of the gh_depth records (final weights, eval mode). The
paper prunes layers {2, 32, ..., 224} of 256-layer models; a shallower model is pruned at the same relative
positions (layer round(p · L / 256)).
"""

from __future__ import annotations

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.guan_he._common import (
    ARCH_LABELS,
    EXPERIMENT,
    PAPER,
    budget_line,
    common_depths,
    compared_depth,
    completed_san,
    longest_trained,
    of_budget,
    table_files,
    with_shorter_budgets,
)
from lipgnn.results.verdict import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS, HOLDS_IN_PART, NOT_RUN, Claim

PAPER_LAYERS = (2, 32, 64, 96, 128, 160, 192, 224)
MIN_DEPTH = 32  # the claim is about deep models
# Table 8 (Cora, 256 layers): test accuracy (%) with the layer pruned; baselines from Tables 12 and 18.
PAPER_PRUNED = {
    "nonlocal": (87.66, 87.11, 86.74, 86.92, 87.29, 87.11, 86.92, 87.66),
    "pre": (81.58, 86.56, 87.29, 87.29, 87.29, 87.29, 87.29, 87.29),
}
PAPER_BASELINE = {"nonlocal": 87.85, "pre": 87.29}
COLUMNS = ["architecture", "depth", "seed", "layer", "paper_layer", "ours_baseline", "ours_test", "ours_change",
           "paper_baseline", "paper_test", "paper_change"]


def positions(depth: int) -> list[tuple[int, int]]:
    """(our layer, the paper's layer) pairs: the paper's layers scaled to ``depth`` (duplicates dropped)."""
    seen: dict[int, int] = {}
    for p in PAPER_LAYERS:
        layer = min(depth, max(1, round(p * depth / 256)))
        seen.setdefault(layer, p)
    return sorted(seen.items())


def _with_pruning(frame: pd.DataFrame) -> pd.DataFrame:
    """The completed Cora records of both architectures with pruning diagnostics, of every budget."""
    runs = completed_san(frame)
    return runs[(runs["dataset"] == "cora") & runs["diagnostics"].map(lambda d: "pruning" in d)
                & runs["arch"].isin(list(PAPER_PRUNED))]


def pruned_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The Cora records with pruning diagnostics of the longest training budget with deep models of both
    architectures (the paper trains 5000 epochs)."""
    runs = _with_pruning(frame)
    return longest_trained(runs, tuple(PAPER_PRUNED), MIN_DEPTH) if not runs.empty else runs


def summary(frame: pd.DataFrame, depth: int | None = None) -> pd.DataFrame:
    """One row per (architecture, seed, pruned layer) at ``depth`` (default: the deepest depth both architectures
    ran, the one the table shows)."""
    runs = pruned_runs(frame)
    rows = []
    depth = compared_depth(runs) if depth is None else depth
    for _, group in runs.groupby("arch"):
        chosen = depth if depth is not None else group["depth"].max()
        for r in group[group["depth"] == chosen].itertuples():
            pruning = r.diagnostics["pruning"]
            base = 100 * pruning["none"]["test"]
            for layer, paper_layer in positions(int(r.depth)):
                ours = 100 * pruning[str(layer)]["test"]
                paper = PAPER_PRUNED[r.arch][PAPER_LAYERS.index(paper_layer)]
                rows.append({"architecture": r.arch, "depth": int(r.depth), "seed": int(r.seed), "layer": layer,
                             "paper_layer": paper_layer, "ours_baseline": round(base, 2), "ours_test": round(ours, 2),
                             "ours_change": round(ours - base, 2), "paper_baseline": PAPER_BASELINE[r.arch],
                             "paper_test": paper, "paper_change": round(paper - PAPER_BASELINE[r.arch], 2)})
    return pd.DataFrame(rows, columns=COLUMNS)


def _markdown(t: pd.DataFrame) -> str:
    lines = ["| architecture | depth | seed | pruned layer (paper's of 256) | test ours: pruned − baseline "
             "| test paper: pruned − baseline |", "|---|---:|---:|---:|---:|---:|"]
    for r in t.itertuples():
        lines.append(f"| {ARCH_LABELS[r.architecture]} | {r.depth} | {r.seed} | {r.layer} ({r.paper_layer}) | "
                     f"{r.ours_test:.2f} − {r.ours_baseline:.2f} = {r.ours_change:+.2f} | "
                     f"{r.paper_test:.2f} − {r.paper_baseline:.2f} = {r.paper_change:+.2f} |")
    return "\n".join(lines) + "\n"


def table(frame: pd.DataFrame) -> dict[str, str]:
    t = summary(frame)
    return table_files(t, _markdown(t), "%.2f")


def report(frame: pd.DataFrame) -> dict[str, str]:
    t = summary(frame)
    depths = sorted(t["depth"].unique()) if not t.empty else []
    shallower = "" if depths == [256] else ", not the paper's 256 (cpu budget)"
    note = (f" Pruned models have {', '.join(map(str, depths))} layers here{shallower}; "
            "final weights, not the best-validation checkpoint." if depths else "")
    return {"gh_pruning-table": budget_line(pruned_runs(frame)) + note + "\n\n" + _markdown(t)}


def _judge(t: pd.DataFrame) -> tuple[str, str]:
    """(verdict, evidence) of the claim on the pruned models of one depth."""
    # One change per (architecture, pruned layer): the mean over the seeds trained (one seed: that model's).
    per_layer = t.groupby(["architecture", "depth", "layer", "paper_layer"], as_index=False)["ours_change"].mean()
    seeds = t.groupby("architecture")["seed"].nunique()
    nl = per_layer[per_layer["architecture"] == "nonlocal"]
    pre = per_layer[(per_layer["architecture"] == "pre") & (per_layer["paper_layer"] > 64)]
    nl_degrades = bool((nl["ours_change"] < 0).all())
    pre_negligible = bool((pre["ours_change"].abs() <= 0.5).all())
    verdict = HOLDS if nl_degrades and pre_negligible else HOLDS_IN_PART if nl_degrades or pre_negligible \
        else DOES_NOT_HOLD
    over = "" if seeds.max() == 1 else f" (changes are means over {seeds['nonlocal']}/{seeds['pre']} seeds)"
    evidence = (f"nonlocal ({int(nl['depth'].iloc[0])} layers, baseline "
                f"{t.loc[t['architecture'] == 'nonlocal', 'ours_baseline'].mean():.1f}): change "
                f"{nl['ours_change'].min():+.2f} to {nl['ours_change'].max():+.2f} pts, "
                f"{int((nl['ours_change'] < 0).sum())}/{len(nl)} pruned layers lower; Pre-LN "
                f"({int(pre['depth'].iloc[0]) if len(pre) else 0} layers) beyond the paper's 64/256: "
                f"max |change| {pre['ours_change'].abs().max():.2f} pts (paper: 0.00){over}")
    return verdict, evidence


def claims(frame: pd.DataFrame) -> list[Claim]:
    t = summary(frame)
    quote = ("For the nonlocal SAN with Post-LN, pruning any intermediate layer leads to a degradation in accuracy "
             "compared to the baseline [...] for the Pre-LN model, pruning layers beyond depth 64 has a negligible "
             "impact on accuracy.")
    if t.empty or not {"nonlocal", "pre"} <= set(t["architecture"]):
        return [Claim(PAPER, "§5", quote, NOT_RUN, "needs trained deep nonlocal Post-LN and Pre-LN SANs", 0,
                      "gh_pruning")]
    if int(t["depth"].min()) < MIN_DEPTH:
        return [Claim(PAPER, "§5", quote, CANNOT_JUDGE, f"only {int(t['depth'].min())}-layer models trained so far; "
                      f"the claim is about deep ones (>= {MIN_DEPTH} layers)", 0, "gh_pruning")]
    # The verdict is the deepest common depth's (the paper prunes 256-layer models); the shallower deep models of
    # the same budget are judged alike and shown beside it, since a model that has not trained at the deepest depth
    # (the baseline in the evidence) has nothing to lose by pruning.
    verdict, evidence = _judge(t)
    deepest = int(t["depth"].iloc[0])
    for depth in common_depths(pruned_runs(frame), tuple(PAPER_PRUNED)):
        if MIN_DEPTH <= depth < deepest:
            other, text = _judge(summary(frame, depth))
            evidence += f"; at {depth} layers: {other} ({text})"
    evidence = with_shorter_budgets(evidence, _with_pruning(frame), tuple(PAPER_PRUNED), MIN_DEPTH,
                                    lambda epochs: claims(of_budget(frame, epochs))[0])
    return [Claim(PAPER, "§5", quote, verdict, evidence, int(t.groupby(["architecture", "seed"]).ngroups),
                  "gh_pruning")]


ARTIFACT = Artifact(
    name="gh_pruning",
    paper=PAPER,
    title="Single-layer pruning of trained deep SANs, nonlocal Post-LN vs Pre-LN (Guan & He Table 8)",
    experiments=(EXPERIMENT,),
    table=table,
    report=report,
    claims=claims,
)
