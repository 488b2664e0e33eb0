"""The reproduction report: hand-written discussion around number blocks regenerated from run records.

``results/REPRODUCTION.md`` is the entry point and the LipschitzNorm paper's part; every other paper has its
own part, ``results/reproduction/<paper>.md`` (``REPORT_FILES``). Each number block lives between two marker
lines (``render.markers``)::

    <!-- auto:claim-residual -->
    ... regenerated ...
    <!-- /auto:claim-residual -->

A paper's blocks are its artifacts' ``report()`` bodies plus the run inventory (``protocol``). An artifact's
claims are computed once per record load (``artifact_claims``) and rendered by one renderer
(``render.text.claims_table``): as its own ``<artifact>-claims`` block in its paper's part (every paper but the
main one, whose part is the claims index itself) and as rows of the index of every paper's claims (``claims``,
in the main part).
``update_report`` rewrites only the content between the markers of known blocks; every other byte (headings,
discussion, unknown ``auto`` blocks) is left as it was. A missing part is created as a skeleton holding every
block under its artifact's heading. The output has no timestamps and a fixed order: identical records give a
byte-identical report.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from lipgnn.errors import ConfigError
from lipgnn.results import registry
from lipgnn.results.artifact import Artifact
from lipgnn.results.engine import Loader
from lipgnn.results.labels import NOT_RUN_BUDGET
from lipgnn.results.paper_protocol import claim_distance, distance
from lipgnn.results.render.markers import close_marker, open_marker, replace_blocks
from lipgnn.results.render.text import claims_table, effect_text, md_cell, md_table
from lipgnn.results.reporting import dirty_ids, short_commit, summary
from lipgnn.results.stats import LEGEND as STATS_LEGEND
from lipgnn.results.stats import LEVEL, MIN_SEEDS, bh_adjusted, holm_adjusted, seed_rule
from lipgnn.results.verdict import DECISIVE as SCALE_DECISIVE
from lipgnn.results.verdict import DOES_NOT_HOLD, HOLDS, HOLDS_IN_PART, TIE, Claim
from lipgnn.results.verification import report_block as verify_report_block
from lipgnn.store import _atomic_write_text, record_paths

log = logging.getLogger("lipgnn.results")

MAIN_PAPER = "lipschitznorm"
REPORT_NAME = "REPRODUCTION.md"
# Where each paper's part lives, relative to the results folder.
REPORT_FILES = {"lipschitznorm": REPORT_NAME, "guan_he": "reproduction/guan_he.md", "kim": "reproduction/kim.md"}
PAPER_TITLES = {
    "lipschitznorm": "LipschitzNorm (Dasoulas, Scaman & Virmaux, ICML 2021)",
    "guan_he": "Guan & He: nonlocal message passing, Pre-/Post-LN attention and over-smoothing energies",
    "kim": "Kim et al.: L2 self-attention and its Lipschitz bounds",
}
PROTOCOL_BLOCK = "protocol"
CLAIMS_BLOCK = "claims"
#: An artifact's own claims block in its paper's part: ``<artifact name><CLAIMS_SUFFIX>``.
CLAIMS_SUFFIX = "-claims"
PAPER_SHORT = {"lipschitznorm": "LipschitzNorm", "guan_he": "Guan & He", "kim": "Kim et al."}
PLACEHOLDER = "_(discussion to be written)_"


def report_path(results_dir: str | os.PathLike, paper: str = MAIN_PAPER) -> Path:
    return Path(results_dir) / REPORT_FILES.get(paper, f"reproduction/{paper}.md")


def paper_artifacts(paper: str) -> list[Artifact]:
    return [a for a in registry.artifacts() if a.paper == paper and a.report is not None]


def paper_experiments(paper: str) -> list[str]:
    """The record folders a paper's artifacts read, in registry order."""
    return list(dict.fromkeys(e for a in registry.artifacts() if a.paper == paper for e in a.experiments))


# ------------------------------------------------------------------------------------------ inventory


def block_protocol(loader: Loader, paper: str = MAIN_PAPER) -> str:
    """Per experiment folder: records by status, budgets, epochs, seeds, selection rule, git commits.

    The main paper's inventory also lists folders no artifact reads, so no record goes unnoticed.
    """
    runs_dir = loader.results_dir / "runs"
    folders = sorted(p.name for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if runs_dir.is_dir() else []
    experiments = paper_experiments(paper)
    order = list(experiments)
    if paper == MAIN_PAPER:
        claimed = {e for a in registry.artifacts() for e in a.experiments}
        order += [f for f in folders if f not in claimed]
    header = ["experiment", "records", "completed", "diverged", "failed", "budget", "epochs (run)", "seeds",
              "selection", "wall time (h)", "git commits"]
    rows, notes = [], []
    for exp in order:
        if exp not in folders:
            rows.append([exp, NOT_RUN_BUDGET] + ["-"] * (len(header) - 2))
            continue
        df = loader.experiment(exp)
        skipped = len(record_paths(loader.results_dir, exp)) - len(df)
        if skipped:
            notes.append(f"- `runs/{exp}/`: {skipped} file(s) skipped (unreadable JSON, not a lipgnn record, "
                         "or another experiment's record; the log names them).")
        if df.empty:
            rows.append([exp, "0"] + ["-"] * (len(header) - 2))
            continue
        s = summary(df)
        commit_text = provenance_text(df["git_commit"])
        outside = df[~df["in_grid"].astype(bool)] if "in_grid" in df else df.iloc[:0]
        if not outside.empty:
            ids = ", ".join(f"`{r}`" for r in sorted(outside["run_id"])[:5]) + (", …" if len(outside) > 5 else "")
            notes.append(f"- `runs/{exp}/`: {len(outside)} record(s) outside the grid declared in "
                         f"`conf/grid/{exp}_<budget>.yaml`, left out of every cell and verdict: {ids}.")
        rows.append([exp, s["records"], s["completed"], s["diverged"], s["failed"], s["budget"],
                     f"{s['epochs']} ({s['epochs_run']})", s["seeds"], s["selection"], s["hours"], commit_text])
    lines = md_table(header, rows)
    lines += ["", "- Selection rule per run: `best_val` = metrics at the epoch of best validation (the paper's "
              "text); `last` = metrics at the last epoch (the authors' code). Per table cell and figure point, "
              "the configuration (hyper-parameters, and for Tables 1–2 the depth) with the best mean "
              "validation metric is selected; its test metric is reported as mean ± sample std over its "
              "non-diverged seeds. Diverged runs (non-finite loss or metric) are excluded and counted; "
              "failed runs (crashes) are ignored.",
              "- git commits: the range of commits that wrote the records (oldest … newest in the repository's "
              "history when it is available) and how many records were written with uncommitted changes "
              "(`-dirty`).",
              "- Budgets: `paper` = the paper's grid (§10); `cpu` = the reduced grid each "
              "`conf/grid/<experiment>_cpu.yaml` documents."]
    lines += notes
    return "\n".join(lines)


def _history_order() -> dict[str, int]:
    """Position of each commit in this repository's history (newest first); empty without git."""
    try:
        out = subprocess.run(["git", "log", "--format=%H", "--all"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {sha: i for i, sha in enumerate(out)}


def provenance_text(commits: pd.Series) -> str:
    """``a1b2c3d4e5 … f6a7b8c9d0 (7 commits); 31 -dirty``: the commit range of a set of records."""
    clean = [str(c).removesuffix("-dirty") for c in commits if c]
    if not clean:
        return "unknown"
    dirty = sum(str(c).endswith("-dirty") for c in commits if c)
    order = _history_order()
    distinct = sorted(set(clean), key=lambda c: (-order.get(c, -1), c))   # oldest first when known
    span = short_commit(distinct[0]) if len(distinct) == 1 else \
        f"{short_commit(distinct[0])} … {short_commit(distinct[-1])}"
    return f"`{span}` ({len(distinct)} commit{'s' if len(distinct) != 1 else ''}); {dirty} -dirty"


# --------------------------------------------------------------------------------------------- blocks

# Claims per record load: the main part's index and each paper's own blocks read the same verdicts, and
# computing them is the costly part of a claim (selection, statistics). Keyed weakly by the loader, so a new
# load (new records) computes them afresh.
_CLAIMS: weakref.WeakKeyDictionary[Loader, dict[str, list[Claim]]] = weakref.WeakKeyDictionary()


def artifact_seeds(frame: pd.DataFrame) -> int | None:
    """The distinct seeds of an artifact's completed runs inside its declared grid: the most any of its claims
    can rest on (None when the records carry no seed)."""
    if frame is None or frame.empty or "seed" not in frame:
        return None
    keep = frame["status"].astype(str) == "completed" if "status" in frame else pd.Series(True, index=frame.index)
    if "in_grid" in frame:
        keep &= frame["in_grid"].astype(bool)
    seeds = frame.loc[keep, "seed"].dropna()
    return int(seeds.nunique()) if len(seeds) else None


def artifact_dirty(frame: pd.DataFrame) -> tuple[str, ...]:
    """Run ids of an artifact's completed in-grid records written with uncommitted changes (``-dirty``)."""
    if frame is None or frame.empty or "git_commit" not in frame:
        return ()
    keep = frame["status"].astype(str) == "completed" if "status" in frame else pd.Series(True, index=frame.index)
    if "in_grid" in frame:
        keep &= frame["in_grid"].astype(bool)
    return dirty_ids(frame[keep])


def judged(claim: Claim, fallback_seeds: int | None, protocol: str,
           fallback_dirty: tuple[str, ...] = ()) -> Claim:
    """A claim as the report prints it: the seed rule applied (``stats.seed_rule``: a decisive verdict on fewer
    than ``MIN_SEEDS`` seeds, the claim's own ``n_seeds`` or else the artifact's, reads "too few seeds", the
    seeds' own verdict kept in the evidence) and its distance from the paper's protocol attached."""
    n_seeds = claim.n_seeds if claim.n_seeds is not None else fallback_seeds
    verdict = seed_rule(claim.verdict, n_seeds)
    evidence = claim.evidence
    if verdict != claim.verdict:
        evidence = (f"{evidence.rstrip('.')}; {claim.verdict} on {n_seeds} seed{'s' if n_seeds != 1 else ''}, "
                    f"a decisive verdict needs {MIN_SEEDS}")
    dirty, scope = (claim.dirty, claim.dirty_scope) if claim.dirty is not None else (fallback_dirty, "artifact")
    return replace(claim, verdict=verdict, evidence=evidence, n_seeds=n_seeds, protocol=protocol, dirty=dirty,
                   dirty_scope=scope)


def artifact_claims(loader: Loader, artifact: Artifact) -> list[Claim]:
    """``artifact.claims`` on its records as the report prints them (``judged``), computed once per ``loader``
    (empty without claims)."""
    if artifact.claims is None:
        return []
    cache = _CLAIMS.setdefault(loader, {})
    if artifact.name not in cache:
        frame = loader.frame(artifact)
        protocol = distance(artifact.name, loader.experiment(artifact.experiments[0]))
        # A claim that names the runs its verdict read gets its own distance (its epochs, seeds, grid); the
        # others the artifact's.
        cache[artifact.name] = [judged(c, artifact_seeds(frame),
                                       protocol if c.runs is None else claim_distance(artifact.name, c.runs, frame),
                                       artifact_dirty(frame))
                                for c in artifact.claims(frame)]
    return cache[artifact.name]


def render_blocks(results_dir: str | os.PathLike, paper: str = MAIN_PAPER,
                  loader: Loader | None = None) -> dict[str, str]:
    """The body of every block of ``paper``'s part (markdown without the markers): the inventory, then each
    artifact's ``report()`` blocks in registry order, each followed (outside the main part) by the artifact's
    claims block ``<artifact>-claims``."""
    loader = loader or Loader(results_dir)
    blocks = {PROTOCOL_BLOCK: block_protocol(loader, paper)}
    for artifact in paper_artifacts(paper):
        bodies = artifact.report(loader.frame(artifact))
        if artifact.claims is not None and bodies:
            # Every block of verdicts says how far its runs are from the paper's protocol (first block).
            first = next(iter(bodies))
            protocol = distance(artifact.name, loader.experiment(artifact.experiments[0]))
            bodies = {**bodies, first: f"*Our budget vs the paper's ({artifact.name}): {protocol}.*\n\n"
                      + bodies[first]}
        if artifact.claims is not None and paper != MAIN_PAPER:
            name = f"{artifact.name}{CLAIMS_SUFFIX}"
            if name in bodies:
                raise ValueError(f"artifact {artifact.name} writes its own {name!r} block: claims are rendered by "
                                 "the report from its claims(); drop the block from its report()")
            bodies = {**bodies, name: claims_table(artifact_claims(loader, artifact))}
        for name, body in bodies.items():
            if name in blocks:
                raise ValueError(f"report block {name!r} of artifact {artifact.name} is defined twice: rename it")
            blocks[name] = f'<a id="{name}"></a>\n\n{body}'   # the claims index links here
    if paper == MAIN_PAPER:
        blocks[SUMMARY_BLOCK] = block_summary(loader)
        blocks[CLAIMS_BLOCK] = block_claims(loader)
        blocks[QUOTES_BLOCK] = block_quotes(loader)
        blocks[DIRTY_BLOCK] = block_dirty(loader)
        blocks[VERIFY_BLOCK] = verify_report_block(loader.results_dir)  # lipgnn verify's last run
    return blocks


def _claim_link(paper: str, anchor: str) -> str:
    """Where a claim's section is: its artifact's report part (the entry point for the main paper), then
    ``#anchor``; an anchor that already names a file is kept as it is."""
    if ".md" in anchor:
        return anchor
    where = "" if paper == MAIN_PAPER else str(report_path("", paper))
    return f"{where}#{anchor.lstrip('#')}"


QUOTES_BLOCK = "claims-quotes"
DIRTY_BLOCK = "dirty"
VERIFY_BLOCK = "verification"
DECISIVE = (HOLDS, DOES_NOT_HOLD, HOLDS_IN_PART, *SCALE_DECISIVE)
SUMMARY_BLOCK = "summary"
#: Words of a claim's short label when its quote names no compared cells (``quote — label``).
LABEL_WORDS = 9


def claim_label(quote: str) -> str:
    """A short label of a claim: what its quote compares (the part after " — "), else its first words."""
    if " — " in quote:
        return quote.rsplit(" — ", 1)[1]
    words = quote.replace("“", "").replace("”", "").split()
    return " ".join(words[:LABEL_WORDS]) + (" …" if len(words) > LABEL_WORDS else "")


@dataclass(frozen=True)
class IndexRow:
    """One claim of the index with its artifact, its number (``#q-<n>``) and its place in its paper's
    multiplicity family: ``p`` the test's p-value (NaN: no test), ``holm_p`` / ``bh_p`` its adjusted p-values,
    ``holm`` / ``bh`` the verdict after each adjustment, ``same_test`` the number of an earlier claim resting on
    the same test (the family counts it once)."""

    number: int
    artifact: Artifact
    claim: Claim
    holm: str
    bh: str = ""
    p: float = math.nan
    holm_p: float = math.nan
    bh_p: float = math.nan
    same_test: int | None = None


def test_key(number: int, claim: Claim) -> tuple[str, float] | tuple[int]:
    """What makes two claims one test: the same compared runs and metric (``Scale.test``) against the same null
    value; a claim without a scale is a test of its own."""
    if claim.scale is not None and claim.scale.test:
        return (claim.scale.test, round(claim.scale.null(), 9))
    return (number,)


def adjusted_verdict(claim: Claim, adjusted_p: float) -> str:
    """A decisive verdict whose test's adjusted p is not below 1 − LEVEL becomes inconclusive; a verdict resting
    on no test (an observation) or an undecided one keeps itself."""
    tested = claim.p_value is not None and math.isfinite(claim.p_value)
    if tested and claim.verdict in DECISIVE and not adjusted_p < round(1 - LEVEL, 12):
        return TIE
    return claim.verdict


def index_rows(loader: Loader) -> list[IndexRow]:
    """Every paper's claims in registry order, numbered, each with its adjusted verdicts in its paper's family
    (the artifact's paper): every test once (``test_key``), Holm's step-down (``stats.holm_adjusted``) and
    Benjamini–Hochberg's (``stats.bh_adjusted``) adjustments of the tests' two-sided p-values."""
    return family_rows([(a, c) for a in registry.artifacts() for c in artifact_claims(loader, a)])


def family_rows(pairs: list[tuple[Artifact, Claim]]) -> list[IndexRow]:
    """``index_rows`` of given (artifact, claim) pairs: numbered from 1, one family per artifact's paper."""
    out: list[IndexRow] = []
    first: dict[tuple, int] = {}
    for i, (artifact, claim) in enumerate(pairs):
        key = (artifact.paper, *test_key(i + 1, claim))
        p = float(claim.p_value) if claim.p_value is not None and math.isfinite(claim.p_value) else math.nan
        same = first.get(key) if math.isfinite(p) else None
        if math.isfinite(p) and same is None:
            first[key] = i + 1
        out.append(IndexRow(i + 1, artifact, claim, claim.verdict, claim.verdict, p, same_test=same))
    for paper in dict.fromkeys(a.paper for a, _ in pairs):
        members = [r for r in out if r.artifact.paper == paper and math.isfinite(r.p) and r.same_test is None]
        holm_ps = holm_adjusted([r.p for r in members])
        bh_ps = bh_adjusted([r.p for r in members])
        adjusted = {r.number: (h, b) for r, h, b in zip(members, holm_ps, bh_ps, strict=True)}
        for i, row in enumerate(out):
            if row.artifact.paper != paper or not math.isfinite(row.p):
                continue
            h, b = adjusted[row.same_test or row.number]
            out[i] = replace(row, holm=adjusted_verdict(row.claim, h), bh=adjusted_verdict(row.claim, b),
                             holm_p=h, bh_p=b)
    return out


def _tally(verdicts: list[str]) -> str:
    counts = pd.Series(verdicts, dtype=object).value_counts()
    return ", ".join(f"{v} {n}" for v, n in counts.items()) if len(counts) else "none"


def p_text(p: float) -> str:
    """``0.003``, ``<0.001``, ``-`` (no test)."""
    if not math.isfinite(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def family_note(index: list[IndexRow]) -> str:
    """How many tests each paper's family holds, and how many claims share a test or rest on none."""
    parts = []
    for paper in dict.fromkeys(r.artifact.paper for r in index):
        mine = [r for r in index if r.artifact.paper == paper]
        tests = sum(1 for r in mine if math.isfinite(r.p) and r.same_test is None)
        shared = sum(1 for r in mine if r.same_test is not None)
        untested = sum(1 for r in mine if not math.isfinite(r.p) and r.claim.verdict in DECISIVE)
        parts.append(f"{PAPER_SHORT.get(paper, paper)}: {tests} tests"
                     + (f" ({shared} claim{'s' if shared != 1 else ''} share an earlier claim's test)" if shared
                        else "")
                     + (f"; {untested} decisive verdict{'s' if untested != 1 else ''} rest on no test "
                        "(an observation, kept after adjustment)" if untested else ""))
    return "; ".join(parts)


def block_claims(loader: Loader) -> str:
    """One row per claim of every paper: section, a short label linked to the paper's words (the
    ``claims-quotes`` block), the paper's effect and ours, our verdict, its p-value and its verdicts after Holm
    and BH, seeds, the distance from the paper's protocol, runs, and a link to the evidence."""
    rows = []
    index = index_rows(loader)
    for row in index:
        claim = row.claim
        paper, ours = effect_text(claim)
        rows.append([PAPER_SHORT.get(claim.paper, claim.paper), md_cell(claim.section),
                     f"[{md_cell(claim_label(claim.quote))}](#q-{row.number})", paper, ours, verdict_cell(claim),
                     p_text(row.p) + (f" (= [{row.same_test}](#q-{row.same_test}))" if row.same_test else ""),
                     p_text(row.holm_p), row.holm if row.holm != claim.verdict else "=",
                     row.bh if row.bh != claim.verdict else "=",
                     str(claim.n_seeds) if claim.n_seeds is not None else "-", md_cell(claim.protocol or "-"),
                     str(claim.n_runs), f"[{row.artifact.name}]({_claim_link(row.artifact.paper, claim.anchor)})"])
    if not rows:
        return "No claims registered."
    header = ["paper", "section", "claim (the paper's words behind the link)", "paper's effect", "our effect",
              "verdict", "p", "Holm p", "after Holm", "after BH", "seeds", "our budget vs the paper's", "runs",
              "evidence"]
    lines = md_table(header, rows)
    lines += ["", f"Verdict counts: {_tally([r.claim.verdict for r in index])}. After Holm's adjustment per paper: "
              f"{_tally([r.holm for r in index])}. After Benjamini–Hochberg's (5 % FDR): "
              f"{_tally([r.bh for r in index])}. Families: {family_note(index)}.", "",
              STATS_LEGEND + " Effects are in points (a − b of the claim); 'direction': the paper prints no "
              "number, so only the sign is judged. The scale (reproduces, smaller or larger than reported, not "
              "reproduced, reversed, inconclusive, not comparable) is docs/verdicts.md's. 'p': the two-sided "
              "p-value of the test the verdict rests on ('= n': the same test as claim n, counted once); 'Holm "
              "p' and 'after Holm' / 'after BH': the verdict after Holm's step-down (family-wise 5 %) or "
              "Benjamini–Hochberg's (5 % false discovery rate) adjustment within each paper's family ('=': "
              "unchanged; a decisive verdict whose adjusted p is not below 5 % becomes inconclusive). "
              f"'seeds': the seeds the verdict rests on (a decisive verdict needs {MIN_SEEDS}). "
              "'our budget vs the paper's': where the claim's runs fall short of the protocol the paper states "
              "(docs/paper_protocol.yaml), computed from the records; 'paper protocol' when they do not."]
    return "\n".join(lines)


def on_dirty(claim: Claim) -> bool:
    """A decisive verdict ("holds" / "does not hold") resting on records written with uncommitted changes."""
    return claim.verdict in DECISIVE and bool(claim.dirty)


def verdict_cell(claim: Claim) -> str:
    """``**holds**``, marked ``(k -dirty)`` when it is decisive and rests on -dirty records (``dirty`` block)."""
    return f"**{claim.verdict}**" + (f" ([{len(claim.dirty)} -dirty](#dirty))" if on_dirty(claim) else "")


def block_dirty(loader: Loader) -> str:
    """Every decisive verdict resting on records written from uncommitted code, with those records' run ids: the
    uncommitted diff is not stored, so it cannot be shown not to touch the code that ran; a rerun from a clean
    checkout (same run id, ``overwrite=true``) replaces such a record."""
    index = index_rows(loader)
    rows = [row for row in index if on_dirty(row.claim)]
    if not any(row.claim.verdict in DECISIVE for row in index):
        return "No decisive verdict yet: every claim is not run or undecided."
    if not rows:
        return "No decisive verdict rests on a record written with uncommitted changes."
    lines = [f"{len(rows)} decisive verdict(s) rest on records written with uncommitted changes (`-dirty` in the "
             "record's `git_commit`); they are marked in the index:", ""]
    for row in rows:
        claim = row.claim
        ids = ", ".join(f"`{r}`" for r in claim.dirty)
        lines.append(f"- [{row.number}](#q-{row.number}) {PAPER_SHORT.get(claim.paper, claim.paper)} "
                     f"{md_cell(claim_label(claim.quote))} — **{claim.verdict}**: "
                     + (f"{len(claim.dirty)} of the cells' records: " if claim.dirty_scope == "claim" else
                        f"{len(claim.dirty)} of the artifact's records (the verdict does not say which it reads): ")
                     + ids)
    return "\n".join(lines)


def block_quotes(loader: Loader) -> str:
    """The paper's words of every claim of the index, each under its own anchor ``q-<n>``, with our evidence."""
    lines = []
    for row in index_rows(loader):
        claim = row.claim
        paper, ours = effect_text(claim)
        effects = f" Paper's effect {paper}, ours {ours} points." if claim.scale is not None else ""
        why = (f" Why: {claim.scale.outcome.reason}." if claim.scale is not None
               and claim.scale.outcome.label == claim.verdict else "")
        test = (f" p = {p_text(row.p)}, Holm-adjusted p = {p_text(row.holm_p)}, BH-adjusted p = {p_text(row.bh_p)}"
                + (f" (the test of claim {row.same_test})" if row.same_test else "") + "."
                if math.isfinite(row.p) else " No test (not a paired comparison).")
        lines += [f'<a id="q-{row.number}"></a>**{row.number}.** {PAPER_SHORT.get(claim.paper, claim.paper)}, '
                  f"{claim.section}: “{claim.quote}” — **{claim.verdict}**"
                  + (f" (Holm: {row.holm})" if row.holm != claim.verdict else "")
                  + (f" (BH: {row.bh})" if row.bh != claim.verdict else "")
                  + f"; {claim.protocol or '-'}.{effects}{why}{test} {claim.evidence}", ""]
    return "\n".join(lines).rstrip() or "No claims registered."


def _artifact_verdicts(claims: list[Claim]) -> str:
    return _tally([c.verdict for c in claims]) if claims else "no claim"


def block_summary(loader: Loader) -> str:
    """The first screen: the tally per paper (raw and after Holm), then per artifact what the paper shows, our
    verdicts, seeds and our budget against the paper's."""
    index = index_rows(loader)
    papers = list(dict.fromkeys(r.artifact.paper for r in index))
    tally = ["| paper | claims | verdicts | after Holm | after BH (5 % FDR) |", "|:---|:---:|:---|:---|:---|"]
    for paper in papers:
        mine = [r for r in index if r.artifact.paper == paper]
        tally.append(f"| {PAPER_SHORT.get(paper, paper)} | {len(mine)} | {_tally([r.claim.verdict for r in mine])} | "
                     f"{_tally([r.holm for r in mine])} | {_tally([r.bh for r in mine])} |")
    rows = ["| artifact | what the paper shows | our verdicts | seeds | our budget vs the paper's |",
            "|:---|:---|:---|:---:|:---|"]
    for artifact in registry.artifacts():
        claims = artifact_claims(loader, artifact)
        if not claims:
            continue
        seeds = sorted({c.n_seeds for c in claims if c.n_seeds is not None})
        seed_text = "-" if not seeds else (str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}")
        link = _claim_link(artifact.paper, claims[0].anchor)
        rows.append(f"| [{artifact.name}]({link}) | {md_cell(artifact.title)} | {_artifact_verdicts(claims)} | "
                    f"{seed_text} | {md_cell(claims[0].protocol or '-')} |")
    return "\n".join(tally + [""] + rows)


def skeleton(blocks: dict[str, str], paper: str = MAIN_PAPER) -> str:
    """A new part: a title, then per block a heading, the block and the discussion placeholder."""
    parts = [f"# Reproduction report: {PAPER_TITLES.get(paper, paper)}", "",
             "Every number in this file sits between `auto` marker comments and is regenerated from the run "
             "records under `runs/` by `make report` (lipgnn/results/report.py); none is typed by hand. Text "
             "outside the markers is never touched: the discussion goes there.", ""]
    headings = {PROTOCOL_BLOCK: "Protocol and run inventory"}
    for artifact in paper_artifacts(paper):
        for name in blocks:
            headings.setdefault(name, artifact.title)
    for name, body in blocks.items():
        parts.append(_section(name, headings.get(name, name), body))
    return "\n".join(parts)


def _section(name: str, heading: str, body: str) -> str:
    return "\n".join([f"## {heading}", "", open_marker(name), "", body.strip("\n"), "", close_marker(name), "",
                      PLACEHOLDER, ""])


# --------------------------------------------------------------------------------------------- update


@dataclass(frozen=True)
class ReportUpdate:
    """What ``update_report`` did."""

    path: Path
    created: bool
    changed: bool
    updated: tuple[str, ...]     # blocks rewritten in place
    appended: tuple[str, ...]    # blocks whose markers were absent and were appended (append_missing=True)
    missing: tuple[str, ...]     # blocks whose markers are absent from the report (left out)
    unknown: tuple[str, ...]     # auto blocks in the report that this version does not know (left as is)


def update_report(results_dir: str | os.PathLike, report_path_: str | os.PathLike | None = None, *,
                  append_missing: bool = False, write: bool = True, paper: str = MAIN_PAPER,
                  loader: Loader | None = None) -> ReportUpdate:
    """Regenerate the ``auto`` blocks of ``paper``'s part (default path: ``report_path(results_dir, paper)``).

    Creates the skeleton if the file does not exist. A block whose markers are absent from an existing
    report is reported in ``missing`` (with a warning) or, with ``append_missing``, appended at the end
    under its heading. ``write=False`` computes the result without touching the file (for ``--check``).
    """
    path = Path(report_path_) if report_path_ is not None else report_path(results_dir, paper)
    blocks = render_blocks(results_dir, paper, loader)
    names = tuple(blocks)
    if not path.exists():
        if write:
            _atomic_write_text(path, skeleton(blocks, paper))
        return ReportUpdate(path, True, True, names, (), (), ())
    try:
        old = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): fix or move it") from exc
    new, found, unknown = replace_blocks(old, blocks)
    missing = [name for name in names if name not in found]
    appended: list[str] = []
    if missing and append_missing:
        newline = "\r\n" if "\r\n" in old else "\n"
        tail = "".join(_section(name, name, blocks[name]) for name in missing)
        sep = "" if not new or new.endswith(newline * 2) else (newline if new.endswith(newline) else newline * 2)
        new += sep + tail.replace("\n", newline)
        appended, missing = missing, []
    for name in missing:
        log.warning("%s has no %s ... %s markers: block %r not written (use --append-missing)",
                    path, open_marker(name), close_marker(name), name)
    for name in unknown:
        log.warning("%s: unknown block %r left unchanged (known blocks: %s)", path, name, ", ".join(names))
    changed = new != old
    if changed and write:
        # newline="\n" in the store's writer: the text already carries the file's own line endings.
        _atomic_write_text(path, new)
    return ReportUpdate(path, False, changed, tuple(found), tuple(appended), tuple(missing),
                        tuple(dict.fromkeys(unknown)))


def update_reports(results_dir: str | os.PathLike, *, append_missing: bool = False, write: bool = True,
                   papers: tuple[str, ...] | None = None) -> list[ReportUpdate]:
    """``update_report`` for the main part and every other paper with report artifacts (one record load)."""
    loader = Loader(results_dir)
    chosen = papers or tuple(dict.fromkeys([MAIN_PAPER] + [a.paper for a in registry.artifacts() if a.report]))
    return [update_report(results_dir, None, append_missing=append_missing, write=write, paper=p, loader=loader)
            for p in chosen]
