"""`make demo` (scripts/demo.py): the generated-graph fallback and the saved plot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import ROOT
from torch_geometric.utils import homophily

from lipgnn.errors import DatasetNotFoundError


def _demo():
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_graph_is_sparse_and_homophilous_like_cora() -> None:
    """On a dense block model 20 layers mix every node into one average and neither model trains; the
    fallback graph must stay in the regime where the gradient explosion is what separates them."""
    data = _demo().generated_graph().train_batches()[0]
    degree = data.edge_index.size(1) / data.num_nodes
    assert 2.5 < degree < 4.5
    assert homophily(data.edge_index, data.y) > 0.9
    assert [int(data.train_mask[data.y == c].sum()) for c in range(4)] == [20] * 4
    assert not (data.train_mask & (data.val_mask | data.test_mask)).any()


def test_demo_falls_back_to_the_generated_graph_and_saves_the_plot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    demo = _demo()
    monkeypatch.setattr(demo, "RESULTS", tmp_path / "demo")
    monkeypatch.setattr(demo, "COMMON", [o.replace("depth=20", "depth=3").replace("train.epochs=200", "train.epochs=3")
                                         for o in demo.COMMON])

    def no_cora() -> None:
        raise DatasetNotFoundError("Cora not found")

    monkeypatch.setattr(demo, "_on_cora", no_cora)
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "Using a generated graph instead" in out and "on a generated graph" in out
    assert "GAT-Lip" in out and (tmp_path / "demo" / "demo.png").stat().st_size > 10_000
