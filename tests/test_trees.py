"""Fig. 5 on Alon & Yahav's TREES protocol (tech-srl/bottleneck): the data, the composed config, the model it
builds and the trainer's stopping/scheduling rules, each checked against values worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import compose_cfg
from omegaconf import OmegaConf
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv

from lipgnn.config import CONF_DIR, validate
from lipgnn.data import load
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.data.trees import generate_alon_yahav, tree_labels
from lipgnn.errors import ConfigError
from lipgnn.identity import identity_config
from lipgnn.models import build_model
from lipgnn.train.trainer import Trainer

CONF = Path(CONF_DIR)


def trees(tmp_path: Path, depth: int, batch_size: int = 8000, **keys: object) -> TaskData:
    cfg = OmegaConf.load(CONF / "dataset" / "trees.yaml")
    for key, value in {"tree_depth": depth, "batch_size": batch_size, "cache_dir": str(tmp_path), **keys}.items():
        cfg[key] = value
    return load(cfg, 11)


# ------------------------------------------------------------------------------------------------ data

@pytest.mark.parametrize(("depth", "expected"), [(2, 96), (3, 8000), (4, 16000), (5, 32000), (6, 32000)])
def test_alon_yahav_example_counts(depth: int, expected: int) -> None:
    # min(1000, L!, 32000 // L) permutations x L target keys: 24*4, 1000*8, 1000*16, 1000*32, 500*64.
    perm, target = generate_alon_yahav(depth, seed=11)
    leaves = 2**depth
    assert perm.shape == (expected, leaves) and target.shape == (expected,)
    blocks = perm.view(-1, leaves, leaves)
    assert (blocks == blocks[:, :1]).all()  # one permutation per block of L examples ...
    assert torch.equal(target.view(-1, leaves), torch.arange(1, leaves + 1).expand(blocks.size(0), -1))  # every key
    assert torch.equal(blocks[:, 0].sort(1).values, torch.arange(leaves).expand(blocks.size(0), -1))
    if depth <= 3:  # A&Y sample distinct permutations there (all 24 at d = 2)
        assert blocks[:, 0].unique(dim=0).size(0) == blocks.size(0)


def test_both_example_sets_are_available(tmp_path: Path) -> None:
    assert trees(tmp_path, 3).info["num_examples"] == 8000
    assert trees(tmp_path, 3, sampling="trees", num_trees=5000).info["num_examples"] == 5000
    with pytest.raises(ConfigError, match="sampling"):
        trees(tmp_path, 3, sampling="paper")


def test_leaf_values_one_to_L_with_zero_empty_and_L_plus_one_classes(tmp_path: Path) -> None:
    depth, leaves, n = 3, 8, 15
    task = trees(tmp_path, depth)
    assert task.spec.num_classes == leaves + 1 and task.spec.vocab_sizes == (leaves + 1, leaves + 1)
    batch = next(iter(task.eval_batches()))
    x, y = batch.x.view(-1, n, 2), batch.y.view(-1, n)
    assert torch.equal(x[:, leaves - 1:, 1].sort(1).values, torch.arange(1, leaves + 1).expand(x.size(0), -1))
    assert (x[:, :leaves - 1, 1] == 0).all()  # root and internal nodes: value 0 = empty, never a leaf's value
    assert (x[:, 1:leaves - 1, 0] == 0).all() and ((x[:, 0, 0] >= 1) & (x[:, 0, 0] <= leaves)).all()
    match = x[:, leaves - 1:, 0] == x[:, :1, 0]
    assert torch.equal(x[:, leaves - 1:, 1][match], y[:, 0])  # label = the matching leaf's value, in 1..L
    assert int(y[:, 0].min()) == 1 and int(y[:, 0].max()) == leaves


def test_split_is_stratified_80_20(tmp_path: Path) -> None:
    task = trees(tmp_path, 3)
    info = task.info
    assert (info["num_train"], info["num_val"], info["num_test"]) == (6400, 800, 800)
    batch = next(iter(task.eval_batches()))
    roots = batch.root_index
    y = batch.y[roots]
    for split, share in (("train_mask", 0.8), ("val_mask", 0.1), ("test_mask", 0.1)):
        mask = getattr(batch, split)[roots]
        for label in range(1, 9):  # every class holds its share of the split, to one example
            total = int((y == label).sum())
            assert abs(int((mask & (y == label)).sum()) - share * total) <= 1


def test_every_node_has_one_self_loop(tmp_path: Path) -> None:
    batch = next(iter(trees(tmp_path, 2, batch_size=5).eval_batches()))
    src, dst = batch.edge_index
    loops = src[src == dst]
    assert torch.equal(loops.sort().values, torch.arange(batch.num_nodes))
    assert int((src != dst).sum()) == 5 * 6  # plus the child -> parent edges


def test_batches_of_one_size_share_their_edge_index_and_its_csr_graph(tmp_path: Path) -> None:
    """Full batches reuse one edge_index tensor (so the fused layers' CSR graph is built once per size);
    its values are each batch's disjoint union, and the last, smaller batch has its own."""
    from lipgnn.nn.fused import get_csr_graph

    task = trees(tmp_path, 2, batch_size=40)  # 96 examples: batches of 40, 40, 16
    with torch.inference_mode():  # an evaluation that meets each size first ...
        first = list(task.eval_batches())
    assert not any(b.edge_index.is_inference() for b in first)  # ... leaves normal tensors for training
    batches = list(task.eval_batches())
    assert batches[0].edge_index is first[0].edge_index
    assert [b.root_index.numel() for b in batches] == [40, 40, 16]
    assert batches[0].edge_index is batches[1].edge_index and batches[2].edge_index is not batches[0].edge_index
    template = batches[2].edge_index[:, batches[2].edge_index.max(dim=0).values < 7]  # tree 0 of a batch
    for b in batches:
        count = b.root_index.numel()
        expected = torch.cat([template + 7 * k for k in range(count)], dim=1)
        assert torch.equal(b.edge_index, expected)
    assert get_csr_graph(batches[0].edge_index, 280, True) is get_csr_graph(batches[1].edge_index, 280, True)


def test_labels_match_a_hand_built_tree() -> None:
    perm = torch.tensor([[2, 0, 3, 1]])  # leaf values 3, 1, 4, 2
    assert tree_labels(perm, torch.tensor([1])).tolist() == [3]
    assert tree_labels(perm, torch.tensor([4])).tolist() == [2]


# ------------------------------------------------------------------------------------------- the config

BATCH = {2: 64, 3: 64, 4: 1024, 5: 1024, 6: 1024, 7: 2048, 8: 2048}
BLOCK = {"gat": ("post", "none"), "gcn": ("post", "relu"), "gin": ("post", "relu"), "ggnn": ("none", "none")}


@pytest.mark.parametrize("depth", [2, 3, 4, 7])
@pytest.mark.parametrize("variant", ["gat", "gat_lip_a5", "gcn", "gin", "ggnn"])
def test_fig5_composes_to_alon_yahav(depth: int, variant: str) -> None:
    cfg = compose_cfg(["experiment=fig5", f"variant={variant}", f"dataset.tree_depth={depth}", "budget=paper"])
    validate(cfg)
    assert cfg.experiment_name == "fig5" and cfg.seed == 11 and cfg.depth == depth + 1
    assert cfg.dataset.sampling == "alon_yahav" and cfg.dataset.train_fraction == 0.8
    assert cfg.dataset.batch_size == BATCH[depth]
    model, train = cfg.model, cfg.train
    assert (model.hidden, model.dropout, model.attn_dropout) == (32, 0.0, 0.0)
    assert (model.layer_norm, model.activation) == BLOCK[model.name] and model.act_on_last and not model.residual
    if model.name == "gat":
        assert model.heads == 4 and model.head_aggregation == "concat"
    assert cfg.norm.name == ("lip" if variant.startswith("gat_lip") else "none")
    assert train.lr == 0.001 and train.weight_decay == 0.0
    assert (train.scheduler, train.plateau_mode, train.plateau_factor, train.plateau_patience,
            train.plateau_threshold_mode) == ("plateau", "max", 0.5, 10, "abs")
    assert train.eval_every == (1000 if depth == 2 else 100)  # scheduler cadence
    assert (train.train_metric, train.stop_at_train, train.train_patience) == ("online", 1.0, 20)
    assert train.epochs == 50000 and train.num_threads == 1


def test_fig5_cpu_budget_caps_passes_from_depth_4() -> None:
    caps = {d: compose_cfg(["experiment=fig5", "budget=cpu", f"dataset.tree_depth={d}"]).train.epochs
            for d in (2, 3, 4, 5)}
    assert caps == {2: 50000, 3: 50000, 4: 500, 5: 150}


def test_fig5_legacy_keeps_the_old_block() -> None:
    cfg = compose_cfg(["experiment=fig5_legacy", "variant=gat", "dataset.tree_depth=2"])
    validate(cfg)
    assert cfg.experiment_name == "fig5_legacy" and cfg.model.heads == 1 and cfg.model.layer_norm == "none"
    assert cfg.train.weight_decay == 5.0e-4 and cfg.train.eval_every == 1 and cfg.dataset.sampling == "trees"


def test_fig5_models_are_built_as_alon_yahav(tmp_path: Path) -> None:
    spec = DataSpec(num_features=0, num_classes=5, input="embedding", vocab_sizes=(5, 5), task="tree")
    cfg = compose_cfg(["experiment=fig5", "variant=gat", "dataset.tree_depth=2"])
    gat = build_model(cfg.model, cfg.norm, spec, cfg.depth)
    convs = [m for m in gat.modules() if isinstance(m, GATConv)]
    assert len(convs) == 3 and all(c.heads == 4 and c.out_channels == 8 and c.concat for c in convs)
    cfg = compose_cfg(["experiment=fig5", "variant=gin", "dataset.tree_depth=2"])
    gin = build_model(cfg.model, cfg.norm, spec, cfg.depth)
    mlp = gin.blocks[0].conv.nn.eval()
    (lin1, lin2), (bn1, bn2) = mlp.lins, mlp.norms
    for bn in (bn1, bn2):  # non-trivial running statistics, so that a missing BatchNorm shows
        bn.module.running_mean.uniform_(-1, 1)
        bn.module.running_var.uniform_(0.5, 2)
    x = torch.randn(7, 32)
    by_hand = torch.relu(bn2(lin2(torch.relu(bn1(lin1(x))))))  # Linear-BN-ReLU-Linear-BN-ReLU
    assert torch.allclose(mlp(x), by_hand, atol=1e-6)


# ------------------------------------------------------------------------------------------ the trainer

class FixedLogits(nn.Module):
    """Predicts class 0 for every node whatever the input: online accuracy = share of label 0."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.tensor([5.0, 0.0]))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: object = None) -> torch.Tensor:
        return self.bias.expand(x.size(0), 2)


def fixed_task(labels: list[int]) -> TaskData:
    n = len(labels)
    data = Data(x=torch.zeros(n, 1), edge_index=torch.zeros(2, 0, dtype=torch.long), y=torch.tensor(labels),
                train_mask=torch.ones(n, dtype=torch.bool), val_mask=torch.ones(n, dtype=torch.bool),
                test_mask=torch.ones(n, dtype=torch.bool))
    spec = DataSpec(num_features=1, num_classes=2)
    return TaskData(name="fixed", spec=spec, metric="acc", train_batches=lambda g: [data],
                    eval_batches=lambda: [data])


def protocol(**keys: object) -> OmegaConf:
    cfg = OmegaConf.load(CONF / "train" / "default.yaml")
    cfg.update({"lr": 1e-3, "weight_decay": 0.0, "epochs": 100, "eval_every": 3, "train_metric": "online",
                **keys})
    return cfg


def fit(labels: list[int], **keys: object):  # noqa: ANN201
    trainer = Trainer(protocol(**keys), device=torch.device("cpu"), seed=0, progress=False)
    return trainer.fit(FixedLogits(), fixed_task(labels))


def test_stop_at_train_accuracy_one() -> None:
    result = fit([0, 0, 0, 0], stop_at_train=1.0)
    assert result.epochs_run == 3 and result.best_train == {"epoch": 3, "train": 1.0, "test": 1.0}


def test_train_patience_counts_evaluations() -> None:
    # Online accuracy stays 3/4: best at the first evaluation (epoch 3), then 2 stale ones -> stop at epoch 9.
    result = fit([0, 0, 0, 1], stop_at_train=1.0, train_patience=2)
    assert result.epochs_run == 9 and result.history["epoch"] == [3, 6, 9]
    assert result.history["train_online"] == [0.75, 0.75, 0.75] and result.best_train["train"] == 0.75


def test_plateau_steps_only_at_evaluations_on_online_accuracy() -> None:
    # patience 0: each non-improving evaluation halves the lr; the lr is logged before that evaluation's step.
    result = fit([0, 1], epochs=12, scheduler="plateau", plateau_mode="max", plateau_factor=0.5,
                 plateau_patience=0, plateau_threshold_mode="abs")
    assert result.history["epoch"] == [3, 6, 9, 12]
    assert [lr / 1e-3 for lr in result.history["lr"]] == pytest.approx([1.0, 1.0, 0.5, 0.25])
    assert result.best_train is not None and result.best_train["epoch"] == 3


def test_protocol_keys_are_validated() -> None:
    cfg = compose_cfg(["experiment=fig5", "train.train_metric=best"])
    with pytest.raises(ConfigError, match="train_metric"):
        validate(cfg)
    with pytest.raises(ConfigError, match="stop_at_train"):
        validate(compose_cfg(["experiment=fig5", "train.stop_at_train=2"]))
    with pytest.raises(ConfigError, match="train_patience"):
        validate(compose_cfg(["experiment=fig5", "train.train_patience=-1"]))
    assert math.isclose(compose_cfg(["experiment=fig5"]).train.stop_at_train, 1.0)


def test_new_keys_at_their_neutral_values_keep_legacy_run_ids() -> None:
    legacy = identity_config(compose_cfg(["experiment=fig5_legacy", "variant=gcn", "dataset.tree_depth=3"]))
    assert "sampling" not in legacy["dataset"]
    assert not {"train_metric", "stop_at_train", "train_patience", "plateau_threshold_mode"} & set(legacy["train"])
    faithful = identity_config(compose_cfg(["experiment=fig5", "variant=gcn", "dataset.tree_depth=3"]))
    assert faithful["dataset"]["sampling"] == "alon_yahav" and faithful["train"]["train_metric"] == "online"
