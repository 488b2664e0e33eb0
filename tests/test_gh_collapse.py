"""The gh_collapse diagnostic: its per-layer measures (lipgnn.diagnostics.collapse) on hand-built inputs, and a tiny
SAN run through the run layer, measured while it trains without changing the run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import compose_cfg

from lipgnn.diagnostics.collapse import attention_entropy, effective_rank, grad_norm, uniform_entropy
from lipgnn.errors import ConfigError
from lipgnn.runs import run

#: a star (node 0 with 3 leaves, both directions) plus a self-loop on every node: degrees 4, 2, 2, 2
EDGES = torch.tensor([[1, 2, 3, 0, 0, 0, 0, 1, 2, 3], [0, 0, 0, 1, 2, 3, 0, 1, 2, 3]])


def test_equal_scores_give_the_uniform_entropy_and_one_dominant_score_none() -> None:
    baseline = uniform_entropy(EDGES, 4)
    assert baseline == pytest.approx((math.log(4) + 3 * math.log(2)) / 4)
    _, uniform = attention_entropy(torch.zeros(EDGES.size(1), 2), EDGES, 4)
    assert float(uniform) == pytest.approx(baseline)
    peaked = torch.where(EDGES[0] == EDGES[1], 100.0, 0.0)[:, None]  # every node attends to itself only
    alpha, entropy = attention_entropy(peaked, EDGES, 4)
    assert float(entropy) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(alpha[EDGES[0] == EDGES[1]], torch.ones(4, 1, dtype=alpha.dtype))
    # Each node's distribution is over its incoming edges (messages source -> target, as the layers' softmax).
    alpha, entropy = attention_entropy(torch.randn(EDGES.size(1), 3, generator=torch.Generator().manual_seed(0)),
                                       EDGES, 4)
    sums = torch.zeros(4, 3, dtype=alpha.dtype).index_add_(0, EDGES[1], alpha)
    assert torch.allclose(sums, torch.ones_like(sums))
    hub = alpha[EDGES[1] == 0]  # node 0's four weights, head by head
    assert float(entropy) == pytest.approx(float(-(alpha * alpha.log()).sum() / 12))
    assert float(-(hub * hub.log()).sum(0).max()) <= math.log(4)


def test_effective_rank_is_one_for_parallel_rows_and_d_for_orthogonal_ones() -> None:
    assert effective_rank(torch.outer(torch.arange(1.0, 6.0), torch.tensor([1.0, -2.0, 0.5]))) == pytest.approx(1.0)
    assert effective_rank(torch.eye(4)) == pytest.approx(4.0)
    assert effective_rank(torch.zeros(3, 2)) == 0.0


def test_grad_norm_is_the_norm_over_all_tensors_and_none_before_a_step() -> None:
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    assert grad_norm([a, b]) is None
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert grad_norm([a, b]) == pytest.approx(5.0)


def test_a_tiny_san_is_measured_every_epoch_and_trains_as_without_the_monitor(tmp_path: Path,
                                                                              data_root: Path) -> None:
    args = ["variant=san_nonlocal", "depth=3", "train.epochs=2", "train.lr=0.001", "train.warmup_epochs=0",
            "log.progress=false"]
    record = run(compose_cfg(["experiment=gh_collapse", *args, "log.collapse_every=1", f"results_dir={tmp_path}"]))
    plain = run(compose_cfg(["experiment=gh_depth", *args, f"results_dir={tmp_path / 'plain'}"]))
    assert record["status"] == "completed" and record["git_commit"]
    # Measuring draws no random numbers and runs in eval mode: the same losses and accuracies, bit for bit.
    assert record["history"] == plain["history"]
    collapse = record["diagnostics"]["collapse"]
    assert collapse["epochs"] == [0, 1, 2]
    for key in ("energy", "energy_norm", "rank"):
        assert [len(row) for row in collapse[key]] == [4, 4, 4]  # X^0 .. X^3
    for key in ("entropy", "nonlocal", "grad", "grad_att"):
        assert [len(row) for row in collapse[key]] == [3, 3, 3]  # blocks 1 .. 3
    assert collapse["grad"][0] == [None] * 3 and collapse["grad_encoder"][0] is None  # no step before epoch 1
    assert all(g > 0 for row in collapse["grad"][1:] for g in row)
    assert all(0 < h <= collapse["uniform_entropy"] + 1e-6 for row in collapse["entropy"] for h in row)
    assert all(1 <= r <= 32 for row in collapse["rank"] for r in row)
    assert collapse["energy"][0] != collapse["energy"][2]  # measured on the weights of each epoch


def test_the_kind_refuses_a_model_without_san_blocks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^a gh_collapse job measures SAN blocks, got model=gcn"):
        run(compose_cfg(["experiment=gh_collapse", "model=gcn", f"results_dir={tmp_path}"]))
