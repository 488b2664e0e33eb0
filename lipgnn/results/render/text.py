"""Deterministic text for numbers and value sets (captions, cells), and GitHub-flavoured Markdown tables."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def joined(values: pd.Series) -> str:
    """Sorted distinct non-missing values, comma-separated (deterministic caption text)."""
    seen = set()
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            continue
        seen.add(v)
    return ", ".join(fmt_value(v) for v in sorted(seen, key=_sort_key))


def _sort_key(value: object) -> tuple:
    return (0, float(value), "") if isinstance(value, (int, float, np.number)) else (1, 0.0, str(value))


def fmt_value(value: object) -> str:
    """``true``/``false``, integral floats without ``.0``, other floats in ``%g``, anything else ``str``."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def ranges(values: list[int]) -> str:
    """[0, 1, 2, 4] -> '0-2, 4'."""
    if not values:
        return "-"
    parts, start, prev = [], values[0], values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)


def pct(value: float) -> str:
    """A fraction in percent with one decimal, ``-`` when not finite. A value just below 1 prints as
    ``99.9``, not the ``100.0`` rounding would give: 100 % is a claim of its own (Alon & Yahav's stopping
    rule), which a run at 99.999 % has not met."""
    if not math.isfinite(value):
        return "-"
    return "99.9" if 0.9995 <= value < 1.0 else f"{100.0 * value:.1f}"


def sci(value: float) -> str:
    return f"{value:.2e}" if math.isfinite(value) else "-"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table, first column left-aligned, the others centred."""
    # Written by hand: pandas' to_markdown needs the optional `tabulate` package; the layout is a plain grid.
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + [":---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def md_cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell: a ``|`` would end the cell, so it is escaped."""
    return str(text).replace("|", "\\|")


def effect_text(claim: Any) -> tuple[str, str]:
    """(the paper's effect, ours with its interval) in points of a comparative claim (its ``scale``:
    :class:`lipgnn.results.verdict.Scale`); ``direction`` when the paper prints no number, ``-`` without a scale."""
    scale = getattr(claim, "scale", None)
    if scale is None:
        return "-", "-"
    paper = "direction" if scale.paper is None else f"{100 * scale.paper:+.1f}"
    effect = scale.effect
    if effect.n == 0:
        return paper, "-"
    if not math.isfinite(effect.lo):
        return paper, f"{100 * effect.mean:+.1f}"
    return paper, f"{100 * effect.mean:+.1f} [{100 * effect.lo:+.1f}, {100 * effect.hi:+.1f}]"


def claims_table(claims: list) -> str:
    """An artifact's verdict objects (:class:`lipgnn.results.verdict.Claim`) as a markdown table: the one
    renderer of an artifact's claims block in its paper's part (``lipgnn.results.report``)."""
    if not claims:
        return "no claims\n"
    rows = [[f"“{md_cell(c.quote)}”", md_cell(c.section), *effect_text(c), f"**{c.verdict}**", md_cell(c.evidence),
             str(c.n_runs), md_cell(getattr(c, "protocol", "") or "-")] for c in claims]
    return "\n".join(md_table(["claim", "where", "paper's effect", "our effect", "verdict", "evidence", "runs",
                               "our budget vs the paper's"], rows)) + "\n"
