"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's ``Planetoid``: the public split, or a
seeded random one (``dataset.split=random``, :mod:`lipgnn.data.splits`).

The data root may be read-only (e.g. a shared dataset folder) while PyG writes ``processed/`` beside
``raw/``: the raw files are therefore mirrored (symlinks) into ``cache_dir/<Name>/raw`` and PyG processes
there. Features stay raw (no row normalisation), as in the authors' code.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch_geometric.data import Data

from lipgnn.config_schema import PlanetoidConfig
from lipgnn.data.common import (
    all_exist,
    download_timeout,
    file_lock,
    is_writable_dir,
    mirror_files,
    missing_data_fix,
    network_reachable,
)
from lipgnn.data.missing import apply_missing_vector
from lipgnn.data.reorder import apply_reorder
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.data.splits import apply_split
from lipgnn.errors import DatasetNotFoundError

NAMES = ("Cora", "CiteSeer", "PubMed")
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
# The URL PyG's Planetoid downloads from (kimiyoung/planetoid).
URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
URL_HOST = "github.com"


def raw_file_names(name: str) -> list[str]:
    return [f"ind.{name.lower()}.{suffix}" for suffix in SUFFIXES]


def _download(name: str, folder: Path) -> None:
    """Fetch the raw files into ``folder``; partial files are removed so a retry starts clean."""
    from torch_geometric.data import download_url

    try:
        with download_timeout():
            for file_name in raw_file_names(name):
                download_url(f"{URL}/{file_name}", str(folder), log=False)
    except Exception:
        for file_name in raw_file_names(name):
            (folder / file_name).unlink(missing_ok=True)
        raise


def locate_raw(name: str, root: Path, cache_dir: Path, download: bool) -> Path:
    """Folder holding the 8 raw files of ``name``; downloads them if allowed, else one clear error.

    The files are looked up under ``root`` only (``cache_dir/<Name>/raw`` is a mirror of them, never a
    source: a mistyped ``dataset.root`` must fail, not reuse an earlier run's files). A download goes into
    ``root`` when it is writable, else into ``cache_dir/downloads`` (and the record names that folder).
    """
    files = raw_file_names(name)
    downloaded = cache_dir / "downloads" / name / "raw"
    if all_exist(root / name / "raw", files):
        return root / name / "raw"
    if not root.exists() and not is_writable_dir(root):
        raise DatasetNotFoundError(f"dataset.root={root} does not exist; set dataset.root or LIPGNN_DATA to the "
                                   f"folder holding {name}/raw")
    if download and all_exist(downloaded, files) and not is_writable_dir(root / name / "raw"):
        return downloaded
    if not download:
        reason = "dataset.download is false"
    elif not network_reachable(URL_HOST):
        reason = f"no network: {URL_HOST} unreachable"
    else:
        # Prefer the data root (shared by later runs); fall back to the cache when the root is read-only.
        target = root / name / "raw" if is_writable_dir(root / name / "raw") else downloaded
        try:
            _download(name, target)
            return target
        except Exception as exc:  # any network/IO failure ends in the one-line error below
            reason = f"download failed: {type(exc).__name__}: {exc}".replace("\n", " ")
    expected = f"{root / name / 'raw'}/ind.{name.lower()}.{{{','.join(SUFFIXES)}}}"
    raise DatasetNotFoundError(
        f"{name} not found: expected {expected}; {missing_data_fix(f'{name}/raw/', download, reason)}"
    )


def load_planetoid_data(name: str, root: Path, cache_dir: Path, download: bool) -> tuple[Data, Path]:
    """The processed PyG graph (public split), processed under ``cache_dir`` and never under ``root``, and
    the folder its raw files came from."""
    from torch_geometric.datasets import Planetoid

    raw = locate_raw(name, root, cache_dir, download)
    work = cache_dir / name
    with file_lock(cache_dir / f".{name}.lock"):
        if raw.resolve() != (work / "raw").resolve() and mirror_files(raw, work / "raw", raw_file_names(name)):
            # New or re-pointed raw files: drop any processed data made from the old ones.
            for stale in (work / "processed").glob("*"):
                stale.unlink()
        try:
            dataset = Planetoid(str(cache_dir), name, split="public")
        except Exception as exc:
            raise DatasetNotFoundError(
                f"{name}: PyG could not read the raw files in {raw} ({type(exc).__name__}: {exc}); "
                f"replace them or delete {work}".replace("\n", " ")
            ) from exc
    data = dataset[0]
    return Data(x=data.x, edge_index=data.edge_index, y=data.y, train_mask=data.train_mask,
                val_mask=data.val_mask, test_mask=data.test_mask), raw


def load_planetoid(cfg: PlanetoidConfig, seed: int, device: torch.device | str | None = None) -> TaskData:
    """``TaskData`` for a Planetoid config (full batch); applies the missing-vector setting if asked."""
    name, rate = cfg.pyg_name, float(cfg.missing_rate)
    root, cache_dir = Path(cfg.root).expanduser(), Path(cfg.cache_dir).expanduser()
    download = bool(cfg.download)

    data, raw = load_planetoid_data(name, root, cache_dir, download)
    split_info = apply_split(data, cfg, name, seed, has_masks=True)
    data, info = apply_missing_vector(data, rate, name, seed)
    # After the split and the erasure, so the same nodes train and lose their features whatever the order.
    data, reorder_info = apply_reorder(data, cfg.reorder)
    info.update(split_info, **reorder_info, raw_dir=str(raw.resolve()))
    info.update(num_nodes=int(data.num_nodes), num_edges=int(data.num_edges),
                num_train=int(data.train_mask.sum()), num_val=int(data.val_mask.sum()),
                num_test=int(data.test_mask.sum()))
    if device is not None:
        data = data.to(device)
    spec = DataSpec(num_features=int(data.x.size(1)), num_classes=int(data.y.max()) + 1,
                    step_edges=int(data.num_edges))

    def batches(generator: torch.Generator | None = None) -> list[Data]:
        return [data]

    return TaskData(name=cfg.name, spec=spec, metric="acc",
                    train_batches=batches, eval_batches=lambda: [data], info=info)
