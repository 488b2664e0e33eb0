r"""The one-line reading of a :func:`lipgnn.diagnostics.diagnose` table: smoothing and scale judged apart.

The raw Dirichlet energy mixes two things: :math:`\mathcal{E}_1(cX) = c^2 \mathcal{E}_1(X)`, so it rises when
the features grow even while they become more alike, and falls when they shrink even while they stay apart.
The summary therefore reads, from the input features (layer 0) to the last message-passing layer:

* **smoothing**, from the scale-free quantities: the Rayleigh quotient :math:`\mathcal{R} = \mathcal{E}/\|X\|^2`
  and MAD (:mod:`lipgnn.diagnostics.measures`). Both are needed: attention layers average towards equal rows
  (:math:`\mathcal{R} \to 0`), while GCN's normalised propagation converges to rows proportional to
  :math:`\sqrt{\deg_i + 1}` (Oono & Suzuki 2020; Cai & Wang 2020), a limit of non-zero
  :math:`\mathcal{R}` in which all rows still point the same way (MAD :math:`\to 0`).

  - ``over-smoothing``: MAD at the last layer at most :data:`OVER_SMOOTHING` times its layer-0 value, or
    :math:`\mathcal{R}` as low;
  - ``smoothing``: either falls by :data:`SMOOTHING` times or more;
  - ``no smoothing``: neither.

* **scale**, from the feature norm :math:`\sqrt{\|X\|_F^2 / n}`:

  - ``over-scaling``: it grows :data:`SCALE` times or more;
  - ``features shrink``: it falls :data:`SCALE` times or more;
  - ``scale stable``: neither.

Rates ("halves every k layers") come from a least-squares line through :math:`\log_2` of the quantity over
the layers. The thresholds are round orders of magnitude, not fitted to any model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

#: Last-layer MAD (or Rayleigh quotient) at most this fraction of layer 0's: over-smoothing.
OVER_SMOOTHING = 0.1
#: A fall of MAD or the Rayleigh quotient by this factor or more: smoothing.
SMOOTHING = 2.0
#: A change of the feature norm by this factor or more either way: over-scaling / features shrink.
SCALE = 10.0


def energy_ratio(dirichlet: Sequence[float]) -> float:
    """``dirichlet[0] / dirichlet[-1]``: how many times the energy falls from the first message-passing layer
    to the last (``inf`` when the last is 0, ``nan`` when the first is)."""
    first, last = float(dirichlet[0]), float(dirichlet[-1])
    if not first > 0:
        return math.nan
    return math.inf if last <= 0 else first / last


def times(ratio: float) -> str:
    """``ratio`` for a person: ``6.5x``, ``10^5x``, ``2.6·10^5x``."""
    if ratio < 1000:
        return f"{ratio:.3g}x"
    exponent = math.floor(math.log10(ratio))
    mantissa = ratio / 10 ** exponent
    return f"10^{exponent}x" if mantissa < 1.5 else f"{mantissa:.1f}·10^{exponent}x"


def log2_slope(values: Sequence[float]) -> float:
    """Least-squares slope of :math:`\\log_2` ``values`` against the layer index (``nan`` below 2 values)."""
    logs = [math.log2(max(float(v), 1e-300)) for v in values]
    n = len(logs)
    if n < 2:
        return math.nan
    mean_x, mean_y = (n - 1) / 2, sum(logs) / n
    return sum((i - mean_x) * (y - mean_y) for i, y in enumerate(logs)) / sum((i - mean_x) ** 2 for i in range(n))


def _count(layers: float) -> str:
    """``0.48``, ``3.1``, ``15``, ``120``: two significant digits, without an exponent."""
    return f"{layers:.0f}" if layers >= 100 else f"{layers:.2g}"


def _change(values: Sequence[float], name: str, first: str, last: str) -> str:
    """``name falls 6.5x from layer 0 to 10, halving every 3.1 layers`` (or rises / doubling)."""
    a, b = float(values[0]), float(values[-1])
    slope = log2_slope(values)
    if b <= 0:
        return f"{name} falls to 0 from layer {first} to {last}"
    if b <= a:
        rate = f", halving every {_count(-1 / slope)} layers" if slope < 0 else ""
        return f"{name} falls {times(a / b)} from layer {first} to {last}{rate}"
    rate = f", doubling every {_count(1 / slope)} layers" if slope > 0 else ""
    return f"{name} rises {times(b / a)} from layer {first} to {last}{rate}"


def smoothing_verdict(rayleigh: Sequence[float], mad: Sequence[float]) -> str:
    """``over-smoothing`` | ``smoothing`` | ``no smoothing`` (module docstring) from first and last values."""
    falls = []
    for values in (rayleigh, mad):
        a, b = float(values[0]), float(values[-1])
        if a > 0 and math.isfinite(a) and math.isfinite(b):
            falls.append(b / a)
    if any(f <= OVER_SMOOTHING for f in falls):
        return "over-smoothing"
    if any(f <= 1 / SMOOTHING for f in falls):
        return "smoothing"
    return "no smoothing"


def scale_verdict(norms: Sequence[float]) -> str:
    """``over-scaling`` | ``features shrink`` | ``scale stable`` (module docstring)."""
    a, b = float(norms[0]), float(norms[-1])
    if not a > 0 or b >= a * SCALE:
        return "over-scaling" if b > 0 else "scale stable"
    return "features shrink" if b <= a / SCALE else "scale stable"


def _finite(df: pd.DataFrame, column: str) -> list[float]:
    return [float(v) for v in df[column] if v is not None and math.isfinite(float(v))]


def summarise(df: pd.DataFrame, *, baseline: float = math.nan) -> str:
    """One line from a diagnose table (rows in depth order, layer 0 first where measured): smoothing from the
    Rayleigh quotient and MAD, scale from the feature norm, the raw energy's change, the last layer's group
    ratio against its no-separation ``baseline``, and the largest attention gradient and Lipschitz bound."""
    measured = df[df["rayleigh"].notna() | df["mad"].notna()]
    parts: list[str] = []
    if len(measured) >= 2:
        first, last = str(measured["depth"].iloc[0]), str(measured["depth"].iloc[-1])
        rayleigh, mad = _finite(measured, "rayleigh"), _finite(measured, "mad")
        norms = _finite(measured, "feature_norm")
        smooth = []
        if len(rayleigh) >= 2:
            smooth.append(_change(rayleigh, "energy/|X|^2", first, last))
        if len(mad) >= 2:
            smooth.append(f"MAD {mad[0]:.2g} -> {mad[-1]:.2g}")
        parts.append(f"{', '.join(smooth)}: {smoothing_verdict(rayleigh or [math.nan], mad or [math.nan])}")
        if len(norms) >= 2:
            parts.append(f"{_change(norms, 'feature norm', first, last)}: {scale_verdict(norms)}")
        energies = _finite(measured, "dirichlet")
        if len(energies) >= 2:
            parts.append(_change(energies, "raw energy", first, last).split(", ")[0]
                         + " (scale and smoothing together)")
    elif len(measured) == 1:
        parts.append(f"energy/|X|^2 {float(measured['rayleigh'].iloc[0]):.3g} at layer {measured['depth'].iloc[0]} "
                     "(one layer: nothing to compare)")
    ratios = df["group_ratio"].dropna()
    if len(ratios):
        parts.append(f"group ratio {float(ratios.iloc[-1]):.3g} at layer {df['depth'][ratios.index[-1]]} "
                     f"(no-separation baseline {baseline:.3g})")
    for col, what in (("attn_grad_norm", "attention gradients reach"), ("lipschitz_lower", "Lipschitz lower bound")):
        values = df[col].dropna()
        if len(values):
            parts.append(f"{what} {float(values.max()):.2g} at layer {df['depth'][values.idxmax()]}")
    return "; ".join(parts) if parts else "no message-passing output to measure"


__all__ = ["OVER_SMOOTHING", "SCALE", "SMOOTHING", "energy_ratio", "log2_slope", "scale_verdict",
           "smoothing_verdict", "summarise", "times"]
