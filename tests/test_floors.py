"""The declared floors (majority-class shares) against the datasets themselves, where they are available."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lipgnn.results.floors import MAJORITY, floor

PYG_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def test_floor_by_hand() -> None:
    assert floor("cora") == pytest.approx(0.319)
    assert floor("pubmed", "train") == pytest.approx(1 / 3)
    assert floor("trees", "train", tree_depth=5) == pytest.approx(1 / 32)
    assert floor("ogbn-arxiv") is None


@pytest.mark.parametrize("dataset", sorted(PYG_NAMES))
def test_the_declared_majority_counts_are_the_datasets(dataset: str, tmp_path: Path) -> None:
    root = Path(os.environ.get("LIPGNN_DATA", "")) if os.environ.get("LIPGNN_DATA") else None
    if root is None or not (root / PYG_NAMES[dataset]).is_dir():
        pytest.skip("the Planetoid raw files are not under $LIPGNN_DATA")
    from lipgnn.data.planetoid import load_planetoid_data

    data, _ = load_planetoid_data(PYG_NAMES[dataset], root, tmp_path, False)
    for split in ("train", "val", "test"):
        labels = data.y[getattr(data, f"{split}_mask")]
        assert MAJORITY[(dataset, split)] == (int(torch.bincount(labels).max()), int(labels.numel()))
    assert MAJORITY[(dataset, "all")] == (int(torch.bincount(data.y).max()), int(data.y.numel()))
