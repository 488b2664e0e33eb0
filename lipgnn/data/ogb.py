"""ogbn-arxiv and ogbn-proteins through ogb's ``PygNodePropPredDataset`` and ``Evaluator``.

ogb is imported lazily (``import ogb`` costs ~7 s: pandas, scikit-learn) and only once the files are known to
be present: ogb would otherwise try to download, and on some paths (a dataset folder without its
``RELEASE_v<version>.txt``, or a download over 1 GB) it asks a question on stdin. Expected files are derived
from ogb's own ``master.csv`` so they match what ogb will read.

Like Planetoid, the files are mirrored (symlinks) from ``root/<ogbn_name>/`` into
``cache_dir/ogb/<ogbn_name>/`` and ogb writes ``processed/`` there, so the data root may be read-only.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import shutil
import warnings
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lipgnn.config_schema import OgbConfig
from lipgnn.data.common import (
    all_exist,
    download_timeout,
    file_lock,
    mirror_files,
    missing_data_fix,
    network_reachable,
)
from lipgnn.data.reorder import apply_reorder
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.errors import ConfigError, DatasetNotFoundError

SUPPORTED = ("ogbn-arxiv", "ogbn-proteins")
DOWNLOAD_HOST = "snap.stanford.edu"


@cache
def meta_info(name: str) -> dict[str, str]:
    """ogb's metadata column for ``name`` (from its master.csv, read without importing ogb)."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or spec.origin is None:
        raise ConfigError(f"dataset {name} needs the 'ogb' package; install it with pip install ogb")
    with open(Path(spec.origin).parent / "nodeproppred" / "master.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    column = header.index(name)
    return {row[0]: row[column] for row in rows[1:]}


def expected_files(name: str) -> list[str]:
    """Paths, relative to the dataset folder, that ogb reads (so it never tries to download)."""
    meta = meta_info(name)
    raw = ["edge", "num-node-list", "num-edge-list", "node-label"]
    if meta["has_node_attr"] == "True":
        raw.append("node-feat")
    if meta["has_edge_attr"] == "True":
        raw.append("edge-feat")
    for extra in (meta["additional node files"], meta["additional edge files"]):
        if extra != "None":
            raw.extend(extra.split(","))
    files = [f"raw/{stem}.csv.gz" for stem in raw]
    files += [f"split/{meta['split']}/{part}.csv.gz" for part in ("train", "valid", "test")]
    files.append(f"RELEASE_v{meta['version']}.txt")
    return files


# ogb renames proteins' raw/species.csv.gz to raw/node_species.csv.gz itself on first processing.
ALIASES = {"raw/node_species.csv.gz": "raw/species.csv.gz"}


def find_files(folder: Path, files: Iterable[str]) -> list[str] | None:
    """The names under ``folder`` that satisfy ``files`` (allowing ogb's aliases), or None if any is missing."""
    found = []
    for name in files:
        alias = ALIASES.get(name)
        if not (folder / name).exists() and alias is not None and (folder / alias).exists():
            name = alias
        found.append(name)
    return found if all_exist(folder, found) else None


def _pyg_pickle_classes() -> list[type]:
    """PyG classes inside the file ogb 1.3.6 saves and reads back with a bare ``torch.load``.

    ogb calls ``torch.load(path)`` without ``weights_only`` (ogb issue #497); torch >= 2.6 defaults to
    ``weights_only=True``, which refuses these classes (PyG allow-lists ``Data`` itself, not its attribute
    helpers/storage). The file is written by ogb into our own cache, so these three are allow-listed for
    the duration of the ogb call only (``safe_globals`` context), narrower than patching ``torch.load``.
    """
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    return [DataEdgeAttr, DataTensorAttr, GlobalStorage]


def _open_dataset(name: str, root: Path, cache_dir: Path, download: bool) -> Any:
    dir_name = name.replace("-", "_")
    files = expected_files(name)
    work_root = cache_dir / "ogb"
    work = work_root / dir_name
    # ogb itself also accepts a "<dir>_pyg" folder name.
    source, names = None, None
    for candidate in (root / dir_name, root / f"{dir_name}_pyg", work):
        names = find_files(candidate, files)
        if names is not None:
            source = candidate
            break
    if source is None:
        if not download:
            reason = "dataset.download is false"
        elif not network_reachable(DOWNLOAD_HOST, 80):
            reason = f"no network: {DOWNLOAD_HOST} unreachable"
        else:
            reason = ""
        if reason:
            raise DatasetNotFoundError(
                f"{name} not found: expected {root / dir_name}/{{{','.join(files)}}} in OGB's layout; "
                f"{missing_data_fix(f'{dir_name}/', download, reason)}"
            )

    with file_lock(work_root / f".{dir_name}.lock"):
        if source is None:
            # ogb downloads into work_root; a half-made folder without RELEASE file would make it prompt.
            if work.exists():
                shutil.rmtree(work)
        elif names is not None and source.resolve() != work.resolve() and mirror_files(source, work, names):
            # New or re-pointed files: drop any processed data made from the old ones.
            for stale in (work / "processed").glob("*"):
                stale.unlink()

        from ogb.nodeproppred import PygNodePropPredDataset

        try:
            with download_timeout(), torch.serialization.safe_globals(_pyg_pickle_classes()), \
                    warnings.catch_warnings():
                # ogb wraps a read-only pandas array in a tensor; harmless: ogb re-reads its saved file.
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                return PygNodePropPredDataset(name=name, root=str(work_root))
        except Exception as exc:
            raise DatasetNotFoundError(
                f"{name}: ogb could not load {work} ({type(exc).__name__}: {exc}); "
                f"check the files under {root / dir_name} or delete {work}".replace("\n", " ")
            ) from exc


def evaluator_score(name: str) -> Any:
    """Score function ``(logits, y) -> float`` backed by ogb's Evaluator for ``name``."""
    from ogb.nodeproppred import Evaluator

    evaluator = Evaluator(name)
    metric = evaluator.eval_metric

    def score(logits: Tensor, y: Tensor) -> float:
        if metric == "acc":
            result = evaluator.eval({"y_true": y.view(-1, 1), "y_pred": logits.argmax(dim=-1, keepdim=True)})
        else:
            result = evaluator.eval({"y_true": y, "y_pred": logits})
        return float(result[metric])

    return score


def _masks(num_nodes: int, split_idx: dict[str, Tensor]) -> dict[str, Tensor]:
    masks = {}
    for key, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[split_idx[part]] = True
        masks[key] = mask
    return masks


def load_ogb(cfg: OgbConfig, seed: int, device: torch.device | str | None = None) -> TaskData:
    """``TaskData`` for ogbn-arxiv (full batch) or ogbn-proteins (``RandomNodeLoader`` partitions)."""
    name = cfg.name
    if name not in SUPPORTED:
        raise ConfigError(f"dataset.name={name!r} is not a supported OGB dataset; use one of {', '.join(SUPPORTED)}")
    root, cache_dir = Path(cfg.root).expanduser(), Path(cfg.cache_dir).expanduser()
    download = bool(cfg.download)

    reorder = cfg.reorder
    if name == "ogbn-proteins" and reorder != "none":
        # Its batches are random node partitions; a relabelling would change them, not only the memory order.
        raise ConfigError(f"dataset.reorder={reorder!r} applies to full-batch graphs; ogbn-proteins trains on "
                          "random node partitions: use dataset.reorder=none")
    dataset = _open_dataset(name, root, cache_dir, download)
    raw = dataset[0]
    split_idx = dataset.get_idx_split()
    masks = _masks(raw.num_nodes, split_idx)
    score = evaluator_score(name)
    info = {"num_nodes": int(raw.num_nodes), **{f"num_{k[:-5]}": int(m.sum()) for k, m in masks.items()}}

    if name == "ogbn-arxiv":
        from torch_geometric.utils import to_undirected

        edge_index = raw.edge_index
        undirected = bool(cfg.to_undirected)
        if undirected:
            edge_index = to_undirected(edge_index, num_nodes=raw.num_nodes)
        data = Data(x=raw.x, edge_index=edge_index, y=raw.y.view(-1), **masks)
        data, reorder_info = apply_reorder(data, reorder)
        info.update(num_edges=int(data.num_edges), to_undirected=undirected, **reorder_info)
        if device is not None:
            data = data.to(device)
        spec = DataSpec(num_features=int(data.x.size(1)), num_classes=int(dataset.num_classes),
                        step_edges=int(data.num_edges))
        return TaskData(name=name, spec=spec, metric="acc", train_batches=lambda generator=None: [data],
                        eval_batches=lambda: [data], info=info, score_fn=score)

    # ogbn-proteins: no node features; PyG's example sums the 8-dim features of each node's incoming edges.
    from torch_geometric.loader import RandomNodeLoader
    from torch_geometric.utils import scatter

    num_parts, use_edge_attr = cfg.num_parts, bool(cfg.use_edge_attr)
    edge_attr = raw.edge_attr.float()
    x = scatter(edge_attr, raw.edge_index[1], dim=0, dim_size=raw.num_nodes, reduce="sum")
    data = Data(x=x, edge_index=raw.edge_index, y=raw.y.float(), **masks)
    if use_edge_attr:
        data.edge_attr = edge_attr
    info.update(num_edges=int(data.num_edges), num_parts=num_parts)

    def to_device(batches: Iterable[Data]) -> Iterable[Data]:
        for batch in batches:
            yield batch.to(device) if device is not None else batch

    def train_batches(generator: torch.Generator | None = None) -> Iterable[Data]:
        return to_device(RandomNodeLoader(data, num_parts=num_parts, shuffle=True, generator=generator))

    def eval_batches() -> Iterable[Data]:
        # Unshuffled partitions: consecutive node ranges, each node exactly once.
        return to_device(RandomNodeLoader(data, num_parts=num_parts, shuffle=False))

    # A batch is the subgraph of s = ceil(N / num_parts) nodes drawn without replacement: an edge between two
    # distinct nodes is in it with probability s (s - 1) / (N (N - 1)), about 1 / num_parts².
    n, s = int(data.num_nodes), math.ceil(int(data.num_nodes) / num_parts)
    spec = DataSpec(num_features=int(x.size(1)), num_classes=int(data.y.size(1)),
                    edge_dim=int(edge_attr.size(1)) if use_edge_attr else None, multilabel=True,
                    step_edges=int(data.num_edges) * s * (s - 1) // max(n * (n - 1), 1))
    return TaskData(name=name, spec=spec, metric="rocauc", train_batches=train_batches,
                    eval_batches=eval_batches, info=info, score_fn=score)
