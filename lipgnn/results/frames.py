r"""Energy records → tidy frames and fits, shared by the gh_energy, gh_evolution and depth_energy artifacts.

Each artifact callable receives the records' DataFrame (columns include ``status``, ``config`` and
``diagnostics``); :func:`energy_frame` turns it into one row per record with the per-layer energies of
Guan & He §2, :math:`\mathcal{E}_2(X^k) = \frac{1}{n}\sum_i |\Delta_\mu X^k(i)|^2 \mu_i`.

Decay laws (§4.1, Figs. 1 and 4), fitted by least squares on :math:`k = 1, \dots, L`:

.. math::
    \text{power law / algebraic:}\; \log \mathcal{E}(X^k) = a + p \log k, \qquad
    \text{exponential:}\; \log \mathcal{E}(X^k) = b - c\, k

The better law is the one with the larger :math:`R^2`; a power law with :math:`p < 0` is the paper's
"algebraic decay", with :math:`p > 0` its "power-law growth".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

#: The paper's names of the three SAN architectures.
ARCHITECTURES: tuple[str, ...] = ("pre", "post", "nonlocal")
ARCH_LABELS = {"pre": "Pre-LN SAN", "post": "Post-LN SAN", "nonlocal": "nonlocal SAN (Post-LN)"}
#: Values at or below this are taken as float32 round-off (no log-fit uses them).
FLOOR = 1e-30


def _get(cfg: Mapping[str, Any] | None, dotted: str, default: Any = None) -> Any:
    node: Any = cfg or {}
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return default if node is None else node


def architecture(cfg: Mapping[str, Any]) -> str:
    """``pre`` | ``post`` | ``nonlocal`` for SANs (nonlocal = nonlocal Post-LN); other models
    ``<model>[-<layer_norm>ln][-nl]``."""
    model = str(_get(cfg, "model.name", ""))
    placement = str(_get(cfg, "model.layer_norm", "none"))
    nonlocal_mp = bool(_get(cfg, "model.nonlocal", False))
    if model == "san" and placement in ("pre", "post") and not (nonlocal_mp and placement == "pre"):
        return "nonlocal" if nonlocal_mp else placement
    return model + (f"-{placement}ln" if placement != "none" else "") + ("-nl" if nonlocal_mp else "")


def energy_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per completed record carrying energies: architecture, model, norm, dataset, depth, seed, init,
    features, encoder (linear layers of SAN's encoder), width, and ``init_lap`` / ``init_dir`` / ``trained_lap`` /
    ``trained_dir`` (lists over k)."""
    rows = []
    for _, rec in df.iterrows():
        diag = rec.get("diagnostics") or {}
        energy = diag.get("energy") if isinstance(diag, Mapping) else None
        if rec.get("status") != "completed" or not energy:
            continue
        cfg = rec.get("config") or {}
        init = energy.get("init") or {}
        trained = energy.get("trained") or {}
        rows.append({
            "architecture": architecture(cfg),
            "model": _get(cfg, "model.name"),
            "norm": _get(cfg, "norm.name", "none"),
            "dataset": _get(cfg, "dataset.name"),
            "depth": int(_get(cfg, "depth", 0)),
            "seed": int(_get(cfg, "seed", 0)),
            "init": str(_get(cfg, "model.init", "default")),
            "features": str(_get(cfg, "energy.features", "raw")),
            "encoder": int(_get(cfg, "model.encoder_layers", 2)),  # SAN's encoder depth; absent: 2, as before the key
            "epochs": _get(cfg, "train.epochs"),
            "width": int(energy.get("width") or 0),
            "init_lap": _floats(init.get("laplacian")),
            "init_dir": _floats(init.get("dirichlet")),
            "trained_lap": _floats(trained.get("laplacian")),
            "trained_dir": _floats(trained.get("dirichlet")),
            "best_test": rec.get("best_test"),
            "last_train": rec.get("last_train"),
            "commit": rec.get("git_commit") if "git_commit" in rec else None,
        })
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["final"] = [lap[-1] if lap else math.nan for lap in frame["init_lap"]]
    return frame


def _floats(values: Iterable[Any] | None) -> list[float]:
    return [math.nan if v is None else float(v) for v in (values or [])]


def geo_stats(values: Iterable[float]) -> tuple[float, float, float, int]:
    """(geometric mean, min, max, count) of the finite values; a zero makes the geometric mean 0."""
    arr = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return math.nan, math.nan, math.nan, 0
    mean = 0.0 if (arr <= 0).any() else float(stats.gmean(arr))
    return mean, float(arr.min()), float(arr.max()), int(arr.size)


def fit_laws(energies: Iterable[float], start: int = 1) -> dict[str, Any]:
    r"""Both least-squares fits on :math:`k = \text{start}..L` (module docstring): ``power_slope`` :math:`p`,
    ``power_r2``, ``exp_rate`` :math:`c` (per layer; decay when > 0), ``exp_r2``, and ``better``
    (``exponential`` | ``power law``). Layers at or below :data:`FLOOR` are left out."""
    values = np.array(list(energies), dtype=float)
    k = np.arange(len(values), dtype=float)
    keep = (k >= max(1, start)) & np.isfinite(values) & (values > FLOOR)
    if keep.sum() < 3:
        return {"power_slope": math.nan, "power_r2": math.nan, "exp_rate": math.nan, "exp_r2": math.nan,
                "better": "n/a", "layers_fitted": int(keep.sum())}
    log_e = np.log(values[keep])
    power = stats.linregress(np.log(k[keep]), log_e)
    expo = stats.linregress(k[keep], log_e)
    return {
        "power_slope": float(power.slope), "power_r2": float(power.rvalue ** 2),
        "exp_rate": float(-expo.slope), "exp_r2": float(expo.rvalue ** 2),
        "better": "exponential" if expo.rvalue ** 2 > power.rvalue ** 2 else "power law",
        "layers_fitted": int(keep.sum()),
    }


def law_name(fit: Mapping[str, Any]) -> str:
    """The paper's word for a fit: exponential decay | algebraic decay | power-law growth | ..."""
    if fit.get("better") == "exponential":
        return "exponential decay" if fit["exp_rate"] > 0 else "exponential growth"
    if fit.get("better") == "power law":
        return "power-law growth" if fit["power_slope"] > 0 else "algebraic decay"
    return "n/a"


def geomean_profile(profiles: Iterable[list[float]]) -> list[float]:
    """Layer-wise geometric mean over seeds of equally long energy profiles (zeros give 0)."""
    arr = np.array([p for p in profiles if p], dtype=float)
    if arr.size == 0:
        return []
    with np.errstate(divide="ignore"):
        out = np.exp(np.log(np.where(arr > 0, arr, np.nan)).mean(axis=0))
    out[(arr <= 0).any(axis=0)] = 0.0
    return [float(v) for v in out]


def sci(value: float, digits: int = 2) -> str:
    """``1.23e-05`` style, ``—`` for nan."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}e}"


__all__ = ["ARCHITECTURES", "ARCH_LABELS", "architecture", "energy_frame", "fit_laws", "geo_stats",
           "geomean_profile", "law_name", "sci"]
