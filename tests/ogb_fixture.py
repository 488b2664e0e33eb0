"""Tiny ogbn-arxiv / ogbn-proteins folders in OGB's exact on-disk layout (for tests of the real ogb path).

Layout (what ogb 1.3.6's ``PygNodePropPredDataset`` reads for a non-binary homogeneous dataset, see
ogb/nodeproppred/dataset_pyg.py, ogb/io/read_graph_raw.py and master.csv): headerless gzip CSVs

    <root>/<ogbn_name>/RELEASE_v1.txt                     (version from master.csv; absent -> ogb prompts)
    <root>/<ogbn_name>/raw/edge.csv.gz                    E rows "src,dst"
    <root>/<ogbn_name>/raw/num-node-list.csv.gz           one row: N
    <root>/<ogbn_name>/raw/num-edge-list.csv.gz           one row: E
    <root>/<ogbn_name>/raw/node-label.csv.gz              N rows (arxiv: class id; proteins: 112 0/1 ints)
    <root>/<ogbn_name>/raw/node-feat.csv.gz               arxiv only: N rows of 128 floats
    <root>/<ogbn_name>/raw/node_year.csv.gz               arxiv only ("additional node files")
    <root>/<ogbn_name>/raw/edge-feat.csv.gz               proteins only: E rows of 8 floats
    <root>/<ogbn_name>/raw/node_species.csv.gz            proteins only ("additional node files")
    <root>/<ogbn_name>/split/<time|species>/{train,valid,test}.csv.gz   one node id per row
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class OgbFixture:
    folder: Path
    num_nodes: int
    edges: np.ndarray  # [E, 2] as written (proteins: ogb adds the reverse of each)
    labels: np.ndarray  # arxiv [N, 1] ints; proteins [N, 112] 0/1
    node_feat: np.ndarray | None
    edge_feat: np.ndarray | None
    split: dict[str, np.ndarray]


def _write(path: Path, array: np.ndarray, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # numpy gzips transparently when the name ends in .gz.
    np.savetxt(path, np.atleast_2d(array) if array.ndim == 2 else array.reshape(-1, 1), fmt=fmt, delimiter=",")


def _common(folder: Path, num_nodes: int, edges: np.ndarray, labels: np.ndarray, split_name: str,
            split: dict[str, np.ndarray]) -> None:
    raw = folder / "raw"
    _write(raw / "edge.csv.gz", edges, "%d")
    _write(raw / "num-node-list.csv.gz", np.array([num_nodes]), "%d")
    _write(raw / "num-edge-list.csv.gz", np.array([len(edges)]), "%d")
    _write(raw / "node-label.csv.gz", labels, "%d")
    for part, idx in split.items():
        _write(folder / "split" / split_name / f"{part}.csv.gz", idx, "%d")
    (folder / "RELEASE_v1.txt").write_text("fixture written by tests/ogb_fixture.py\n")


def write_arxiv(root: Path, num_nodes: int = 12, seed: int = 0) -> OgbFixture:
    """A 12-node directed citation graph with 128-dim float features, 40 nominal classes, time split 6/3/3."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_arxiv"
    src = np.arange(1, num_nodes)
    edges = np.stack([src, src // 2], axis=1)  # each paper cites an older one: a directed tree
    labels = rng.integers(0, 40, size=(num_nodes, 1))
    node_feat = rng.normal(size=(num_nodes, 128)).round(4) + 0.5  # non-integers so ogb parses floats
    split = {"train": np.arange(0, 6), "valid": np.arange(6, 9), "test": np.arange(9, num_nodes)}
    _common(folder, num_nodes, edges, labels, "time", split)
    _write(folder / "raw" / "node-feat.csv.gz", node_feat, "%.4f")
    _write(folder / "raw" / "node_year.csv.gz", 2000 + np.arange(num_nodes), "%d")
    return OgbFixture(folder, num_nodes, edges, labels, node_feat, None, split)


def write_proteins(root: Path, num_nodes: int = 10, seed: int = 0) -> OgbFixture:
    """A 10-node graph with 15 undirected edges (8-dim float features), 112 binary labels, split 5/2/3."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_proteins"
    pairs = [(i, j) for i in range(num_nodes) for j in range(i + 1, num_nodes)]
    chosen = rng.choice(len(pairs), size=15, replace=False)
    edges = np.array([pairs[k] for k in sorted(chosen)])
    labels = rng.integers(0, 2, size=(num_nodes, 112))
    edge_feat = rng.uniform(0.001, 1.0, size=(len(edges), 8)).round(3)
    split = {"train": np.arange(0, 5), "valid": np.arange(5, 7), "test": np.arange(7, num_nodes)}
    _common(folder, num_nodes, edges, labels, "species", split)
    _write(folder / "raw" / "edge-feat.csv.gz", edge_feat, "%.3f")
    _write(folder / "raw" / "node_species.csv.gz", np.full(num_nodes, 3702), "%d")
    return OgbFixture(folder, num_nodes, edges, labels, None, edge_feat, split)
