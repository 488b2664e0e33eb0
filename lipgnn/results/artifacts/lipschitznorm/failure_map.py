"""The failure map: where a deep plain GAT fails to train on Cora at the paper's 1000 epochs, and where
LipschitzNorm rescues it (the headline of Table 3 and Fig. 3, tested over the axes that decide it).

Pre-registered in ``conf/experiment/failure_map.yaml`` before its first record (``git log`` shows the order):

- grid: Cora, depth {15, 30}, GAT and GAT-Lip, lr {0.005, 0.001} x dropout {the authors' 0.6 / 0.3, none}, hidden
  64, 1 head, seeds 0-4, 1000 epochs, constant lr, no early stopping, test accuracy at the epoch of best
  validation accuracy;
- primary comparison: 30 layers at the paper's defaults (lr 0.005, dropout 0.6 / 0.3), GAT-Lip - GAT paired over
  seeds, against the paper's +39.8 points (Table 3: 69.3 - 29.5);
- reading rule per point: a model *fails to train* when its mean test accuracy is below ``FAILS_BELOW``; LipschitzNorm
  *rescues* a point when GAT fails there, GAT-Lip does not, and the paired interval of GAT-Lip - GAT lies above 0.

Every point is reported; none is selected. Beside each 1000-epoch point stands the same point at 200 epochs from
Table 3's CPU grid (``experiment=table3``), which has exactly these two axes: where the two disagree, the budget
changes the answer. The attention-gradient norm is the largest per-layer norm of the attention parameters' gradient
over the first ``log.grad_norms_epochs`` epochs (the quantity of Fig. 2), the median over seeds.

The pre-registered secondary sub-sweeps (``secondary``) are read with the same rule and shown with their intervals:
the authors' plateau scheduler at the primary point, PubMed at 30 layers (the paper's defaults, and the point where
plain GAT's mean *validation* accuracy on Cora at 30 layers is best; the other points beside them), and the residual
variants over the Cora 30-layer map. They are descriptive: the primary comparison is the map's one test in the
paper's multiplicity family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm.table3 import PAPER as TABLE3
from lipgnn.results.floors import floor
from lipgnn.results.render.text import md_table
from lipgnn.results.reporting import arm_floor, both, test_id
from lipgnn.results.stats import MIN_SEEDS, Interval, paired_difference, t_interval
from lipgnn.results.verdict import NOT_RUN, Claim, Outcome, Scale, outcome

if TYPE_CHECKING:
    import matplotlib.figure

EXPERIMENT = "failure_map"
BASELINE = "table3"          # its CPU grid: the same lr x dropout axes at 200 epochs
FAILS_BELOW = 0.50           # pre-registered: between the paper's failing (29.5-38.2 %) and working (69.3-79.4 %)
DEPTHS = (15, 30)
LRS = (0.005, 0.001)
DROPOUTS = ("authors'", "none")   # model.dropout / model.attn_dropout: 0.6 / 0.3, and 0 / 0
VARIANTS = ("GAT", "GAT-Lip")
RESIDUAL = ("GAT-res", "GAT-Lip-res")
PRIMARY = {"depth": 30, "lr": 0.005, "dropout": "authors'"}
SECTION = "§7.3, Table 3"
QUOTE = ("Even for a large number of layers (l>15), where the models without any normalization fail to converge, "
         "the variants using the LipschitzNorm achieve comparable to the state-of-the-art results [Table 3, Cora, "
         "30 layers: GAT 29.5 vs GAT-Lip 69.3]")


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    """The runs of both experiments with the map's axes as columns: ``budget_epochs``, ``dropout_setting``,
    ``scheduler``, ``test`` (the run's selected test metric), ``grad_max``; failed runs and runs outside their
    experiment's declared grid dropped."""
    from lipgnn.results.protocol import with_selected_metrics

    if df.empty:
        return df
    out = with_selected_metrics(df)
    out = out[out["dataset"].isin(("cora", "pubmed")) & out["variant"].isin(VARIANTS + RESIDUAL)].copy()

    def config(row: pd.Series, *path: str) -> Any:
        node: Any = row["config"]
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    out["dropout_setting"] = [
        "none" if float(config(r, "model", "dropout") or 0.0) == 0.0
        and float(config(r, "model", "attn_dropout") or 0.0) == 0.0 else "authors'"
        for _, r in out.iterrows()]
    out["scheduler"] = [str(config(r, "train", "scheduler") or "none") for _, r in out.iterrows()]
    out["budget_epochs"] = out["epochs"].astype(float)
    out["test"] = out["sel_test"].astype(float)
    out["grad_max"] = [_grad_max(h) for h in out["history"]]
    return out


def _grad_max(history: Any) -> float:
    """The largest attention-gradient norm (any layer) over the epochs the record kept, NaN if none."""
    rows = history.get("grad_norms") if isinstance(history, dict) else None
    values = [float(v) for row in rows or [] if row for v in row if v is not None and math.isfinite(float(v))]
    return max(values) if values else math.nan


@dataclass(frozen=True)
class Point:
    """One grid point (depth, lr, dropout setting, epoch budget) of the map: both variants and their difference
    (``gat`` is the plain arm, ``lip`` the LipschitzNorm arm: GAT and GAT-Lip, or their residual twins)."""

    depth: int
    lr: float
    dropout: str
    epochs: int
    gat: Interval
    lip: Interval
    diff: Interval            # paired GAT-Lip - GAT
    grad_gat: float
    grad_lip: float
    std_gat: float = math.nan   # sample std over seeds (ddof=1)
    std_lip: float = math.nan
    gat_runs: pd.DataFrame | None = field(default=None, compare=False, repr=False)
    lip_runs: pd.DataFrame | None = field(default=None, compare=False, repr=False)
    dataset: str = "cora"
    arms: tuple[str, str] = VARIANTS

    def scale(self) -> Outcome:
        """GAT-Lip − GAT on the reproduction scale (``verdict.outcome``) against the paper's effect at this depth:
        not comparable when both arms sit within the margin of Cora's majority class."""
        return outcome(self.diff, paper_effect(self.depth), arms=(self.lip.mean, self.gat.mean),
                       floor=arm_floor(self.lip_runs), min_seeds=MIN_SEEDS)

    @property
    def label(self) -> str:
        return f"{self.depth} layers, lr {self.lr:g}, dropout {self.dropout}"

    def gat_text(self) -> str:
        return _pct(self.gat, self.std_gat)

    def lip_text(self) -> str:
        return _pct(self.lip, self.std_lip)

    @property
    def gat_fails(self) -> bool:
        return self.gat.n > 0 and self.gat.mean < FAILS_BELOW

    @property
    def lip_fails(self) -> bool:
        return self.lip.n > 0 and self.lip.mean < FAILS_BELOW

    @property
    def rescued(self) -> bool:
        """The pre-registered rule: GAT fails, GAT-Lip does not, and the paired interval lies above 0."""
        return (self.gat_fails and not self.lip_fails and self.diff.n >= MIN_SEEDS
                and math.isfinite(self.diff.lo) and self.diff.lo > 0.0)

    @property
    def complete(self) -> bool:
        """Both variants at ``MIN_SEEDS`` paired seeds or more: the point can be read."""
        return self.diff.n >= MIN_SEEDS


def points(df: pd.DataFrame, epochs: int = 1000, scheduler: str = "none", *, dataset: str = "cora",
           depths: tuple[int, ...] = DEPTHS, arms: tuple[str, str] = VARIANTS) -> list[Point]:
    """Every (depth, lr, dropout) point of the map at ``epochs`` (1000: this experiment; 200: Table 3's CPU grid),
    in the declared order; ``scheduler``, ``dataset`` and ``arms`` select a secondary sub-sweep."""
    runs = _frame(df)
    out = []
    for depth in depths[::-1]:
        for lr in LRS:
            for dropout in DROPOUTS:
                if runs.empty:
                    here = runs
                else:
                    here = runs[(runs["dataset"] == dataset) & (runs["depth"] == depth)
                                & np.isclose(runs["lr"].astype(float), lr)
                                & (runs["dropout_setting"] == dropout) & (runs["budget_epochs"] == epochs)
                                & (runs["scheduler"] == scheduler) & ~runs["diverged"].astype(bool)]
                gat = here[here["variant"] == arms[0]] if not here.empty else here
                lip = here[here["variant"] == arms[1]] if not here.empty else here
                out.append(Point(depth, lr, dropout, epochs, t_interval(_col(gat, "test")),
                                 t_interval(_col(lip, "test")),
                                 paired_difference(lip, gat, "test") if len(gat) and len(lip) else Interval(
                                     0, math.nan, math.nan, math.nan),
                                 _median(gat, "grad_max"), _median(lip, "grad_max"), _std(gat), _std(lip), gat, lip,
                                 dataset, arms))
    return out


def _col(runs: pd.DataFrame, column: str) -> list[float]:
    return [] if runs.empty else [float(v) for v in runs[column]]


def _std(runs: pd.DataFrame) -> float:
    values = _col(runs, "test")
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def _median(runs: pd.DataFrame, column: str) -> float:
    values = [v for v in _col(runs, column) if math.isfinite(v)]
    return float(np.median(values)) if values else math.nan


def _pct(interval: Interval, std: float) -> str:
    if interval.n == 0:
        return "not run"
    spread = f" ± {100 * std:.1f}" if math.isfinite(std) else ""
    return f"{100 * interval.mean:.1f}{spread} (n={interval.n})"


def _grad(value: float) -> str:
    return f"{value:.1e}" if math.isfinite(value) else "-"


def _reading(point: Point) -> str:
    if not point.complete:
        return "not run" if point.diff.n == 0 else f"partial ({point.diff.n} paired seeds)"
    if point.rescued:
        return "**GAT fails, LipschitzNorm rescues**"
    if point.gat_fails and point.lip_fails:
        return "both fail"
    if point.gat_fails:
        return "GAT fails; GAT-Lip above 50 % but the interval holds 0"
    if point.lip_fails:
        return "GAT-Lip fails, GAT trains"
    return "both train"


def map_table(df: pd.DataFrame) -> str:
    """The map as a Markdown table: every point at 1000 epochs beside the same point at 200 epochs."""
    long = points(df, 1000)
    short = {(p.depth, p.lr, p.dropout): p for p in points(df, 200)}
    rows = []
    for p in long:
        s = short[(p.depth, p.lr, p.dropout)]
        rows.append([str(p.depth), f"{p.lr:g}", p.dropout, p.gat_text(), p.lip_text(),
                     p.diff.text() if p.diff.n else "-", f"{_grad(p.grad_gat)} / {_grad(p.grad_lip)}", _reading(p),
                     f"{s.gat_text()} / {s.lip_text()}" if s.gat.n or s.lip.n else "not run", _reading(s)])
    head = ["layers", "lr", "dropout", "GAT, 1000 ep.", "GAT-Lip, 1000 ep.", "GAT-Lip − GAT (points)",
            "attention-gradient norm GAT / GAT-Lip", "reading (1000 ep.)", "GAT / GAT-Lip, 200 ep.",
            "reading (200 ep.)"]
    return "\n".join(md_table(head, rows))


def primary(df: pd.DataFrame) -> Point | None:
    for p in points(df, 1000):
        if (p.depth, p.lr, p.dropout) == (PRIMARY["depth"], PRIMARY["lr"], PRIMARY["dropout"]):
            return p
    return None


def paper(variant: str, depth: int, dataset: str = "cora") -> float:
    """The paper's Table 3 test accuracy (%) of ``variant`` (Table 3's artifact holds the paper's numbers)."""
    return TABLE3[variant][(dataset, depth)].mean


def paper_effect(depth: int, dataset: str = "cora", arms: tuple[str, str] = VARIANTS) -> float:
    """The paper's LipschitzNorm arm minus the plain arm (GAT-Lip - GAT by default) at ``depth`` (fraction)."""
    return (paper(arms[1], depth, dataset) - paper(arms[0], depth, dataset)) / 100.0


def verdict_sentence(df: pd.DataFrame) -> str:
    """One sentence: where GAT fails at 1000 epochs, where LipschitzNorm rescues it, and what it means for Table 3."""
    done = [p for p in points(df, 1000) if p.complete]
    if not done:
        return "No record of the failure map yet: run `python train.py -m experiment=failure_map budget=cpu`."

    def where(ps: list[Point]) -> str:
        return "; ".join(f"{p.depth} layers, lr {p.lr:g}, dropout {p.dropout}" for p in ps) or "nowhere"

    fails = [p for p in done if p.gat_fails]
    rescued = [p for p in done if p.rescued]
    trains = [p for p in done if not p.gat_fails]
    n_all = len(points(df, 1000))
    both_fail = [p for p in done if p.gat_fails and p.lip_fails]
    meaning = ("Table 3's gap appears where plain GAT is run at a failing setting, and not where it trains"
               if rescued and trains else
               "Table 3's gap appears at every point read" if rescued else
               "at no point read does LipschitzNorm turn a failing GAT into a trained one"
               + (f" (both fail at {len(both_fail)} of them)" if both_fail else ""))
    so_far = "" if len(done) == n_all else " So far, on the points read:"
    return (f"At 1000 epochs on Cora ({len(done)} of {n_all} points read, each with both variants over at least "
            f"{MIN_SEEDS} paired seeds), plain GAT fails to train (mean test accuracy below {100 * FAILS_BELOW:.0f} %) "
            f"at: {where(fails)}; LipschitzNorm rescues it at: {where(rescued)}; plain GAT trains at: "
            f"{where(trains)}.{so_far} {meaning[0].upper() + meaning[1:]}.")


def budget_sentence(df: pd.DataFrame) -> str:
    """Where the reading at 1000 epochs differs from the same point's reading at 200 epochs (Table 3's records)."""
    short = {(p.depth, p.lr, p.dropout): p for p in points(df, 200)}
    both = [(p, short[(p.depth, p.lr, p.dropout)]) for p in points(df, 1000)
            if p.complete and short[(p.depth, p.lr, p.dropout)].complete]
    if not both:
        return "No point has both its 1000-epoch and its 200-epoch runs yet, so the budget's effect is not read."
    moved = [f"{p.depth} layers, lr {p.lr:g}, dropout {p.dropout} ({_reading(s)} at 200 → {_reading(p)} at 1000)"
             for p, s in both if _reading(p) != _reading(s)]
    return (f"Points read at both budgets: {len(both)}; the budget changes the reading at "
            + ("; ".join(moved) if moved else "none") + ".")


def best_gat_point(df: pd.DataFrame) -> Point | None:
    """The 30-layer Cora point where plain GAT's mean *validation* accuracy at 1000 epochs is highest (the
    pre-registered choice of PubMed's second point: chosen on validation, never on the test metric)."""
    best, best_val = None, -math.inf
    for p in points(df, 1000, depths=(30,)):
        if p.gat_runs is not None and len(p.gat_runs) and p.complete:
            val = float(p.gat_runs["sel_val"].astype(float).mean())
            if val > best_val:
                best, best_val = p, val
    return best


def secondary_points(df: pd.DataFrame, chosen: Point | None = None) -> list[tuple[str, Point]]:
    """Each secondary row as (what it is, its point), in the pre-registered order; ``chosen`` is
    :func:`best_gat_point` (computed here when not given)."""
    rows: list[tuple[str, Point]] = []
    plateau = points(df, 1000, "plateau", depths=(30,))
    run = [p for p in plateau if p.diff.n]
    at_primary = [p for p in plateau if (p.lr, p.dropout) == (PRIMARY["lr"], PRIMARY["dropout"])]
    rows += [("Cora, plateau scheduler", p) for p in (run or at_primary)]
    chosen = best_gat_point(df) if chosen is None else chosen
    for p in points(df, 1000, dataset="pubmed", depths=(30,)):
        tags = ["PubMed"]
        if (p.lr, p.dropout) == (PRIMARY["lr"], PRIMARY["dropout"]):
            tags.append("the paper's defaults")
        if chosen is not None and (p.lr, p.dropout) == (chosen.lr, chosen.dropout):
            tags.append("GAT's best Cora validation point")
        rows.append((", ".join(tags), p))
    rows += [("Cora, residual", p) for p in points(df, 1000, depths=(30,), arms=RESIDUAL)]
    return rows


def secondary_table(secondary: list[tuple[str, Point]]) -> str:
    """The secondary sub-sweeps (:func:`secondary_points`) as a Markdown table: both arms, their paired difference,
    the paper's effect and the pre-registered reading."""
    rows = []
    for what, p in secondary:
        rows.append([what, p.label, f"{p.arms[0]} {p.gat_text()}", f"{p.arms[1]} {p.lip_text()}",
                     p.diff.text() if p.diff.n else "-",
                     f"{100 * paper_effect(p.depth, p.dataset, p.arms):+.1f} ({paper(p.arms[0], p.depth, p.dataset)} "
                     f"vs {paper(p.arms[1], p.depth, p.dataset)})", _reading(p)])
    head = ["sub-sweep", "point", "plain arm, 1000 ep.", "LipschitzNorm arm, 1000 ep.",
            "difference (points)", "paper: difference (plain vs Lip)", "reading"]
    return "\n".join(md_table(head, rows))


def secondary_note(rows: list[tuple[str, Point]], chosen: Point | None) -> str:
    """How the PubMed point was chosen (``chosen``: :func:`best_gat_point`), and how many of the secondary ``rows``
    are read so far."""
    read = sum(p.complete for _, p in rows)
    choice = (f"GAT's best mean validation accuracy on Cora at 30 layers and 1000 epochs is at {chosen.label}"
              if chosen is not None else "GAT's best Cora validation point is not known yet (its points are not read)")
    return (f"{read} of {len(rows)} secondary points read (at least {MIN_SEEDS} paired seeds). {choice}. The "
            f"reading rule is the map's ({100 * FAILS_BELOW:.0f} % threshold; PubMed's majority class is "
            f"{100 * (floor('pubmed') or math.nan):.1f} % of its test set). The residual rows pair GAT-res with "
            "GAT-Lip-res.")


def machines_sentence(df: pd.DataFrame) -> str:
    """Which commits and CPUs wrote the map's records (a deep model's accuracy moves with the instruction set the
    libraries dispatch to, so the reader sees where every record came from)."""
    runs = df[df["experiment"] == EXPERIMENT] if not df.empty else df
    if runs.empty:
        return ""
    cpu = runs["cpu"].where(runs["cpu"].notna(), "CPU not recorded (written before records named their numeric "
                                                 "environment)") if "cpu" in runs else "CPU not recorded"
    groups = runs.assign(commit=runs["git_commit"].astype(str).str[:7], machine=cpu).groupby(
        ["commit", "machine"], sort=True).size()
    parts = [f"{n} at commit `{commit}` on {machine}" for (commit, machine), n in groups.items()]
    threads = sorted({str((c.get("train") or {}).get("num_threads")) for c in runs["config"] if isinstance(c, dict)})
    return f"Records of this experiment: {'; '.join(parts)}; torch threads per run: {', '.join(threads)}."


def report(df: pd.DataFrame) -> dict[str, str]:
    p = primary(df)
    lines = [verdict_sentence(df), ""]
    if p is not None and p.diff.n:
        result = p.scale()
        lines.append(f"Primary comparison (pre-registered): 30 layers, lr 0.005, the authors' dropouts, GAT-Lip − GAT "
                     f"in points = {p.diff.text()} (paper: {100 * paper_effect(30):+.1f}; GAT {paper('GAT', 30)} "
                     f"vs GAT-Lip {paper('GAT-Lip', 30)} %): **{result.label}** ({result.reason}).")
        lines.append("")
    lines.append(budget_sentence(df))
    lines.append("")
    lines.append(map_table(df))
    lines.append("")
    lines.append(f"Test accuracy (%) at the epoch of best validation accuracy, mean ± std (n seeds); a model fails "
                 f"below {100 * FAILS_BELOW:.0f} %. The 200-epoch columns are Table 3's CPU grid (`experiment=table3`),"
                 " the same points at a fifth of the budget. Grid and rule: `conf/experiment/failure_map.yaml`.")
    lines += ["", machines_sentence(df)]
    chosen = best_gat_point(df)
    secondary = secondary_points(df, chosen)
    lines += ["", "**Secondary sub-sweeps** (pre-registered, in their launch order; descriptive, read with the same "
              "rule):", "", secondary_table(secondary), "", secondary_note(secondary, chosen)]
    return {"failure_map": "\n".join(lines)}


def claims(df: pd.DataFrame) -> list[Claim]:
    """The primary comparison as the map's one claim, on the reproduction scale against the paper's +39.8."""
    p = primary(df)
    if p is None or not p.complete:
        runs = 0 if p is None else p.gat.n + p.lip.n
        return [Claim("lipschitznorm", SECTION, QUOTE, NOT_RUN, "the failure map's primary point is not complete yet.",
                      runs, "failure_map")]
    result = p.scale()
    evidence = (f"30 layers, lr 0.005, authors' dropouts, 1000 epochs: GAT {p.gat_text()} vs GAT-Lip {p.lip_text()}; "
                f"GAT-Lip − GAT in points {p.diff.text()} (paper {100 * paper_effect(30):+.1f}): {result.reason}.")
    p_value = result.p_value if math.isfinite(result.p_value) else None
    return [Claim("lipschitznorm", SECTION, QUOTE, result.label, evidence, p.gat.n + p.lip.n, "failure_map",
                  n_seeds=p.diff.n, p_value=p_value,
                  scale=Scale(p.diff, paper_effect(30), result, test_id(p.lip_runs, p.gat_runs, "test")),
                  runs=both(p.gat_runs, p.lip_runs))]


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """Small multiples: for each depth, a heat map of mean test accuracy over lr x dropout, GAT beside GAT-Lip, the
    paper's number in each panel's title; cells not run are blank."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    all_points = points(df, 1000)
    fig, axes = plt.subplots(len(DEPTHS), len(VARIANTS), figsize=(8.4, 6.6), squeeze=False, layout="constrained")
    image = None
    for i, depth in enumerate(DEPTHS):
        for j, variant in enumerate(VARIANTS):
            ax = axes[i][j]
            grid = np.full((len(LRS), len(DROPOUTS)), np.nan)
            seeds = np.zeros((len(LRS), len(DROPOUTS)), dtype=int)
            for p in all_points:
                value = p.gat if variant == "GAT" else p.lip
                if p.depth == depth and value.n:
                    grid[LRS.index(p.lr), DROPOUTS.index(p.dropout)] = 100 * value.mean
                    seeds[LRS.index(p.lr), DROPOUTS.index(p.dropout)] = value.n
            image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
            for r in range(len(LRS)):
                for c in range(len(DROPOUTS)):
                    if math.isnan(grid[r, c]):
                        ax.text(c, r, "not run", ha="center", va="center", color="0.5")
                    else:
                        ax.text(c, r, f"{grid[r, c]:.1f}\n(n={seeds[r, c]})", ha="center", va="center",
                                color="white" if grid[r, c] < 60 else "black")
            # The paper's defaults (lr 0.005, the authors' dropouts): where its Table 3 numbers come from.
            ax.add_patch(Rectangle((DROPOUTS.index("authors'") - 0.5, LRS.index(0.005) - 0.5), 1, 1, fill=False,
                                   edgecolor="red", linewidth=2))
            ax.set_xticks(range(len(DROPOUTS)), [f"dropout {d}" for d in DROPOUTS])
            ax.set_yticks(range(len(LRS)), [f"lr {lr:g}" if j == 0 else "" for lr in LRS])
            ax.set_title(f"{variant}, {depth} layers (paper: {paper(variant, depth):.1f} %)", fontsize=10)
    if image is not None:
        fig.colorbar(image, ax=axes, label="test accuracy (%), mean over seeds", shrink=0.8)
    fig.suptitle("Failure map: Cora, 1000 epochs (red: the authors' code's defaults, lr 0.005, dropout 0.6 / "
                 "attention 0.3)", fontsize=10)
    return fig


ARTIFACT = Artifact(
    name="failure_map", paper="lipschitznorm",
    title="Failure map: where deep GAT fails at 1000 epochs and where LipschitzNorm rescues it",
    experiments=(EXPERIMENT, BASELINE), needs_history=True,
    figure=figure, report=report, claims=claims,
)
