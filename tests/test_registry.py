"""The artifact registry: every module loads, names are unique, and each artifact outputs what it declares."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from lipgnn.results import registry
from lipgnn.results.artifact import Artifact
from lipgnn.results.engine import Loader
from lipgnn.results.render.markers import block_names
from lipgnn.results.report import REPORT_NAME
from lipgnn.results.verdict import VERDICTS, Claim

ROOT = Path(__file__).resolve().parents[1]


def test_every_artifact_module_loads_and_names_are_unique() -> None:
    modules = registry.module_names()
    found = registry.artifacts()
    assert len(found) == len(modules) > 0
    assert len({a.name for a in found}) == len(found)
    for name in modules:
        artifact = importlib.import_module(name).ARTIFACT
        assert isinstance(artifact, Artifact) and artifact.paper in registry.PAPERS
        assert name.split(".")[-2] == artifact.paper and name.split(".")[-1] == artifact.name
        assert artifact.experiments and any((artifact.table, artifact.figure, artifact.report, artifact.claims))


def test_the_lipschitznorm_artifacts_are_registered_in_output_order() -> None:
    names = [a.name for a in registry.artifacts() if a.paper == "lipschitznorm"]
    assert names == ["depth_board", "table1", "table2", "table3", "failure_map", "fig2", "fig3", "fig4", "fig5",
                     "fig5_legacy", "fig6", "fig6_protocol"]


BEYOND_THE_PAPER = {"lip_estimates", "depth_energy", "kim_fig6_l2"}


@pytest.mark.parametrize("artifact", registry.artifacts(), ids=lambda a: a.name)
def test_each_artifact_outputs_what_it_declares(artifact: Artifact, tmp_path: Path) -> None:
    """From no records: a table gives csv/md/tex text, claims give Claim objects with known verdicts, and
    report blocks are non-empty (figures are drawn in tests/test_results.py, they are slower)."""
    frame = Loader(tmp_path).frame(artifact)
    assert frame.empty and "diagnostics" in frame.columns and "config" in frame.columns
    if artifact.table is not None:
        outputs = artifact.table(frame)
        assert set(outputs) == {"csv", "md", "tex"} and all(outputs.values())
    if artifact.claims is not None:
        claims = artifact.claims(frame)
        assert claims and all(isinstance(c, Claim) and c.verdict in VERDICTS for c in claims)
        # A claim names the paper it quotes: usually the artifact's own, but an experiment beyond its paper
        # (lip_estimates tests LipschitzNorm's bound with Kim et al.'s estimator) quotes another one.
        assert all(c.paper in registry.PAPERS and c.quote and c.section for c in claims)
        assert any(c.paper == artifact.paper for c in claims) or artifact.name in BEYOND_THE_PAPER
    if artifact.report is not None:
        blocks = artifact.report(frame)
        assert blocks and all(body.strip() for body in blocks.values())


def test_the_committed_report_holds_every_block_of_the_main_paper() -> None:
    text = (ROOT / "results" / REPORT_NAME).read_text(encoding="utf-8")
    expected = {name for a in registry.artifacts() if a.paper == "lipschitznorm" and a.report
                for name in a.report(Loader(ROOT / "tests" / "no-results-here").frame(a))}
    assert expected <= set(block_names(text))
