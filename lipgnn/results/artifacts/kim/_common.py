"""Helpers shared by Kim et al.'s artifacts: unpacking diagnostic records, slopes, table text."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from lipgnn.results.verdict import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS, HOLDS_IN_PART, Claim

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


def seed_of(payload: dict[str, Any]) -> int:
    """The seed of a record's payload (``payloads``), 0 when its config names none."""
    return int((payload.get("_config") or {}).get("seed", 0) or 0)


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



def by_seed(claims: Callable[[pd.DataFrame], list[Claim]]) -> Callable[[pd.DataFrame], list[Claim]]:
    """``claims`` judged on each seed's records alone, then combined claim by claim (same section and quote):
    the same verdict on every seed is the verdict; "holds" on some seeds and "does not hold" on others is
    "holds in part"; any other mix "cannot be judged". The evidence is the first seed's, followed by the verdict
    per seed; ``n_seeds`` is the number of seeds, so the report's seed rule (``stats.seed_rule``) reads it."""

    def combined(records: pd.DataFrame) -> list[Claim]:
        done = completed(records)
        seeds = sorted(int(s) for s in done["seed"].dropna().unique()) if "seed" in done else []
        if len(seeds) <= 1:
            return [replace(c, n_seeds=len(seeds) or None) for c in claims(records)]
        per_seed = {s: claims(records[records["seed"] == s]) for s in seeds}
        order = list(dict.fromkeys((c.section, c.quote) for cs in per_seed.values() for c in cs))
        out = []
        for key in order:
            mine = {s: c for s, cs in per_seed.items() for c in cs if (c.section, c.quote) == key}
            verdicts = {c.verdict for c in mine.values()}
            if len(verdicts) == 1:
                verdict = verdicts.pop()
            elif verdicts <= {HOLDS, DOES_NOT_HOLD}:
                verdict = HOLDS_IN_PART
            else:
                verdict = CANNOT_JUDGE
            first = mine[min(mine)]
            per = ", ".join(f"seed {s}: {c.verdict}" for s, c in sorted(mine.items()))
            out.append(replace(first, verdict=verdict, evidence=f"{first.evidence.rstrip('.')} (seed {min(mine)}); "
                               f"per seed: {per}", n_runs=sum(c.n_runs for c in mine.values()), n_seeds=len(mine)))
        return out

    return combined
