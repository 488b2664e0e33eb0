"""A block's verdicts grouped by outcome, one generated summary line (so no report prose carries a number)."""

from __future__ import annotations

from collections.abc import Iterable

from lipgnn.results.reporting import Finding
from lipgnn.results.verdict import VERDICTS


def by_verdict(findings: Iterable[Finding], strip: str = "") -> str:
    """``**holds** (2): a | b; **tie** (1): c`` over ``findings`` (labels without the prefix ``strip``), in the order of
    ``verdict.VERDICTS``; ``-`` when there are none."""
    groups: dict[str, list[str]] = {}
    for f in findings:
        label = f.label[len(strip):] if strip and f.label.startswith(strip) else f.label
        groups.setdefault(f.verdict, []).append(label or "overall")
    order = [v for v in VERDICTS if v in groups] + sorted(set(groups) - set(VERDICTS))
    return "; ".join(f"**{v}** ({len(groups[v])}): {' | '.join(groups[v])}" for v in order) or "-"
