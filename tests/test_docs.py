"""README.md and docs/: their generated blocks are current (lipgnn.docs, `make docs`), the config reference names every
group, option and key, the pages keep their sizes, and the README types no result by hand."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from lipgnn.config_schema import SCHEMAS, schema_fields
from lipgnn.docs import PAGES, refresh
from lipgnn.errors import ConfigError
from lipgnn.results.render.markers import replace_blocks


def _copy_tree(tmp: Path) -> Path:
    """The files the pages are built from, and the pages, in a scratch repository root."""
    for rel in [*PAGES, "results/demo", "results/bench/summary.csv", "results/bench/meta.json"]:
        src, dst = ROOT / rel, tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    from lipgnn.docs import CURRENT_BENCH

    for folder in CURRENT_BENCH.values():
        shutil.copytree(ROOT / "results" / "bench" / folder, tmp / "results" / "bench" / folder)
    return tmp


def test_generated_blocks_of_readme_and_docs_are_current() -> None:
    stale = [str(r.path.relative_to(ROOT)) for r in refresh(ROOT, write=False) if r.changed]
    assert not stale, f"stale generated blocks in {stale}: run make docs"


def test_a_changed_record_makes_its_page_stale_and_make_docs_fixes_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    record = root / "results" / "demo" / "seed0.json"
    data = json.loads(record.read_text())
    data["gat_lip"]["last_test"] += 1.0
    record.write_text(json.dumps(data))
    assert {r.path.name for r in refresh(root, write=False) if r.changed} == {"README.md"}
    refresh(root)
    assert f"{data['gat_lip']['last_test']:.1f} %" in (root / "README.md").read_text()
    assert not any(r.changed for r in refresh(root, write=False))


def test_a_page_without_its_block_is_an_error(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("<!-- auto:demo -->", "").replace("<!-- /auto:demo -->", ""))
    with pytest.raises(ConfigError, match="lacks the block"):
        refresh(root, write=False)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n### ", start + len(heading))
    return text[start:end if end > 0 else len(text)]


def test_config_reference_names_every_group_option_and_schema_key() -> None:
    text = (ROOT / "docs" / "config.md").read_text()
    conf = ROOT / "conf"
    for folder in (p for p in conf.rglob("*") if p.is_dir()):
        options = sorted(f.stem for f in folder.glob("*.yaml"))
        if options:
            section = _section(text, f"### `{folder.relative_to(conf).as_posix()}/`")
            missing = [o for o in options if f"`{o}`" not in section]
            assert not missing, f"docs/config.md omits {folder.name}/{missing}"
    for must in ("`san`", "`fig6_l2`", "`fig6_nonlocal`", "`gh_energy`", "`depth_energy`", "`fig5_legacy`"):
        assert must in text
    for (group, name), schema in SCHEMAS.items():
        section = _section(text, f"schema `{name}`" if group else "### top-level keys")
        for key in schema_fields(schema):
            assert f"`{key}" in section, f"docs/config.md omits {group or 'top-level'}.{key}"


def test_pages_keep_their_sizes_and_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert len((ROOT / "docs" / "performance.md").read_text().splitlines()) <= 400
    assert "make test " in readme and "make test" in (ROOT / ".ci" / "run").read_text()


#: A measured quantity: a percentage, a time, a ratio, a size or a float with decimals.
_RESULT = re.compile(r"\d+(?:[.,]\d+)?\s?(?:%|s\b|ms\b|min\b|[x×]\b|[MG]B\b)|\d+\.\d+")


def test_readme_types_no_result_outside_generated_blocks() -> None:
    """Every measured number of the README sits in a generated block: blank those, the code and the inline code
    spans out, and nothing that reads like a result is left."""
    text = (ROOT / "README.md").read_text()
    text, _, _ = replace_blocks(text, {name: "" for name in PAGES["README.md"]})
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", "", text)
    assert _RESULT.findall(text) == []
