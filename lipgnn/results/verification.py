"""The report's verification block, from ``lipgnn verify``'s last run (``<results_dir>/verify/verify.json``).

The analysis layer reads verify's JSON summary only; rerunning records is ``lipgnn.verify``'s job (an entry point).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _largest(change: Mapping[str, Any] | None, worst: float | None) -> str:
    if not change:
        return ""
    sd = change.get("seed_std")
    text = (f"The largest change of a reported accuracy is {100 * change['delta']:+.1f} points (`{change['record']}`; "
            + ("its cell's seed sd is not known" if sd is None else f"its cell's seed sd is {100 * sd:.1f} points")
            + ")")
    return text + (f"; the largest change against its cell's seed sd is {worst:.2g} sd. " if worst else ". ")


def report_block(results_dir: str | os.PathLike) -> str:
    """The report's verification section, from ``<results_dir>/verify/verify.json`` (verify's last run)."""
    path = Path(results_dir) / "verify" / "verify.json"
    if not path.is_file():
        return "`lipgnn verify`: not run on these records yet (`make verify` writes `results/verify/`)."
    report = json.loads(path.read_text())
    s = report["summary"]
    worst = s["largest_change_in_spreads"]
    return (f"`lipgnn verify` ({report['selection']}) reran {s['rerun']} committed record(s) on {report['machine']} "
            f"at commit `{str(report['commit'])[:7]}`: {s['identical']} identical, {s['different']} different"
            + (f", {s['other_threads']} with the same numbers at another or an unrecorded thread count"
               if s["other_threads"] else "")
            + (f", {s['not_rerun']} not rerun" if s["not_rerun"] else "") + ". "
            + _largest(s.get("largest_accuracy_change"), worst)
            + (f"Table cells changed: {', '.join(s['table_cells_changed'])}. " if s["table_cells_changed"] else "")
            + ("What can explain the differences: " + "; ".join(f"{n} {c}" for c, n in s["causes"].items()) + ". "
               if s.get("causes") else "")
            + (f"Verdicts changed: {', '.join(s['verdicts_changed'])}." if s["verdicts_changed"]
               else "No verdict would change.")
            + " Per record: `results/verify/verify.md`.")
