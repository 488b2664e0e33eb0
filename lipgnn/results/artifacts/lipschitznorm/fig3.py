"""Fig. 3 (§6): train accuracy during training for several depths, GAT vs GAT-Lip (Cora).

Its verdict is part of the depth claim's report block, built by the fig6 artifact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.labels import NOT_RUN
from lipgnn.results.protocol import with_selected_metrics

if TYPE_CHECKING:
    import matplotlib.figure


def figure(df: pd.DataFrame) -> matplotlib.figure.Figure:
    """Train-accuracy curves vs epoch, one line per depth: GAT (left) and GAT-Lip (right)."""
    # matplotlib is imported only when a figure is drawn: the registry loads every artifact module.
    import matplotlib
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from lipgnn.results import plotting as P

    title = "Fig. 3 — train accuracy during training, without (GAT) and with LipschitzNorm (GAT-Lip)"
    runs = with_selected_metrics(df) if not df.empty else df
    if runs.empty:
        return P.empty_figure("fig3", title)
    depths = sorted(int(d) for d in runs["depth"].dropna().unique())
    colour = matplotlib.colormaps["viridis"]
    scale = Normalize(vmin=min(depths), vmax=max(depths) if max(depths) > min(depths) else min(depths) + 1)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, variant in zip(axes, ("GAT", "GAT-Lip"), strict=True):
        sub = runs[runs["variant"] == variant]
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 100)
        if sub.empty:
            ax.set_title(variant)
            P.note(ax, NOT_RUN)
            continue
        ax.set_title(f"{variant} — {P.describe(sub)}")
        for d in depths:
            at = sub[sub["depth"] == d]
            if at.empty:
                continue
            chosen = P.pick_config(at)
            x, y = P.mean_curves(chosen, "train")
            if x.size:
                ax.plot(x, P.pct(y), color=colour(scale(d)), linewidth=1.2,
                        label=f"{d} layers ({P.seed_range(chosen)})")
        ax.legend(loc="lower right", title="depth")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("train accuracy (%)")
    fig.suptitle(title)
    return fig


ARTIFACT = Artifact(name="fig3", paper="lipschitznorm", title="Fig. 3: train accuracy vs epoch by depth",
                    experiments=("fig3",), needs_history=True, figure=figure)
