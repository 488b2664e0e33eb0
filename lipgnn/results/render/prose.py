"""Stale hand-written prose: sentences outside the ``auto`` markers whose numbers or verdict words contradict the
regenerated blocks of the same reports.

The discussion around the blocks is written by hand and is not regenerated, so it can go stale when records
change. ``stale_prose`` checks the statements that can be read against the blocks, and the test suite runs it on
the committed reports:

- a verdict word after a quoted claim fragment (``"decays gradually" holds``) must be a verdict that a claim
  containing that fragment has in a claims block (the index's quotes, a paper part's claims table);
- a dataset count (``of the three datasets``, ``on 5 datasets``) must be a denominator that the same file's
  blocks use (``k/5 datasets``);
- prose saying that verdicts read "too few seeds" needs a claim with that verdict;
- prose calling a verdict a "tie" needs a claim with that verdict (the reproduction scale has none: undecided is
  "inconclusive", docs/verdicts.md).

Other numbers belong in the generated blocks.
"""

from __future__ import annotations

import re

_BLOCK = re.compile(r"<!--\s*auto:([\w.-]+)\s*-->.*?<!--\s*/auto:\1\s*-->", re.S)
#: Every verdict a claims block can show: the reproduction scale (lipgnn.results.verdict) and the other shapes.
VERDICT_WORDS = ("holds in part", "does not hold", "holds", "reproduces", "smaller than reported",
                 "larger than reported", "not reproduced", "reversed", "inconclusive", "direction holds",
                 "not comparable", "too few seeds", "under budget", "not run", "cannot be judged")
_ALTERNATIVES = "|".join(sorted(VERDICT_WORDS, key=len, reverse=True))
_CLAIM = re.compile(r"“([^”]+)”[^*\n]*?\*\*(" + _ALTERNATIVES + r")\*\*")
_VERDICT_WORDS = re.compile(r"[\"“]([^\"”\n]{3,80})[\"”] (" + _ALTERNATIVES + r")\b", re.I)
#: "tie" was the name of an undecided verdict; the scale calls it "inconclusive" (or "not reproduced" when the
#: interval excludes the paper's effect), so prose still calling a verdict a tie is stale.
_TIE = re.compile(r"\*\*(?:verdict: )?ties?\b|\b(?:a|is|are|was|were|all|still a|tie:)\s+ties?\b|: \*{0,2}ties?\b"
                  r"|\bties? (?:on|at|over|with|in)\b(?! the paper)", re.I)
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10}
_DATASETS = re.compile(r"\b(?:of|on|over) (?:the |all |all the )?(one|two|three|four|five|six|seven|eight|nine|"
                       r"ten|\d+) datasets\b", re.I)
_DENOMINATOR = re.compile(r"/(\d+) datasets\b")
_TOO_FEW = re.compile(r"read[s]? \"?too few seeds\"?", re.I)


def blocks_text(text: str) -> str:
    """The content of every ``auto`` block of ``text``, concatenated."""
    return "\n".join(m.group(0) for m in _BLOCK.finditer(text))


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside its ``auto`` blocks."""
    return _BLOCK.sub("", text).splitlines()


def claim_verdicts(text: str) -> list[tuple[str, str]]:
    """(quote, verdict) of every claim shown in the blocks of ``text``."""
    return [(m.group(1), m.group(2)) for m in _CLAIM.finditer(blocks_text(text))]


def stale_prose(files: dict[str, str]) -> list[str]:
    """``file: sentence fragment — why`` for every prose statement of the reports ``files`` (name -> text) that
    contradicts their blocks (module docstring)."""
    claims = [c for text in files.values() for c in claim_verdicts(text)]
    any_too_few = any(v == "too few seeds" for _, v in claims)
    any_tie = any(v == "tie" for _, v in claims)
    out = []
    for name, text in files.items():
        denominators = {int(d) for d in _DENOMINATOR.findall(blocks_text(text))}
        for line in prose_lines(text):
            for m in _VERDICT_WORDS.finditer(line):
                fragment, said = m.group(1).lower(), m.group(2).lower()
                verdicts = {v for q, v in claims if fragment in q.lower()}
                if verdicts and said not in verdicts:
                    out.append(f"{name}: {m.group(0)!r} — the claims block says {', '.join(sorted(verdicts))}")
            for m in _DATASETS.finditer(line):
                word = m.group(1).lower()
                n = int(word) if word.isdigit() else _NUMBERS[word]
                if denominators and n not in denominators:
                    out.append(f"{name}: {m.group(0)!r} — the blocks count {', '.join(map(str, sorted(denominators)))} "
                               "datasets")
            if _TOO_FEW.search(line) and not any_too_few:
                out.append(f"{name}: {_TOO_FEW.search(line).group(0)!r} — no claim reads too few seeds")
            tie = _TIE.search(line)
            if tie and not any_tie:
                out.append(f"{name}: {line.strip()[:80]!r} — calls a verdict a tie; no claim reads tie (undecided "
                           "reads inconclusive, and an interval that excludes the paper's effect not reproduced)")
    return out
