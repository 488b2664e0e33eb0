"""Any node-classification dataset of ``torch_geometric.datasets``: ``dataset=pyg dataset.cls=Coauthor
dataset.pyg_name=CS`` (the named configs ``dataset=cs`` and ``dataset=physics`` are two of them).

Files: the dataset's raw files are looked up in ``<root>/<pyg_name or cls>/raw`` (PyG's own layout, e.g.
``$LIPGNN_DATA/CS/raw/ms_academic_cs.npz``), mirrored (symlinks) to the folder the class reads under
``cache_dir/pyg/<cls>``, and processed there, so the data root is never written. When they are absent the
class downloads them into the cache if ``dataset.download`` is true and a network exists.

Split policy (``dataset.split``): ``public`` uses the dataset's own ``train/val/test_mask`` (a dataset with
several stored splits, masks of shape [N, k], uses column ``seed mod k``); a dataset without masks needs
``dataset.split=random`` (:mod:`lipgnn.data.splits`: per-class train counts or fractions, seeded, recorded).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch_geometric.data import Data

from lipgnn.config_schema import PygConfig
from lipgnn.data.common import file_lock, mirror_file
from lipgnn.data.reorder import apply_reorder
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.data.splits import apply_split
from lipgnn.errors import ConfigError, DatasetNotFoundError


def dataset_class(name: str) -> type:
    import torch_geometric.datasets as datasets
    from torch_geometric.data import Dataset

    cls = getattr(datasets, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, Dataset)):
        raise ConfigError(f"dataset.cls={name!r} is not a class of torch_geometric.datasets "
                          "(e.g. Coauthor, Amazon, WikiCS, Planetoid)")
    return cls


def _raw_dir(cls: type, work: Path, pyg_name: str | None) -> Path:
    """Where ``cls`` reads its raw files under root ``work`` (its ``raw_dir``, computed without loading)."""
    probe = cls.__new__(cls)
    probe.root = str(work)
    if pyg_name is not None:
        probe.name = pyg_name
    try:
        return Path(probe.raw_dir)
    except AttributeError:  # a class whose raw_dir reads more state: PyG's usual layout (root[/name]/raw)
        return work / pyg_name / "raw" if pyg_name is not None else work / "raw"


def load_pyg(cfg: PygConfig, seed: int, device: torch.device | str | None = None) -> TaskData:
    cls_name = cfg.cls
    cls = dataset_class(cls_name)
    pyg_name = cfg.pyg_name
    root, cache_dir = Path(cfg.root).expanduser(), Path(cfg.cache_dir).expanduser()
    download = bool(cfg.download)
    work = cache_dir / "pyg" / cls_name
    source = root / str(pyg_name or cls_name) / "raw"
    if not root.is_dir():
        raise DatasetNotFoundError(f"dataset.root={root} does not exist; set dataset.root or LIPGNN_DATA to the "
                                   f"folder holding {pyg_name or cls_name}/raw")
    kwargs = {"root": str(work)}
    if pyg_name is not None:
        kwargs["name"] = str(pyg_name)
    with file_lock(work / ".lock"):
        if source.is_dir() and any(source.iterdir()):
            target = _raw_dir(cls, work, str(pyg_name) if pyg_name is not None else None)
            for path in sorted(source.iterdir()):
                mirror_file(path, target / path.name)
            raw = source
        elif not download:
            raise DatasetNotFoundError(f"{cls_name}({pyg_name or ''}) not found: expected its raw files in {source}; "
                                       "set dataset.root or LIPGNN_DATA, or dataset.download=true with a network")
        else:
            raw = work
        try:
            dataset = cls(**kwargs)
        except Exception as exc:  # download or processing failure: one line
            raise DatasetNotFoundError(f"{cls_name}({pyg_name or ''}) could not be loaded from {raw} "
                                       f"({type(exc).__name__}: {exc})".replace("\n", " ")) from exc
    data = dataset[0]
    name = cfg.name.lower()
    graph = Data(x=data.x.float(), edge_index=data.edge_index, y=data.y.view(-1).long())
    has_masks = all(getattr(data, f"{s}_mask", None) is not None for s in ("train", "val", "test"))
    if has_masks:
        for split in ("train", "val", "test"):
            mask = getattr(data, f"{split}_mask")
            setattr(graph, f"{split}_mask", mask[:, seed % mask.size(1)] if mask.dim() == 2 else mask)
    info = apply_split(graph, cfg, name, seed, has_masks)
    graph, reorder_info = apply_reorder(graph, cfg.reorder)  # after the split
    info.update(reorder_info)
    info.update(raw_dir=str(Path(raw).resolve()), num_nodes=int(graph.num_nodes), num_edges=int(graph.num_edges),
                num_train=int(graph.train_mask.sum()), num_val=int(graph.val_mask.sum()),
                num_test=int(graph.test_mask.sum()))
    if device is not None:
        graph = graph.to(device)
    spec = DataSpec(num_features=int(graph.x.size(1)), num_classes=int(graph.y.max()) + 1,
                    step_edges=int(graph.num_edges))
    return TaskData(name=name, spec=spec, metric="acc", train_batches=lambda generator=None: [graph],
                    eval_batches=lambda: [graph], info=info)
