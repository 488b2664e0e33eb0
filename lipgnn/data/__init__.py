"""Dataset layer: ``load(dataset_cfg, seed) -> TaskData`` dispatching on ``dataset_cfg.kind``.

kinds: ``planetoid`` (Cora/CiteSeer/PubMed, optional missing-vector setting), ``trees`` (Tree-NeighborsMatch),
``ogb`` (ogbn-arxiv, ogbn-proteins), ``pyg``
(any class of torch_geometric.datasets, e.g. Coauthor CS). See docs/ARCHITECTURE.md for the batch conventions.
"""

from __future__ import annotations

from typing import Any

import torch

from lipgnn.data.common import cfg_get
from lipgnn.data.spec import DataSpec, TaskData, accuracy
from lipgnn.errors import ConfigError

KINDS = ("planetoid", "trees", "ogb", "pyg")

__all__ = ["DataSpec", "TaskData", "accuracy", "load", "KINDS"]


def load(dataset_cfg: Any, seed: int, device: torch.device | str | None = None) -> TaskData:
    """Load the dataset described by ``dataset_cfg`` (a ``conf/dataset/*.yaml`` node or a dict).

    ``seed`` fixes everything random in the data (missing-vector erasure, TREES generation and split);
    ``device``, if given, is where the batches are placed.
    """
    kind = cfg_get(dataset_cfg, "kind")
    if kind == "planetoid":
        from lipgnn.data.planetoid import load_planetoid

        return load_planetoid(dataset_cfg, seed, device)
    if kind == "trees":
        from lipgnn.data.trees import load_trees

        return load_trees(dataset_cfg, seed, device)
    if kind == "ogb":
        from lipgnn.data.ogb import load_ogb

        return load_ogb(dataset_cfg, seed, device)
    if kind == "pyg":
        from lipgnn.data.pyg import load_pyg

        return load_pyg(dataset_cfg, seed, device)
    raise ConfigError(f"dataset.kind={kind!r} is unknown; use one of {', '.join(KINDS)}")
