"""results/bench/ holds only the benches the docs or the code cite, and docs/performance.md indexes the past ones."""

from __future__ import annotations

import fnmatch
import re

from conftest import ROOT

BENCH = ROOT / "results" / "bench"


def _expand(text: str) -> list[str]:
    """``a_{b,c}_d`` -> ``a_b_d``, ``a_c_d`` (the brace lists the docs write folder pairs with)."""
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        return [text]
    return [name for alt in match.group(1).split(",")
            for name in _expand(text[:match.start()] + alt + text[match.end():])]


def _citing_text() -> str:
    """The docs and the code, without the past benches' index (naming a folder there does not cite it)."""
    paths = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", *sorted((ROOT / "lipgnn").rglob("*.py"))]
    return "\n".join(path.read_text(encoding="utf-8").split("## Past benches", 1)[0] for path in paths)


def _past_benches() -> list[str]:
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([a-z0-9_]+)/` \|", text.split("## Past benches", 1)[1], flags=re.MULTILINE)


def cited_folders(names: list[str], text: str) -> set[str]:
    """The folders of ``names`` that ``text`` names (``san256_d33e1fa/``, ``cora30_{none,all}_d33e1fa_{a,b}/``,
    ``cuda_h100*/``)."""
    cited = set()
    for token in set(re.findall(r"[A-Za-z0-9_{},*]+", text)):
        for word in _expand(token):
            word = word.strip(",")
            cited |= {name for name in names
                      if name == word or (re.fullmatch(r"[a-z0-9_]{3,}\*", word) and fnmatch.fnmatch(name, word))}
    return cited


def test_every_bench_folder_is_cited() -> None:
    folders = sorted(path.name for path in BENCH.iterdir() if path.is_dir())
    uncited = sorted(set(folders) - cited_folders(folders, _citing_text()))
    assert not uncited, f"results/bench/ folders no doc cites: {uncited}; cite them or index them as past benches"


def test_the_past_benches_are_indexed_and_gone() -> None:
    past = _past_benches()
    assert len(past) >= 20
    assert not [name for name in past if (BENCH / name).exists()]
    assert cited_folders(["san256_none_87da654_a", "cora30_all_d33e1fa_b", "cuda_h100_2d1c45c"],
                         "`san256_none_87da654_{a,b}/`, `cora30_{none,all}_d33e1fa_{a,b}/`, cuda_h100*/") == {
        "san256_none_87da654_a", "cora30_all_d33e1fa_b", "cuda_h100_2d1c45c"}
