"""``lipgnn summarize <results_dir>``: any folder of run records as a table and a figure, no paper needed.

One row per configuration (the runs sharing :func:`lipgnn.identity.config_key`, i.e. the seeds of one
grid point): its experiment, model, norm, dataset, depth, the keys in which it differs from the other
configurations of its experiment, the number of finished runs, and mean ± std (over seeds, sample std)
of the test metric at the best-validation epoch and at the last epoch. Written as ``summary.csv`` and
``summary.md``; ``curves.png`` draws each run's validation and test curves over epochs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lipgnn.errors import ConfigError


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def _mean_std(stats: Any) -> str:
    """``mean ± std`` of one aggregated row (``count``, ``mean``, ``std`` in %); the mean alone for one run."""
    if not stats["count"]:
        return "—"
    return f"{stats['mean']:.1f}" if stats["count"] == 1 else f"{stats['mean']:.1f} ± {stats['std']:.1f}"


def _shown(value: Any) -> str:
    """A config value as written: ``30`` rather than the ``30.0`` of a float column."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def summary_table(frame: Any) -> Any:
    """The per-configuration table (a DataFrame) of the records in ``frame`` (``load_records``' rows)."""
    import pandas as pd

    from lipgnn.identity import config_key, identity_config

    frame = frame.assign(key=[config_key(c) for c in frame["config"]],
                         best_pct=100 * frame["best_test"], last_pct=100 * frame["last_test"])
    done = frame[frame["status"].isin(["completed", "diverged"])]
    # Over seeds: count of finite values, mean and sample std (ddof=1), in %.
    stats = done.groupby("key")[["best_pct", "last_pct"]].agg(["count", "mean", "std"])
    rows = []
    for experiment, runs in frame.groupby("experiment", sort=True):
        flats = {k: _flat(identity_config(g.iloc[0]["config"], seed=False)) for k, g in runs.groupby("key")}
        keys = sorted({k for f in flats.values() for k in f})
        varying = [k for k in keys if len({repr(f.get(k)) for f in flats.values()}) > 1
                   and k not in ("model.name", "norm.name", "dataset.name", "depth")]
        for key, group in runs.groupby("key", sort=True):
            first = group.iloc[0]
            written = _flat(first["config"])  # the record's own values (identity_config makes numbers floats)
            cell = stats.loc[key] if key in stats.index else None
            rows.append({
                "experiment": experiment, "model": first["model"], "norm": first["norm"],
                "dataset": first["dataset"], "depth": _shown(first["depth"]),
                "differs in": ", ".join(f"{k}={written[k] if k in written else _shown(flats[key][k])}"
                                        for k in varying if k in flats[key]),
                "runs": int(group["status"].isin(["completed", "diverged"]).sum()),
                "diverged": int((group["status"] == "diverged").sum()),
                "test @ best val (%)": "—" if cell is None else _mean_std(cell["best_pct"]),
                "last test (%)": "—" if cell is None else _mean_std(cell["last_pct"]), "config_key": key,
            })
    return pd.DataFrame(rows)


def curves_figure(frame: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    experiments = sorted(frame["experiment"].unique())
    fig, axes = plt.subplots(len(experiments), 2, figsize=(11, 3.2 * len(experiments)), squeeze=False)
    for row, experiment in zip(axes, experiments, strict=True):
        for _, run in frame[frame["experiment"] == experiment].iterrows():
            history = run["history"] or {}
            for ax, split in zip(row, ("val", "test"), strict=True):
                if history.get("epoch") and history.get(split):
                    values = [math.nan if v is None else 100 * v for v in history[split]]
                    ax.plot(history["epoch"], values, lw=1, label=run["run_id"])
        for ax, split in zip(row, ("val", "test"), strict=True):
            ax.set(title=f"{experiment}: {split} metric per run", xlabel="epoch", ylabel=f"{split} (%)")
        if len(frame[frame["experiment"] == experiment]) <= 12:
            row[1].legend(fontsize=6)
    fig.tight_layout()
    return fig


def summarize(results_dir: str | Path, experiment: str | None = None, out: str | Path | None = None) -> int:
    from lipgnn.store import load_records

    frame = load_records(results_dir, experiment)
    if frame.empty:
        raise ConfigError(f"no run records under {Path(results_dir) / 'runs'}"
                          f"{'/' + experiment if experiment else ''}; give the results_dir the runs wrote to")
    out_dir = Path(out) if out is not None else Path(results_dir) / "summary"
    out_dir.mkdir(parents=True, exist_ok=True)
    table = summary_table(frame)
    table.to_csv(out_dir / "summary.csv", index=False)
    markdown = table.drop(columns=["config_key"]).to_markdown(index=False)  # a GitHub table (tabulate)
    (out_dir / "summary.md").write_text(markdown + "\n", encoding="utf-8")
    fig = curves_figure(frame)
    fig.savefig(out_dir / "curves.png", dpi=120)
    print(table.drop(columns=["config_key"]).to_string(index=False))
    print(f"\nwrote {out_dir / 'summary.csv'}, {out_dir / 'summary.md'} and {out_dir / 'curves.png'}")
    return 0

