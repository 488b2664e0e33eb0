"""Dataset layer: ``load(dataset_cfg, seed) -> TaskData`` dispatching on ``dataset_cfg.kind``; each loader reads
its typed config (:mod:`lipgnn.config_schema`: ``PlanetoidConfig``, ``TreesConfig``, ``OgbConfig``, ``PygConfig``).

kinds: ``planetoid`` (Cora/CiteSeer/PubMed, optional missing-vector setting), ``trees`` (Tree-NeighborsMatch),
``ogb`` (ogbn-arxiv, ogbn-proteins), ``pyg``
(any class of torch_geometric.datasets, e.g. Coauthor CS). See docs/ARCHITECTURE.md for the batch conventions.
"""

from __future__ import annotations

from typing import Any

import torch

from lipgnn.config import typed
from lipgnn.config_schema import DATASET_KINDS
from lipgnn.data.spec import DataSpec, TaskData, accuracy
from lipgnn.errors import DatasetNotFoundError

KINDS = DATASET_KINDS

__all__ = ["DataSpec", "TaskData", "accuracy", "check", "load", "KINDS"]


def check(dataset_cfg: Any) -> None:
    """What can be checked of a dataset without loading it, so that a bad value stops a run before it writes
    anything (:mod:`lipgnn.runs.layer` calls this before the run's lock): ``dataset.root`` is not a file, and
    ``dataset.cls`` names a class of ``torch_geometric.datasets``. One-line errors, as :func:`load` raises."""
    from pathlib import Path

    cfg = typed(dataset_cfg, "dataset")
    root = Path(cfg.root).expanduser() if hasattr(cfg, "root") else None  # TREES are generated: no root
    if root is not None and root.exists() and not root.is_dir():
        raise DatasetNotFoundError(f"dataset.root={root} is a file, not a folder; set dataset.root or LIPGNN_DATA "
                                   "to the folder holding the datasets")
    if cfg.kind == "pyg":
        from lipgnn.data.pyg import dataset_class

        dataset_class(cfg.cls)


def load(dataset_cfg: Any, seed: int, device: torch.device | str | None = None) -> TaskData:
    """Load the dataset described by ``dataset_cfg``: its schema's dataclass, or a ``conf/dataset/*.yaml`` node
    or a mapping, converted by :func:`lipgnn.config.typed` (a key it leaves out takes the schema's default).

    ``seed`` fixes everything random in the data (missing-vector erasure, TREES generation and split);
    ``device``, if given, is where the batches are placed.
    """
    cfg = typed(dataset_cfg, "dataset")
    if cfg.kind == "planetoid":
        from lipgnn.data.planetoid import load_planetoid

        return load_planetoid(cfg, seed, device)
    if cfg.kind == "trees":
        from lipgnn.data.trees import load_trees

        return load_trees(cfg, seed, device)
    if cfg.kind == "ogb":
        from lipgnn.data.ogb import load_ogb

        return load_ogb(cfg, seed, device)
    from lipgnn.data.pyg import load_pyg

    return load_pyg(cfg, seed, device)
