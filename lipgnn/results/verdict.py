"""Verdict objects: one paper claim, tested against our runs, as data rather than a sentence."""

from __future__ import annotations

from dataclasses import dataclass

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
TIE = "tie"
TOO_FEW_SEEDS = "too few seeds"
UNDER_BUDGET = "under budget"
NOT_RUN = "not run"
HOLDS_IN_PART = "holds in part"
CANNOT_JUDGE = "cannot be judged"

VERDICTS = (HOLDS, DOES_NOT_HOLD, TIE, TOO_FEW_SEEDS, UNDER_BUDGET, NOT_RUN, HOLDS_IN_PART, CANNOT_JUDGE)


@dataclass(frozen=True)
class Claim:
    """A paper's claim and our verdict on it.

    ``quote`` is the paper's own words, ``section`` where they stand (e.g. '§6.2'), ``verdict`` one of the
    constants above, ``evidence`` one line of our numbers, ``n_runs`` the records the verdict rests on and
    ``anchor`` the report anchor (or link target) where the evidence is shown. Optional: ``n_seeds`` the seeds
    the verdict rests on (None: the report counts the artifact's seeds), ``p_value`` the two-sided p-value of
    the paired test behind a comparison (None: no such test; the claim stays out of the Holm family) and
    ``protocol`` the distance of its runs from the paper's protocol (set by the report), ``dirty`` the run ids of
    the records behind it written with uncommitted changes (None: the report reads the artifact's records).
    """

    paper: str
    section: str
    quote: str
    verdict: str
    evidence: str
    n_runs: int
    anchor: str
    n_seeds: int | None = None
    p_value: float | None = None
    protocol: str = ""
    dirty: tuple[str, ...] | None = None
    dirty_scope: str = "claim"   # "claim": records the verdict compares; "artifact": any record of its artifact
