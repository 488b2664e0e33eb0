"""Benchmark graphs: the real Planetoid graph when a local copy exists, else a random graph of its size.

A random graph (uniform random directed edges, Gaussian features, uniform labels) costs the same as
the real one for every operation timed here: the work depends on the node, edge and feature counts
only. ogbn-arxiv is too large to mirror offline, so it is always a random graph of its size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor


@dataclass(frozen=True)
class GraphSize:
    """Node, directed-edge, feature and class counts of a benchmark graph."""

    nodes: int
    edges: int
    features: int
    classes: int
    planetoid: str | None = None  # PyG Planetoid name when a real copy may exist


SIZES: dict[str, GraphSize] = {
    "tiny": GraphSize(64, 256, 16, 4),
    "cora": GraphSize(2708, 10556, 1433, 7, "Cora"),
    "pubmed": GraphSize(19717, 88648, 500, 3, "PubMed"),
    # ogbn-arxiv: 169,343 nodes, 1,166,243 directed edges, 128 features, 40 classes.
    "arxiv": GraphSize(169343, 1166243, 128, 40),
}


@dataclass
class BenchGraph:
    name: str
    x: Tensor
    edge_index: Tensor
    y: Tensor
    num_classes: int
    source: str  # "planetoid:$LIPGNN_DATA", "planetoid:<data_root argument>" or "random"

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.size(1))

    def to(self, device: torch.device) -> BenchGraph:
        return BenchGraph(self.name, self.x.to(device), self.edge_index.to(device), self.y.to(device),
                          self.num_classes, self.source)


def _planetoid(name: str, root: Path) -> tuple[Tensor, Tensor, Tensor, int] | None:
    raw = root / name / "raw"
    if not (raw / f"ind.{name.lower()}.graph").exists():
        return None
    from torch_geometric.datasets import Planetoid

    # The data root may be read-only and PyG writes processed/ beside raw/: work on a copy.
    with tempfile.TemporaryDirectory(prefix="lipgnn-bench-") as tmp:
        shutil.copytree(raw, Path(tmp) / name / "raw")
        data = Planetoid(root=tmp, name=name)[0]
    return data.x, data.edge_index, data.y, int(data.y.max()) + 1


def random_graph(size: GraphSize, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, size.nodes, (2, size.edges), generator=gen)
    x = torch.randn(size.nodes, size.features, generator=gen)
    y = torch.randint(0, size.classes, (size.nodes,), generator=gen)
    return x, edge_index, y


def load_graph(name: str, seed: int = 0, data_root: str | os.PathLike | None = None) -> BenchGraph:
    """The benchmark graph ``name`` (one of :data:`SIZES`); Planetoid from ``data_root`` or ``$LIPGNN_DATA``."""
    if name not in SIZES:
        raise ValueError(f"unknown benchmark graph {name!r}; choose from {', '.join(SIZES)}")
    size = SIZES[name]
    root = data_root if data_root is not None else os.environ.get("LIPGNN_DATA")
    if size.planetoid is not None and root:
        real = _planetoid(size.planetoid, Path(root))
        if real is not None:
            x, edge_index, y, classes = real
            # Records name the variable, not this machine's path.
            where = "$LIPGNN_DATA" if data_root is None else str(data_root)
            return BenchGraph(name, x, edge_index, y, classes, f"planetoid:{where}")
    x, edge_index, y = random_graph(size, seed)
    return BenchGraph(name, x, edge_index, y, size.classes, "random")
