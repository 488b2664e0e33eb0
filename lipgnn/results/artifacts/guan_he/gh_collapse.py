r"""gh_collapse — why Guan & He's 256-layer Post-LN and nonlocal Post-LN SANs stop learning (beyond the paper).

Reads the ``collapse`` diagnostics of the gh_collapse records (:mod:`lipgnn.diagnostics.collapse`: per layer
:math:`\hat{\mathcal{E}}_1(X^k) = \mathcal{E}_1(X^k) / \tfrac{1}{n}\|X^k\|_F^2`, the effective rank of :math:`X^k`,
the attention entropy :math:`H^k` against :math:`\frac{1}{n}\sum_i \log(\deg_i + 1)`, the nonlocal factor and the
per-block gradient norms, every few epochs) and applies the reading rules that ``conf/experiment/gh_collapse.yaml``
fixed before the runs: for each collapsed run, which explanations hold at its last snapshot, and whether anything
still moves at the end of its budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.guan_he._common import ARCH_LABELS, PAPER, budget_line, completed_san
from lipgnn.results.artifacts.guan_he._common import EXPERIMENT as DEPTH_EXPERIMENT

EXPERIMENT = "gh_collapse"
SHOWN = ("post", "nonlocal", "pre")
#: The reading rules of conf/experiment/gh_collapse.yaml.
FLAT_ACCURACY = 0.005      # collapsed: train accuracy within this of its last value over the last half of epochs
FEATURE_COLLAPSE = 1e-3    # last layer's normalised Dirichlet energy below this fraction of X^0's
RANK_COLLAPSE = 2.0        # last layer's effective rank below this
UNIFORM_ATTENTION = 0.99   # deep half's mean attention entropy above this fraction of log(deg + 1)
VANISHING_GRADIENT = 1e-3  # first block's gradient norm below this fraction of the last block's
STILL_MOVING = 0.01        # relative change between the last snapshot and the one a quarter of the budget earlier


@dataclass(frozen=True)
class Reading:
    """The pre-registered reading of one run at its last snapshot (``init_*``: the same at epoch 0)."""

    arch: str
    epochs: int
    last_epoch: int
    train: float                 # last epoch's train accuracy
    loss: float                  # last epoch's train loss
    collapsed: bool
    flat_from: int | None        # first epoch from which the train accuracy stays within FLAT_ACCURACY of its last
    energy_ratio: float          # \hat E_1(X^L) / \hat E_1(X^0)
    init_energy_ratio: float
    peak_energy_ratio: float     # the largest \hat E_1(X^L) / \hat E_1(X^0) over every snapshot (not pre-registered)
    rank_last: float             # effective rank of X^L
    init_rank_last: float
    entropy_ratio: float         # deep half's mean H^k / log(deg + 1)
    init_entropy_ratio: float
    grad_ratio: float | None     # first block's gradient norm / last block's
    grad_first: float | None
    moving: dict[str, float]     # relative change over the last quarter, per watched quantity

    @property
    def explanations(self) -> dict[str, bool]:
        return {"feature collapse": self.energy_ratio < FEATURE_COLLAPSE,
                "rank collapse": self.rank_last < RANK_COLLAPSE,
                "uniform attention": self.entropy_ratio > UNIFORM_ATTENTION,
                "vanishing gradient": self.grad_ratio is not None and self.grad_ratio < VANISHING_GRADIENT}

    @property
    def still_moving(self) -> list[str]:
        return [k for k, v in self.moving.items() if not np.isfinite(v) or abs(v) > STILL_MOVING]


def runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The completed gh_collapse records with collapse diagnostics, one per architecture (the lowest seed)."""
    out = completed_san(frame)
    if out.empty:
        return out
    out = out[(out["experiment"] == EXPERIMENT) & out["diagnostics"].map(lambda d: "collapse" in d)]
    return out.sort_values("seed").drop_duplicates("arch")


def _flat_from(epochs: list[int], train: np.ndarray) -> int:
    """The first epoch from which the train accuracy stays within ``FLAT_ACCURACY`` of its last value."""
    off = np.abs(np.asarray(train, float) - float(train[-1])) > FLAT_ACCURACY
    # the epoch after the last one off the final value (the final epoch itself is never off)
    return int(epochs[int(np.nonzero(off)[0][-1]) + 1]) if off.any() else int(epochs[0])


def _ratio(a: float | None, b: float | None) -> float:
    return float("nan") if a is None or b is None or b == 0 else float(a) / float(b)


def _deep_entropy(collapse: dict[str, Any], i: int) -> float:
    row = np.array(collapse["entropy"][i], dtype=float)
    return float(row[len(row) // 2:].mean()) / float(collapse["uniform_entropy"])


def _relative_change(new: float | None, old: float | None) -> float:
    if new is None or old is None:
        return float("nan")
    return 0.0 if new == old else (float(new) - float(old)) / max(abs(float(old)), 1e-300)


def read(record: pd.Series) -> Reading:
    """Apply the reading rules to one record (its ``history`` and ``diagnostics.collapse``)."""
    c, h = record["diagnostics"]["collapse"], record["history"]
    epochs_hist, train, loss = list(h["epoch"]), np.array(h["train"], float), np.array(h["loss"], float)
    epochs = int(record["epochs"])
    last_train = float(train[-1])
    flat_from = _flat_from(epochs_hist, train)
    collapsed = flat_from <= epochs_hist[-1] - epochs // 2
    snaps = list(c["epochs"])
    last = len(snaps) - 1
    earlier = snaps.index(max(e for e in snaps if e <= snaps[-1] - epochs // 4)) if len(snaps) > 1 else last
    loss_at = dict(zip(epochs_hist, loss, strict=True))
    grad_first = c["grad"][last][0]
    return Reading(
        arch=str(record["arch"]), epochs=epochs, last_epoch=int(snaps[-1]), train=last_train, loss=float(loss[-1]),
        collapsed=bool(collapsed), flat_from=flat_from if collapsed else None,
        energy_ratio=_ratio(c["energy_norm"][last][-1], c["energy_norm"][last][0]),
        init_energy_ratio=_ratio(c["energy_norm"][0][-1], c["energy_norm"][0][0]),
        peak_energy_ratio=max(_ratio(row[-1], row[0]) for row in c["energy_norm"]),
        rank_last=float(c["rank"][last][-1]), init_rank_last=float(c["rank"][0][-1]),
        entropy_ratio=_deep_entropy(c, last), init_entropy_ratio=_deep_entropy(c, 0),
        grad_ratio=None if grad_first is None else _ratio(grad_first, c["grad"][last][-1]), grad_first=grad_first,
        moving={"train loss": _relative_change(loss_at.get(snaps[-1]), loss_at.get(snaps[earlier])),
                "last layer's normalised energy": _relative_change(c["energy_norm"][last][-1],
                                                                   c["energy_norm"][earlier][-1]),
                "first block's gradient norm": _relative_change(grad_first, c["grad"][earlier][0])},
    )


def readings(frame: pd.DataFrame) -> list[Reading]:
    r = runs(frame)
    order = {a: i for i, a in enumerate(SHOWN)}
    return sorted((read(row) for _, row in r.iterrows()), key=lambda x: order.get(x.arch, len(order)))


def _schedule(config: dict[str, Any]) -> tuple[Any, ...]:
    t = config["train"]
    return float(t["lr"]), int(t.get("warmup_epochs", 0)), float(t.get("weight_decay", 0.0))


def same_run(frame: pd.DataFrame, record: pd.Series) -> str:
    """Whether ``record``'s curves are the first epochs of a longer gh_depth record of the same model, seed, depth and
    schedule (the diagnostic measured the run the gh_depth verdict rests on)."""
    if "experiment" not in frame:
        return "no gh_depth record of the same model, seed and schedule"
    depth_runs = completed_san(frame[frame["experiment"] == DEPTH_EXPERIMENT])
    if depth_runs.empty:
        return "no gh_depth record of the same model, seed and schedule"
    longer = depth_runs[(depth_runs["arch"] == record["arch"]) & (depth_runs["seed"] == record["seed"])
                        & (depth_runs["depth"] == record["depth"]) & (depth_runs["epochs"] > record["epochs"])
                        & (depth_runs["config"].map(_schedule) == _schedule(record["config"]))]
    if longer.empty:
        return "no gh_depth record of the same model, seed and schedule"
    other = longer.sort_values("epochs").iloc[-1]
    ours, theirs = record["history"], other["history"]
    n = len(ours["epoch"])
    differs = [e for e, a, b, c, d in zip(ours["epoch"], ours["train"], theirs["train"][:n], ours["loss"],
                                           theirs["loss"][:n], strict=False) if a != b or c != d]
    name = f"gh_depth's {int(other['epochs'])}-epoch record (commit `{str(other.get('git_commit', ''))[:7]}`)"
    train = np.array(theirs["train"], float)
    span = (f"over its {len(train)} epochs the train accuracy stays within {100 * FLAT_ACCURACY:.1f} points of its "
            f"last value, {100 * train[-1]:.1f} %, from epoch {_flat_from(list(theirs['epoch']), train)} on")
    if not differs:
        return f"the same run as the first {n} epochs of {name}: train accuracy and loss equal at every epoch; {span}"
    gap = float(np.max(np.abs(np.array(ours["train"], float) - train[:n])))
    return (f"not bit-identical to {name} of the same config: the curves first differ at epoch {differs[0]} (train "
            f"accuracy at most {100 * gap:.1f} points apart over the first {n} epochs); {span}")


def _g(value: float | None) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.3g}"


def _table(rs: list[Reading]) -> str:
    lines = ["| variant | train % (last) | loss (last) | Ê₁(X^L)/Ê₁(X⁰) init → end | erank(X^L) init → end "
             "| deep-half H / log(deg+1) init → end | ‖∇ block 1‖ / ‖∇ block L‖ (end) | still moving (last quarter) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rs:
        moving = ", ".join(f"{k} {100 * v:+.1f} %" for k, v in r.moving.items())
        lines.append(f"| {ARCH_LABELS[r.arch]} | {100 * r.train:.1f} | {r.loss:.3f} | {_g(r.init_energy_ratio)} → "
                     f"{_g(r.energy_ratio)} | {r.init_rank_last:.2f} → {r.rank_last:.2f} | "
                     f"{r.init_entropy_ratio:.3f} → {r.entropy_ratio:.3f} | {_g(r.grad_ratio)} | {moving} |")
    return "\n".join(lines)


def _sentence(r: Reading) -> str:
    label = ARCH_LABELS[r.arch]
    if not r.collapsed:
        return (f"- **{label}** does not collapse: its train accuracy still moves by more than "
                f"{100 * FLAT_ACCURACY:.1f} points in the last half of its {r.epochs} epochs ({100 * r.train:.1f} % "
                "at the end); it is the contrast.")
    held = [k for k, v in r.explanations.items() if v]
    not_held = [k for k, v in r.explanations.items() if not v]
    why = ("; ".join(held) if held else "none of the pre-registered explanations") + \
        (f" (not: {', '.join(not_held)})" if not_held else "")
    at_init = []
    if r.init_energy_ratio < FEATURE_COLLAPSE:
        at_init.append(f"the last layer's features were already collapsed at initialisation "
                       f"(Ê₁ ratio {_g(r.init_energy_ratio)})")
    if r.init_rank_last < RANK_COLLAPSE:
        at_init.append(f"its effective rank was already {r.init_rank_last:.2f} at initialisation")
    moving = r.still_moving
    longer = (f"still moving at the end ({', '.join(moving)}): a longer budget could change it" if moving else
              f"nothing watched moves by more than {100 * STILL_MOVING:.0f} % over the last quarter of the budget: "
              "the run sits at a fixed point that more epochs of the same schedule do not leave")
    return (f"- **{label}** collapsed: train accuracy {100 * r.train:.1f} %, flat (within "
            f"{100 * FLAT_ACCURACY:.1f} points) from epoch {r.flat_from} to {r.epochs}, loss {r.loss:.3f}. "
            f"Explained by: {why}" + (f"; {'; '.join(at_init)}" if at_init else "") + f". Longer budget: {longer}. "
            f"Beyond the rules: the last layer's Ê₁ ratio peaks at {_g(r.peak_energy_ratio)} over all snapshots.")


def report(frame: pd.DataFrame) -> dict[str, str]:
    rs = readings(frame)
    if not rs:
        return {"gh_collapse-reading": "No gh_collapse records yet (`python train.py -m experiment=gh_collapse "
                                       "budget=cpu`)."}
    r = runs(frame)
    seeds = ", ".join(str(int(s)) for s in sorted(set(r["seed"])))
    depth = ", ".join(str(int(d)) for d in sorted(set(r["depth"])))
    head = (f"{budget_line(r)} One seed ({seeds}), {depth} layers, measured every "
            f"{r['diagnostics'].iloc[0]['collapse']['every']} epochs; readings at the last snapshot (rules in "
            "`conf/experiment/gh_collapse.yaml`).")
    order = {a: i for i, a in enumerate(SHOWN)}
    same = "\n".join(f"- {ARCH_LABELS[row['arch']]}: {same_run(frame, row)}."
                      for _, row in sorted(r.iterrows(), key=lambda item: order.get(item[1]["arch"], len(order))))
    return {"gh_collapse-reading": head + "\n\n" + _table(rs) + "\n\n" + "\n".join(_sentence(x) for x in rs)
            + "\n\nAgainst gh_depth's longer runs:\n\n" + same}


_LAYER_KEYS = ("energy_norm", "rank", "energy")
_PANELS = (("energy_norm", "Ê₁(X^k) / (‖X^k‖²/n)", "log"), ("entropy", "H^k / log(deg+1)", "linear"),
           ("grad", "‖∇ block k‖", "log"))


def figure(frame: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize

    from lipgnn.results.plotting import empty_figure

    r = runs(frame)
    if r.empty:
        return empty_figure(EXPERIMENT, "no gh_collapse records yet")
    arches = [a for a in SHOWN if a in set(r["arch"])]
    fig, axes = plt.subplots(len(_PANELS) + 1, len(arches), figsize=(max(4.2 * len(arches), 7.0), 12), squeeze=False)
    for col, arch in enumerate(arches):
        record = r[r["arch"] == arch].iloc[0]
        c = record["diagnostics"]["collapse"]
        snaps = np.array(c["epochs"], dtype=float)
        half = float(c["every"]) / 2
        for row, (key, label, scale) in enumerate(_PANELS):
            ax = axes[row][col]
            low = 0 if key in _LAYER_KEYS else 1  # X^0..X^L, or blocks 1..L
            values = np.array([[np.nan if v is None else v for v in s] for s in c[key]], dtype=float).T
            if key == "entropy":
                values = values / float(c["uniform_entropy"])
            positive = values[np.isfinite(values) & (values > 0)]
            norm = (LogNorm(vmin=positive.min(), vmax=positive.max()) if scale == "log" and positive.size
                    else Normalize(vmin=np.nanmin(values), vmax=np.nanmax(values)))
            image = ax.imshow(np.where(values > 0, values, np.nan) if scale == "log" else values, aspect="auto",
                              origin="lower", norm=norm, interpolation="nearest",
                              extent=(snaps[0] - half, snaps[-1] + half, low - 0.5, low + values.shape[0] - 0.5))
            fig.colorbar(image, ax=ax, fraction=0.05)
            ax.set_title(f"{ARCH_LABELS[arch]}: {label}", fontsize=8)
            ax.set_xlabel("epoch", fontsize=7)
            ax.set_ylabel("layer k" if key == "energy_norm" else "block k", fontsize=7)
        ax = axes[-1][col]
        h = record["history"]
        ax.plot(h["epoch"], np.array(h["train"]) * 100, label="train %")
        ax.plot(h["epoch"], np.array(h["val"]) * 100, label="val %")
        ax.set_ylim(0, 100)
        ax.set_xlabel("epoch", fontsize=7)
        ax.set_title(f"{ARCH_LABELS[arch]}: accuracy and loss", fontsize=8)
        twin = ax.twinx()
        twin.plot(h["epoch"], h["loss"], color="black", lw=0.8, label="train loss")
        twin.set_yscale("log")
        ax.legend(loc="center right", fontsize=6)
        twin.legend(loc="upper right", fontsize=6)
    fig.suptitle(f"gh_collapse: Cora, {int(r['depth'].iloc[0])} layers, seed {int(r['seed'].iloc[0])}, "
                 f"{int(r['epochs'].iloc[0])} epochs (cpu budget; paper 5000)", fontsize=9)
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    name=EXPERIMENT,
    paper=PAPER,
    title="Why the 256-layer Post-LN and nonlocal SANs collapse: per-layer energy, rank, attention entropy and "
          "gradients over training (beyond the paper)",
    experiments=(EXPERIMENT, DEPTH_EXPERIMENT),
    needs_history=True,
    figure=figure,
    report=report,
)
