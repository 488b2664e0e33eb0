"""Tests of the dataset layer (lipgnn.data): Planetoid + missing-vector, TREES, OGB (tiny on-disk fixtures)."""

from __future__ import annotations

import math
import os
import shutil
import socket
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from devices import seeded
from ogb_fixture import write_arxiv, write_proteins
from omegaconf import OmegaConf
from torch import Tensor

import lipgnn.data.common as common
from lipgnn.config import CONF_DIR
from lipgnn.data import TaskData, load
from lipgnn.data.missing import erased_nodes
from lipgnn.data.trees import generate_trees, tree_edge_index
from lipgnn.errors import ConfigError, DatasetNotFoundError

CONF = Path(CONF_DIR) / "dataset"


def _data_root() -> Path | None:
    for candidate in (os.environ.get("LIPGNN_DATA"), "data"):
        if candidate and (Path(candidate) / "Cora" / "raw" / "ind.cora.graph").exists():
            return Path(candidate)
    return None


DATA_ROOT = _data_root()
needs_planetoid = pytest.mark.skipif(DATA_ROOT is None, reason="Planetoid raw files not available")


def dataset_cfg(name: str, **overrides: object):
    """The shipped conf/dataset/<name>.yaml with overrides (so the tests exercise its real keys)."""
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def single(task: TaskData):
    batches = list(task.train_batches(None))
    assert len(batches) == 1
    assert list(task.eval_batches())[0] is batches[0]  # full batch: the same graph from both callables
    return batches[0]


# --------------------------------------------------------------------------------------------- Planetoid

@pytest.fixture(scope="module")
def planetoid_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("planetoid_cache")


@pytest.fixture(scope="module")
def cora(planetoid_cache: Path) -> TaskData:
    return load(dataset_cfg("cora", root=str(DATA_ROOT), cache_dir=str(planetoid_cache), download=False), 0)


def cora_with(planetoid_cache: Path, rate: float, seed: int) -> TaskData:
    cfg = dataset_cfg("cora", root=str(DATA_ROOT), cache_dir=str(planetoid_cache), download=False,
                      missing_rate=rate)
    return load(cfg, seed)


@needs_planetoid
@pytest.mark.parametrize(
    "name, nodes, edges, feats, classes, split",
    [("cora", 2708, 10556, 1433, 7, (140, 500, 1000)),
     ("citeseer", 3327, 9104, 3703, 6, (120, 500, 1000)),
     ("pubmed", 19717, 88648, 500, 3, (60, 500, 1000))],
)
def test_planetoid_shapes_and_public_split(planetoid_cache: Path, name: str, nodes: int, edges: int,
                                           feats: int, classes: int, split: tuple[int, int, int]) -> None:
    task = load(dataset_cfg(name, root=str(DATA_ROOT), cache_dir=str(planetoid_cache), download=False), 0)
    data = single(task)
    assert task.metric == "acc" and task.spec.task == "node" and task.spec.input == "dense"
    assert (task.spec.num_features, task.spec.num_classes) == (feats, classes)
    assert tuple(data.x.shape) == (nodes, feats) and data.num_edges == edges == task.spec.step_edges
    assert int(data.y.max()) + 1 == classes
    sizes = (int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum()))
    assert sizes == split
    assert not (data.train_mask & data.val_mask).any() and not (data.val_mask & data.test_mask).any()
    assert task.info["missing_rate"] == 0 and task.info["num_erased"] == 0


@needs_planetoid
def test_planetoid_features_raw_and_root_untouched(cora: TaskData, tmp_path: Path) -> None:
    x = single(cora).x
    # Cora's bag-of-words is binary; row-normalised features would have rows summing to 1.
    assert set(x.unique().tolist()) == {0.0, 1.0}
    assert (x.sum(1) > 1).float().mean() > 0.9
    # Raw files are linked into the cache and processed there; nothing is written under the data root.
    before = sorted(p.relative_to(DATA_ROOT) for p in (DATA_ROOT / "Cora").rglob("*"))
    load(dataset_cfg("cora", root=str(DATA_ROOT), cache_dir=str(tmp_path), download=False), 0)
    assert sorted(p.relative_to(DATA_ROOT) for p in (DATA_ROOT / "Cora").rglob("*")) == before
    links = list((tmp_path / "Cora" / "raw").iterdir())
    assert len(links) == 8 and all(p.is_symlink() for p in links)
    assert (tmp_path / "Cora" / "processed" / "data.pt").exists()


@needs_planetoid
def test_missing_vector_erases_exactly_the_promised_set(cora: TaskData, planetoid_cache: Path) -> None:
    clean = single(cora)
    rate = 30
    torch.manual_seed(123)  # the erased set must not depend on global RNG state
    a = single(cora_with(planetoid_cache, rate, seed=5))
    torch.manual_seed(999)
    task_b = cora_with(planetoid_cache, rate, seed=5)
    b = single(task_b)

    pool = int((~clean.train_mask).sum())
    assert pool == 2708 - 140
    expected_count = int(pool * rate / 100)
    erased = erased_nodes(clean.train_mask, rate, "Cora", 5)
    assert erased.numel() == expected_count == 770
    assert task_b.info["num_erased"] == expected_count and task_b.info["missing_rate"] == rate
    assert erased.unique().numel() == expected_count
    assert not clean.train_mask[erased].any()
    assert (a.x[erased] == 0).all()
    keep = torch.ones(clean.num_nodes, dtype=torch.bool)
    keep[erased] = False
    assert torch.equal(a.x[keep], clean.x[keep])
    assert torch.equal(a.x, b.x)  # same seed, two loads: identical erasure
    # Nodes, edges, labels and masks stay.
    assert torch.equal(a.edge_index, clean.edge_index) and torch.equal(a.y, clean.y)
    assert torch.equal(a.train_mask, clean.train_mask)


@needs_planetoid
def test_missing_vector_seed_nesting_and_full_rate(cora: TaskData, planetoid_cache: Path) -> None:
    clean = single(cora)
    low = set(erased_nodes(clean.train_mask, 10, "Cora", 0).tolist())
    high = set(erased_nodes(clean.train_mask, 60, "Cora", 0).tolist())
    assert len(low) == int(2568 * 10 / 100) and low < high  # lower rates erase subsets of higher ones
    assert set(erased_nodes(clean.train_mask, 60, "Cora", 1).tolist()) != high
    assert set(erased_nodes(clean.train_mask, 60, "CiteSeer", 0).tolist()) != high

    full = cora_with(planetoid_cache, 100, seed=0)
    data = single(full)
    assert full.info["num_erased"] == 2568
    assert (data.x[~data.train_mask] == 0).all()
    assert torch.equal(data.x[data.train_mask], clean.x[clean.train_mask])


@needs_planetoid
@pytest.mark.parametrize("rate", [-1, 100.5, "ten", True])
def test_missing_rate_out_of_range_is_config_error(planetoid_cache: Path, rate: object) -> None:
    with pytest.raises(ConfigError, match="missing_rate"):
        cora_with(planetoid_cache, rate, seed=0)  # type: ignore[arg-type]


def _assert_one_line_not_found(exc: DatasetNotFoundError, root: Path) -> None:
    msg = str(exc)
    assert "\n" not in msg
    assert msg.startswith("Cora not found")
    assert f"{root}/Cora/raw/ind.cora.{{x,tx,allx,y,ty,ally,graph,test.index}}" in msg
    assert "LIPGNN_DATA" in msg and "dataset.root" in msg and "put the files there" in msg


def test_planetoid_missing_folder_offline_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "empty"
    cfg = dataset_cfg("cora", root=str(root), cache_dir=str(tmp_path / "cache"), download=False)
    start = time.monotonic()
    with pytest.raises(DatasetNotFoundError) as info:
        load(cfg, 0)
    assert time.monotonic() - start < 3
    _assert_one_line_not_found(info.value, root)
    assert "download is false" in str(info.value) and "dataset.download=true" in str(info.value)

    # download: true on a machine whose resolver hangs: the probe gives up after its timeout.
    def hang(*args: object, **kwargs: object) -> None:
        time.sleep(30)

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(common, "NET_PROBE_TIMEOUT_S", 0.5)
    cfg.download = True
    start = time.monotonic()
    with pytest.raises(DatasetNotFoundError) as info:
        load(cfg, 0)
    assert time.monotonic() - start < 3
    _assert_one_line_not_found(info.value, root)
    assert "unreachable" in str(info.value)
    # download is already on: the message must not ask to enable it
    assert "dataset.download=true" not in str(info.value)


def test_planetoid_offline_real_probe_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No mock of the probe itself: DNS failure is simulated at the resolver, as on an offline machine.
    def no_dns(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    cfg = dataset_cfg("cora", root=str(tmp_path / "r"), cache_dir=str(tmp_path / "c"), download=True)
    start = time.monotonic()
    with pytest.raises(DatasetNotFoundError, match="unreachable"):
        load(cfg, 0)
    assert time.monotonic() - start < 3


@needs_planetoid
def test_planetoid_download_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a network, files are fetched into the (writable) data root; a failed download leaves nothing."""
    import torch_geometric.data

    fetched: list[str] = []

    def fake_download(url: str, folder: str, log: bool = True) -> str:
        name = url.rpartition("/")[2]
        fetched.append(url)
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_ROOT / "Cora" / "raw" / name, Path(folder) / name)
        return str(Path(folder) / name)

    monkeypatch.setattr("lipgnn.data.planetoid.network_reachable", lambda *a, **k: True)
    monkeypatch.setattr(torch_geometric.data, "download_url", fake_download)
    root = tmp_path / "root"
    task = load(dataset_cfg("cora", root=str(root), cache_dir=str(tmp_path / "cache"), download=True), 0)
    assert len(fetched) == 8 and all(u.startswith("https://github.com/kimiyoung/planetoid/raw/") for u in fetched)
    assert len(list((root / "Cora" / "raw").iterdir())) == 8
    assert single(task).num_nodes == 2708

    def broken(url: str, folder: str, log: bool = True) -> str:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / url.rpartition("/")[2]).write_text("partial")
        raise OSError("connection reset")

    monkeypatch.setattr(torch_geometric.data, "download_url", broken)
    root2 = tmp_path / "root2"
    cfg = dataset_cfg("cora", root=str(root2), cache_dir=str(tmp_path / "cache2"), download=True)
    with pytest.raises(DatasetNotFoundError, match="download failed: OSError: connection reset"):
        load(cfg, 0)
    assert list((root2 / "Cora" / "raw").iterdir()) == []


def test_unknown_kind_and_name_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="kind"):
        load({"kind": "tudataset", "name": "x"}, 0)
    with pytest.raises(ConfigError, match="pyg_name"):
        load({"kind": "planetoid", "pyg_name": "Amazon", "root": "data"}, 0)
    with pytest.raises(ConfigError, match="ogbn-products"):
        load({"kind": "ogb", "name": "ogbn-products", "root": "data"}, 0)


# ------------------------------------------------------------------------------------------------- TREES

def trees_task(tmp_path: Path, depth: int, num_trees: int, seed: int = 0, batch_size: int = 64) -> TaskData:
    cfg = dataset_cfg("trees", tree_depth=depth, num_trees=num_trees, batch_size=batch_size, sampling="trees",
                      cache_dir=str(tmp_path / "cache"))
    return load(cfg, seed)


def test_trees_depth2_by_hand(tmp_path: Path) -> None:
    assert tree_edge_index(2, self_loops=False).tolist() == [[1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 2, 2]]
    assert tree_edge_index(2).tolist() == [[1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6],
                                           [0, 0, 1, 1, 2, 2, 0, 1, 2, 3, 4, 5, 6]]
    task = trees_task(tmp_path, depth=2, num_trees=10, batch_size=2)
    perm, target = generate_trees(2, 10, 0)
    assert task.spec.input == "embedding" and task.spec.num_features == 0 and task.spec.task == "tree"
    assert task.spec.num_classes == 5 and task.spec.vocab_sizes == (5, 5) and task.metric == "acc"
    batch = next(iter(task.eval_batches()))  # trees 0 and 1
    assert batch.num_nodes == 14
    assert batch.edge_index.tolist() == [[1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6,
                                          8, 9, 10, 11, 12, 13, 7, 8, 9, 10, 11, 12, 13],
                                         [0, 0, 1, 1, 2, 2, 0, 1, 2, 3, 4, 5, 6,
                                          7, 7, 8, 8, 9, 9, 7, 8, 9, 10, 11, 12, 13]]
    for j in range(2):
        p, t = perm[j].tolist(), int(target[j])
        expected_x = [[t, 0], [0, 0], [0, 0], [1, p[0] + 1], [2, p[1] + 1], [3, p[2] + 1], [4, p[3] + 1]]
        assert batch.x[7 * j:7 * (j + 1)].tolist() == expected_x
        assert batch.y[7 * j:7 * (j + 1)].tolist() == [p[t - 1] + 1] + [-1] * 6
    scored = batch.train_mask | batch.val_mask | batch.test_mask
    assert scored.nonzero().view(-1).tolist() == [0, 7]
    assert batch.x.dtype == torch.long and batch.y.dtype == torch.long


def test_trees_labels_solvable_by_oracle(tmp_path: Path) -> None:
    depth, leaves, n = 4, 16, 31
    task = trees_task(tmp_path, depth=depth, num_trees=300, batch_size=128)
    seen = 0
    for batch in task.eval_batches():
        x = batch.x.view(-1, n, 2)
        y = batch.y.view(-1, n)
        leaf_keys, leaf_vals = x[:, leaves - 1:, 0], x[:, leaves - 1:, 1]
        match = leaf_keys == x[:, :1, 0]
        assert (match.sum(1) == 1).all()  # exactly one leaf carries the root's key
        assert torch.equal(leaf_vals[match], y[:, 0])  # the oracle reproduces every label
        assert (x[:, 1:leaves - 1] == 0).all() and (x[:, 0, 1] == 0).all()
        assert (y[:, 1:] == -1).all()
        assert (batch.x[:, 0] < task.spec.vocab_sizes[0]).all() and (batch.x[:, 1] < task.spec.vocab_sizes[1]).all()
        seen += x.size(0)
    assert seen == 300


def test_trees_every_path_reaches_root_in_d_hops(tmp_path: Path) -> None:
    depth = 5
    task = trees_task(tmp_path, depth=depth, num_trees=20, batch_size=8)
    batch = next(iter(task.eval_batches()))
    src, dst = batch.edge_index
    assert int((src == dst).sum()) == batch.num_nodes  # one self-loop per node (Alon & Yahav's data) ...
    src, dst = src[src != dst], dst[src != dst]  # ... and the tree edges
    assert torch.bincount(src, minlength=batch.num_nodes).max() == 1  # one outgoing edge (to the parent)
    parent = torch.full((batch.num_nodes,), -1)
    parent[src] = dst
    is_root = torch.zeros(batch.num_nodes, dtype=torch.bool)
    is_root[batch.root_index] = True
    assert torch.equal(parent == -1, is_root)
    is_leaf = (batch.x[:, 0] > 0) & ~is_root
    assert int(is_leaf.sum()) == 8 * 2**depth
    node = is_leaf.nonzero().view(-1)
    start_tree = batch.batch[node]
    for hop in range(depth):
        assert not is_root[node].any(), f"a leaf reached a root after {hop} hops"
        node = parent[node]
        assert torch.equal(batch.batch[node], start_tree)  # paths never leave their tree
    assert is_root[node].all()
    scored = batch.train_mask | batch.val_mask | batch.test_mask
    assert torch.equal(scored, is_root)


def test_trees_deterministic_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p1, t1 = generate_trees(3, 200, seed=7)
    p2, t2 = generate_trees(3, 200, seed=7)
    p3, t3 = generate_trees(3, 200, seed=8)
    assert torch.equal(p1, p2) and torch.equal(t1, t2)
    assert not torch.equal(p1, p3) and not torch.equal(t1, t3)
    assert torch.equal(p1.sort(1).values, torch.arange(8).expand(200, 8))  # each row is a permutation
    assert int(t1.min()) >= 1 and int(t1.max()) <= 8

    a = torch.cat([b.x for b in trees_task(tmp_path, 3, 200, seed=7).eval_batches()])
    cached = tmp_path / "cache" / "trees"
    assert len(list(cached.glob("*d3_n200_seed7*.pt"))) == 1

    def refuse(*args: object) -> None:
        raise AssertionError("should have been read from the cache")

    monkeypatch.setattr("lipgnn.data.trees.generate_trees", refuse)
    b = torch.cat([b.x for b in trees_task(tmp_path, 3, 200, seed=7).eval_batches()])
    assert torch.equal(a, b)


def test_trees_split_and_batching(tmp_path: Path) -> None:
    task = trees_task(tmp_path, depth=3, num_trees=1000, batch_size=96)
    assert (task.info["num_train"], task.info["num_val"], task.info["num_test"]) == (800, 100, 100)
    assert task.info["tree_depth"] == 3
    eval_ids = torch.cat([b.tree_id for b in task.eval_batches()])
    assert torch.equal(eval_ids, torch.arange(1000))  # eval covers every tree once
    counts = [int(b.train_mask.sum() + b.val_mask.sum() + b.test_mask.sum()) for b in task.eval_batches()]
    assert sum(counts) == 1000

    def epoch(seed: int) -> list[Tensor]:
        return [b.tree_id for b in task.train_batches(seeded(seed))]

    first = epoch(0)
    assert all(ids.numel() <= 96 for ids in first) and len(first) == math.ceil(800 / 96)
    train_ids = torch.cat(first)
    assert train_ids.unique().numel() == 800
    batch = next(iter(task.train_batches(seeded(0))))
    assert int(batch.train_mask.sum()) == batch.tree_id.numel()
    assert not batch.val_mask.any() and not batch.test_mask.any()
    assert all(torch.equal(u, v) for u, v in zip(first, epoch(0), strict=True))
    assert not torch.equal(train_ids, torch.cat(epoch(1)))  # reshuffled with the generator
    assert torch.equal(train_ids.sort().values, torch.cat(epoch(1)).sort().values)


def test_trees_depth10_is_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    task = trees_task(tmp_path, depth=10, num_trees=5000, batch_size=1024)
    batch = next(iter(task.train_batches(seeded(0))))
    assert batch.num_nodes == 1024 * 2047 and batch.num_edges == 1024 * (2046 + 2047)
    assert task.spec.num_classes == 1025
    assert time.monotonic() - start < 10


def test_trees_bad_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tree_depth"):
        trees_task(tmp_path, depth=0, num_trees=10)
    with pytest.raises(ConfigError, match="train_fraction"):
        load(dataset_cfg("trees", train_fraction=1.5, cache_dir=str(tmp_path)), 0)


# --------------------------------------------------------------------------------------------------- OGB


@pytest.fixture(scope="module")
def ogb_env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("ogb")
    root = base / "root"
    fixtures = {"ogbn-arxiv": write_arxiv(root), "ogbn-proteins": write_proteins(root)}
    for path in [p for p in root.rglob("*")] + [root]:  # a read-only data root, like a shared dataset folder
        path.chmod(0o555 if path.is_dir() else 0o444)
    tasks = {
        name: load(dataset_cfg(name, root=str(root), cache_dir=str(base / "cache"), num_parts=3), 0)
        for name in fixtures
    }
    yield {"root": root, "cache": base / "cache", "fixtures": fixtures, "tasks": tasks}
    for path in [root] + list(root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_ogb_arxiv_from_fixture(ogb_env: dict) -> None:
    task, fx = ogb_env["tasks"]["ogbn-arxiv"], ogb_env["fixtures"]["ogbn-arxiv"]
    data = single(task)
    assert task.metric == "acc" and not task.spec.multilabel
    assert (task.spec.num_features, task.spec.num_classes) == (128, 40)
    assert torch.allclose(data.x, torch.tensor(fx.node_feat, dtype=torch.float32))
    assert data.y.shape == (12,) and data.y.tolist() == fx.labels[:, 0].tolist()
    for mask, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        assert data[mask].nonzero().view(-1).tolist() == fx.split[part].tolist()
    # to_undirected: each of the 11 citations in both directions.
    pairs = set(map(tuple, data.edge_index.t().tolist()))
    expected = {(int(s), int(d)) for s, d in fx.edges} | {(int(d), int(s)) for s, d in fx.edges}
    assert pairs == expected and data.num_edges == 22 == task.spec.step_edges
    directed = single(load(dataset_cfg("ogbn-arxiv", root=str(ogb_env["root"]), cache_dir=str(ogb_env["cache"]),
                                       to_undirected=False), 0))
    assert directed.edge_index.t().tolist() == fx.edges.tolist()
    assert not (ogb_env["root"] / "ogbn_arxiv" / "processed").exists()  # processed in the cache only


def test_ogb_proteins_from_fixture(ogb_env: dict) -> None:
    task, fx = ogb_env["tasks"]["ogbn-proteins"], ogb_env["fixtures"]["ogbn-proteins"]
    assert task.metric == "rocauc" and task.spec.multilabel
    assert (task.spec.num_features, task.spec.num_classes, task.spec.edge_dim) == (8, 112, None)
    # Hand-computed node features: ogb stores each undirected edge once and adds its reverse, so a node
    # receives the features of every edge touching it.
    x_expected = np.zeros((fx.num_nodes, 8))
    for (u, v), feat in zip(fx.edges, fx.edge_feat, strict=True):
        x_expected[u] += feat
        x_expected[v] += feat
    batches = list(task.eval_batches())
    assert len(batches) == 3 and sum(b.num_nodes for b in batches) == fx.num_nodes
    x = torch.cat([b.x for b in batches])
    y = torch.cat([b.y for b in batches])
    assert torch.allclose(x, torch.tensor(x_expected, dtype=torch.float32), atol=1e-5)
    assert y.dtype == torch.float32 and torch.equal(y, torch.tensor(fx.labels, dtype=torch.float32))
    train = torch.cat([b.train_mask for b in batches]).nonzero().view(-1).tolist()
    assert train == fx.split["train"].tolist()
    # step_edges: the expected edges of a full batch (ceil(N / 3) random nodes and the edges among them),
    # against the mean over 300 epochs of real batches.
    size = math.ceil(fx.num_nodes / 3)
    per_batch = [b.num_edges for seed in range(300) for b in task.train_batches(seeded(seed)) if b.num_nodes == size]
    assert task.spec.step_edges == pytest.approx(statistics.mean(per_batch), rel=0.1, abs=1)
    assert task.spec.step_edges == 2 * len(fx.edges) * size * (size - 1) // (fx.num_nodes * (fx.num_nodes - 1))

    def epoch(seed: int) -> list[Tensor]:
        return [b.y for b in task.train_batches(seeded(seed))]

    first = epoch(0)
    assert sum(len(b) for b in first) == fx.num_nodes  # a partition: each node exactly once per epoch
    assert all(torch.equal(a, b) for a, b in zip(first, epoch(0), strict=True))
    rows = sorted(map(tuple, torch.cat(first).long().tolist()))
    assert rows == sorted(map(tuple, fx.labels.tolist()))


def test_ogb_evaluator_on_hand_made_predictions(ogb_env: dict) -> None:
    arxiv = ogb_env["tasks"]["ogbn-arxiv"]
    y = single(arxiv).y
    logits = torch.nn.functional.one_hot(y, 40).float()
    logits[:3] = torch.nn.functional.one_hot((y[:3] + 1) % 40, 40).float()  # 3 of 12 wrong
    assert arxiv.score(logits, y) == pytest.approx(0.75)

    proteins = ogb_env["tasks"]["ogbn-proteins"]
    y_true = torch.tensor([1.0, 0.0, 1.0, 0.0]).repeat(112, 1).t().contiguous()
    scores = torch.tensor([0.9, 0.1, 0.4, 0.6]).repeat(112, 1).t().contiguous()
    scores[:, ::2] = y_true[:, ::2]  # even tasks ranked perfectly (AUC 1), odd tasks 3 of 4 pairs (AUC .75)
    assert proteins.score(scores, y_true) == pytest.approx(0.875)


def test_ogb_missing_files_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           ogb_env: dict) -> None:
    def no_prompt(*args: object) -> str:
        raise AssertionError("ogb must never prompt")

    monkeypatch.setattr("builtins.input", no_prompt)
    monkeypatch.setattr(common, "NET_PROBE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(socket.gaierror(-2, "x")))
    root = tmp_path / "data"
    start = time.monotonic()
    with pytest.raises(DatasetNotFoundError) as info:
        load(dataset_cfg("ogbn-arxiv", root=str(root), cache_dir=str(tmp_path / "c"), download=True), 0)
    msg = str(info.value)
    assert time.monotonic() - start < 3 and "\n" not in msg
    assert msg.startswith(f"ogbn-arxiv not found: expected {root}/ogbn_arxiv/{{raw/edge.csv.gz,")
    assert "raw/node-feat.csv.gz" in msg and "split/time/train.csv.gz" in msg and "RELEASE_v1.txt" in msg

    # Files present but no RELEASE_v1.txt: ogb would ask on stdin whether to re-download; we refuse first.
    partial = tmp_path / "partial"
    shutil.copytree(ogb_env["fixtures"]["ogbn-proteins"].folder, partial / "ogbn_proteins")
    for path in [partial, *partial.rglob("*")]:  # the copy inherits the fixture's read-only modes
        path.chmod(0o755 if path.is_dir() else 0o644)
    (partial / "ogbn_proteins" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="ogbn-proteins not found.*RELEASE_v1.txt"):
        load(dataset_cfg("ogbn-proteins", root=str(partial), cache_dir=str(tmp_path / "c"), download=False), 0)


# ------------------------------------------------------------------------------------- random splits, pyg


def test_random_split_is_seeded_and_follows_its_policy() -> None:
    from lipgnn.data.splits import random_split

    y = torch.arange(4).repeat_interleave(25)  # 100 nodes, 4 classes of 25
    kwargs = {"train_per_class": None, "train_fraction": 0.6, "val_fraction": 0.2, "test_fraction": 0.2}
    train, val, test = random_split(y, "toy", 0, **kwargs)
    assert (int(train.sum()), int(val.sum()), int(test.sum())) == (60, 20, 20)
    assert not (train & val).any() and not (train & test).any() and not (val & test).any()
    again = random_split(y, "toy", 0, **kwargs)
    other = random_split(y, "toy", 1, **kwargs)
    assert torch.equal(again[0], train) and not torch.equal(other[0], train)
    train, val, test = random_split(y, "toy", 0, **{**kwargs, "train_per_class": 5, "val_fraction": 0.25,
                                                    "test_fraction": 0.75})
    assert [int((train & (y == c)).sum()) for c in range(4)] == [5, 5, 5, 5]
    assert (int(val.sum()), int(test.sum())) == (20, 60)  # the other 80 nodes, split 1:3


@needs_planetoid
def test_planetoid_random_split_is_recorded_with_the_real_root(tmp_path: Path) -> None:
    cfg = dataset_cfg("cora", root=str(DATA_ROOT), cache_dir=str(tmp_path), download=False, split="random")
    task = load(cfg, 3)
    data = single(task)
    assert (int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum())) == (1625, 542, 541)
    assert task.info["split"] == "random" and task.info["split_seed"] == 3 and task.info["train_fraction"] == 0.6
    assert task.info["raw_dir"] == str((DATA_ROOT / "Cora" / "raw").resolve())


@needs_planetoid
def test_a_nonexistent_root_fails_even_when_the_cache_holds_a_copy(tmp_path: Path) -> None:
    load(dataset_cfg("cora", root=str(DATA_ROOT), cache_dir=str(tmp_path), download=False), 0)
    with pytest.raises(DatasetNotFoundError, match="expected /nonexistent/Cora/raw/ind.cora"):
        load(dataset_cfg("cora", root="/nonexistent", cache_dir=str(tmp_path), download=False), 0)


@needs_planetoid
def test_pyg_loads_a_torch_geometric_class_from_a_read_only_root(tmp_path: Path) -> None:
    """dataset=pyg with a class that has its own masks (Planetoid) uses them; the root is never written."""
    root = tmp_path / "root"
    shutil.copytree(DATA_ROOT / "Cora" / "raw", root / "Cora" / "raw")
    for path in [*root.rglob("*"), root]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    cfg = dataset_cfg("pyg", root=str(root), cache_dir=str(tmp_path / "cache"), cls="Planetoid", pyg_name="Cora")
    cfg.name = "cora-pyg"
    task = load(cfg, 0)
    data = single(task)
    assert int(data.train_mask.sum()) == 140 and task.info["split"] == "public" and task.spec.num_classes == 7
    assert sorted(p.name for p in root.iterdir()) == ["Cora"] and not (root / "Cora" / "processed").exists()
    with pytest.raises(ConfigError, match="not a class of torch_geometric.datasets"):
        load(dataset_cfg("pyg", cls="Nope", root=str(root)), 0)


@pytest.mark.slow
def test_coauthor_cs_loads_with_a_random_split() -> None:
    if DATA_ROOT is None or not (DATA_ROOT / "CS" / "raw").is_dir():
        pytest.skip("Coauthor CS raw file not available under LIPGNN_DATA")
    task = load(dataset_cfg("cs", root=str(DATA_ROOT)), 0)
    assert task.spec.num_classes == 15 and task.info["split"] == "random" and task.info["num_train"] == 11000
