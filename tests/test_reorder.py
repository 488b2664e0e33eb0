"""dataset.reorder=rcm: reverse Cuthill-McKee relabelling is a permutation, shrinks the bandwidth, keeps the
split and the erased nodes, leaves every model's predictions unchanged up to the permutation, and is part
of a run's identity only when switched on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import compose_cfg, files_under, run_cli
from devices import seeded
from torch_geometric.data import Data

from lipgnn.data import load
from lipgnn.data.reorder import ReorderNodes, apply_reorder, bandwidth, rcm_order
from lipgnn.errors import ConfigError
from lipgnn.identity import run_id
from lipgnn.models import build_model
from lipgnn.runs import run


def _shuffled_path(n: int, seed: int = 0) -> Data:
    """A path 0-1-...-(n-1), undirected, with its nodes relabelled by a random permutation ``label``."""
    label = torch.randperm(n, generator=seeded(seed))
    a, b = torch.arange(n - 1), torch.arange(1, n)
    edge_index = torch.stack([torch.cat([label[a], label[b]]), torch.cat([label[b], label[a]])])
    x = torch.randn(n, 3, generator=seeded(seed + 1))
    mask = torch.zeros(n, dtype=torch.bool)
    mask[label[:2]] = True
    return Data(x=x, edge_index=edge_index, y=torch.arange(n), train_mask=mask,
                edge_attr=torch.arange(edge_index.size(1)).float())


def test_rcm_numbers_a_shuffled_path_in_order() -> None:
    data = _shuffled_path(12)
    assert bandwidth(data.edge_index)[0] > 1
    out = ReorderNodes()(data)
    # A path's reverse Cuthill-McKee order walks it end to end: every edge joins consecutive labels.
    assert bandwidth(out.edge_index) == (1, 1.0)


def test_the_relabelling_permutes_every_node_attribute_and_maps_every_edge() -> None:
    data = _shuffled_path(12, seed=3)
    out = ReorderNodes()(data)
    order = out.node_order
    assert torch.equal(torch.sort(order).values, torch.arange(12))
    assert torch.equal(out.x, data.x[order]) and torch.equal(out.y, data.y[order])
    assert torch.equal(out.train_mask, data.train_mask[order])
    # New edge (i, j) is old edge (order[i], order[j]), in the same position (edge attributes stay aligned).
    assert torch.equal(order[out.edge_index], data.edge_index)
    assert torch.equal(out.edge_attr, data.edge_attr)


def test_rcm_order_covers_isolated_nodes() -> None:
    order = rcm_order(torch.tensor([[0, 1], [1, 0]]), 4)
    assert sorted(order.tolist()) == [0, 1, 2, 3]


def test_unknown_method_is_a_config_error() -> None:
    data = _shuffled_path(4)
    with pytest.raises(ConfigError, match="dataset.reorder='bfs'"):
        apply_reorder(data, "bfs")
    assert apply_reorder(data, "none") == (data, {})


@pytest.mark.parametrize("model, impl", [("gat", "fused"), ("gat", "pyg"), ("gcn", "auto")])
def test_predictions_are_the_same_up_to_the_permutation(data_root: Path, model: str, impl: str) -> None:
    cfg = compose_cfg([f"model={model}", "norm=lip" if model == "gat" else "norm=none", "depth=4",
                       f"model.impl={impl}"])
    plain = load(cfg.dataset, 0).eval_batches()[0]
    cfg.dataset.reorder = "rcm"
    task = load(cfg.dataset, 0)
    moved = task.eval_batches()[0]
    torch.manual_seed(0)
    net = build_model(cfg.model, cfg.norm, task.spec, 4).eval()
    with torch.no_grad():
        out_plain, out_moved = net(plain.x, plain.edge_index), net(moved.x, moved.edge_index)
    assert torch.allclose(out_moved, out_plain[moved.node_order], atol=1e-5, rtol=1e-5)


def test_the_split_and_the_erased_nodes_are_those_of_the_original_order(data_root: Path) -> None:
    cfg = compose_cfg(["dataset=cora", "dataset.missing_rate=50"])
    plain = load(cfg.dataset, 0).eval_batches()[0]
    cfg.dataset.reorder = "rcm"
    task = load(cfg.dataset, 0)
    moved, order = task.eval_batches()[0], task.eval_batches()[0].node_order
    for split in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(order[moved[split]].sort().values, plain[split].nonzero().view(-1))
    erased_plain = (plain.x.abs().sum(1) == 0).nonzero().view(-1)
    assert torch.equal(order[moved.x.abs().sum(1) == 0].sort().values, erased_plain)
    assert task.info["reorder"] == "rcm"
    assert task.info["edge_gap_mean_after"] < task.info["edge_gap_mean_before"]


def test_ogbn_arxiv_is_relabelled_and_ogbn_proteins_refuses(tmp_path: Path) -> None:
    from ogb_fixture import write_arxiv, write_proteins

    root, cache = tmp_path / "root", tmp_path / "cache"
    fx = write_arxiv(root)
    write_proteins(root)
    common = [f"dataset.root={root}", f"dataset.cache_dir={cache}", "dataset.download=false"]
    plain = load(compose_cfg(["dataset=ogbn-arxiv", *common]).dataset, 0).eval_batches()[0]
    task = load(compose_cfg(["dataset=ogbn-arxiv", "dataset.reorder=rcm", *common]).dataset, 0)
    moved = task.eval_batches()[0]
    order = moved.node_order
    assert torch.equal(moved.y, plain.y[order]) and torch.equal(moved.x, plain.x[order])
    assert torch.equal(order[moved.edge_index], plain.edge_index)
    assert sorted(order[moved.train_mask].tolist()) == sorted(fx.split["train"].tolist())
    assert task.info["reorder"] == "rcm"
    with pytest.raises(ConfigError, match="ogbn-proteins trains on random node partitions"):
        load(compose_cfg(["dataset=ogbn-proteins", "dataset.reorder=rcm", *common]).dataset, 0)


def test_reorder_is_part_of_the_identity_only_when_on() -> None:
    base = compose_cfg(["dataset=pubmed"])
    assert run_id(compose_cfg(["dataset=pubmed", "dataset.reorder=none"])) == run_id(base)
    assert run_id(compose_cfg(["dataset=pubmed", "dataset.reorder=rcm"])) != run_id(base)


def test_a_reordered_run_trains_and_records_it(tmp_path: Path, data_root: Path) -> None:
    cfg = compose_cfg(["model=gat", "norm=lip", "depth=2", "train.epochs=30", "dataset.reorder=rcm",
                       f"results_dir={tmp_path}", "log.progress=false"])
    record = run(cfg)
    assert record["status"] == "completed" and record["best"]["val"] > 0.5
    assert record["config"]["dataset"]["reorder"] == "rcm" and record["info"]["reorder"] == "rcm"


def test_a_bad_reorder_value_is_one_line_exit_2_and_nothing_written(tmp_path: Path) -> None:
    proc = run_cli(["dataset=cora", "dataset.reorder=bfs", f"results_dir={tmp_path / 'res'}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "dataset.reorder" in proc.stderr and "rcm" in proc.stderr
    assert files_under(tmp_path) == []


def test_the_transform_refuses_anything_but_rcm() -> None:
    with pytest.raises(ValueError, match="'none'"):
        ReorderNodes("none")
