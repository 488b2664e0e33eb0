"""Helpers shared by Kim et al.'s artifacts: unpacking diagnostic records, slopes, table text."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pandas as pd

PAPER = "kim"
KIM = "Kim, Papamakarios & Mnih, The Lipschitz Constant of Self-Attention"


def completed(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty or "status" not in frame:
        return frame.iloc[0:0]
    return frame[frame["status"] == "completed"].reset_index(drop=True)


def payloads(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The ``diagnostics`` dict of every completed record (with its ``config`` under ``_config``)."""
    rows = []
    for _, row in completed(frame).iterrows():
        diag = row.get("diagnostics") or {}
        if isinstance(diag, dict) and diag:
            rows.append({**diag, "_config": row.get("config") or {}})
    return rows


def budget_of(frame: pd.DataFrame) -> str:
    configs = [row.get("config") or {} for _, row in completed(frame).iterrows()]
    names = sorted({str((cfg.get("budget") or {}).get("name")) for cfg in configs})
    return ",".join(names) if names else "none"


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of y against x (nan with fewer than two finite points)."""
    pts = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if len(pts) < 2:
        return math.nan
    xs, ys = np.array(pts).T
    return float(np.polyfit(xs, ys, 1)[0])


def csv_text(table: pd.DataFrame) -> str:
    buf = io.StringIO()
    table.to_csv(buf, index=False, float_format="%.6g", lineterminator="\n")
    return buf.getvalue()


def md_text(table: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    """A GitHub markdown table (hand-built: pandas' to_markdown needs the optional tabulate package)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else ("∞" if math.isinf(v) else floatfmt.format(v))
        return str(v)

    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def tex_text(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    body = [" & ".join(str(c).replace("_", r"\_") for c in cols) + r" \\ \hline"]
    for row in table.itertuples(index=False):
        body.append(" & ".join(f"{v:.4g}" if isinstance(v, float) else str(v).replace("_", r"\_") for v in row)
                    + r" \\")
    return "\\begin{tabular}{" + "l" * len(cols) + "}\n" + "\n".join(body) + "\n\\end{tabular}\n"


def outputs(table: pd.DataFrame) -> dict[str, str]:
    return {"csv": csv_text(table), "md": md_text(table), "tex": tex_text(table)}

