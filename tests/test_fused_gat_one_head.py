"""The one-head GAT layer for large graphs (lipgnn.nn.fused.gat_one_head): equal to PyG's GATConv, to the reference
LipGATConv and to the general CSR path, values and gradients; taken exactly where it applies.

Graphs in tests are small, so each test lowers gat_small's limit to 0: every one-head layer then counts as large."""

from __future__ import annotations

import pytest
import torch
from devices import gradcheck, seeded
from test_fused_gat_small import (
    ELUBlock,
    assert_dropout_matches_the_general_path,
    assert_large_scores_stay_finite,
    assert_near,
    assert_node_without_edges_gets_the_bias_only,
    assert_same,
    forward_backward,
    general_path,
    lip_pair,
    pair,
    random_graph,
    tree_batch,
)

from lipgnn.nn.fused import FusedLipGATConv, gat_one_head, gat_small, kernels
from lipgnn.nn.fused.graph import CSRGraph

ONE = "_OneHeadGATBackward"


@pytest.fixture(autouse=True)
def large(monkeypatch: pytest.MonkeyPatch):
    assert kernels.available(torch.zeros(1)), "numba kernels unavailable: the one-head path would go untested"
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["trees", "random"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
def test_one_head_path_equals_pyg_gatconv(concat: bool, graph: str, dtype: torch.dtype) -> None:
    edge_index, n = tree_batch() if graph == "trees" else (random_graph(), 30)
    ref, fused = pair(1, concat)
    x = torch.randn(n, 12, generator=seeded(4), dtype=dtype)
    got = forward_backward(fused.to(dtype), x, edge_index)
    assert got[3] == ONE, "the one-head path did not run"
    exact = forward_backward(ref.double(), x.double(), edge_index)
    assert_near(got, exact, rel=1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("alpha", [1.0, 5.0])
@pytest.mark.parametrize("graph", ["trees", "random"])
def test_lip_one_head_path_equals_the_reference_layer(graph: str, alpha: float) -> None:
    """Against LipGATConv (eq. (17) on PyG's message passing) in float64, values and every gradient."""
    edge_index, n = tree_batch() if graph == "trees" else (random_graph(), 30)
    ref, fused = lip_pair(1, True, alpha)
    x = torch.randn(n, 12, generator=seeded(4))
    got = forward_backward(fused, x, edge_index)
    assert got[3] == ONE, "the one-head path did not run"
    assert_near(got, forward_backward(ref.double(), x.double(), edge_index))


@pytest.mark.parametrize("layer", ["gat", "gat-lip"])
def test_attention_dropout_drops_what_the_general_path_drops(layer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_dropout_matches_the_general_path(1, True, layer, ONE, monkeypatch)


@pytest.mark.parametrize("p", [0.0, 0.5], ids=["eval", "attention-dropout"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lip", [False, True])
def test_folded_elu_equals_elu_of_the_layer(lip: bool, dtype: torch.dtype, p: float,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``activation=ELU`` folds the bias and the ELU into the aggregation (float32) or applies them after it
    (float64); values and gradients as ``elu`` of the general path's output, in evaluation and in training with
    attention dropout (the same decisions from the same seed)."""
    edge_index, n = tree_batch()
    _, fused = lip_pair(1, True, 2.0, dropout=p) if lip else pair(1, True, dropout=p)
    fused = fused.to(dtype).train(p > 0)
    x = torch.randn(n, 12, generator=seeded(8), dtype=dtype)
    torch.manual_seed(3)
    got = forward_backward(ELUBlock(fused, True), x, edge_index)
    fused.zero_grad(set_to_none=True)
    with monkeypatch.context() as m:
        general_path(m)
        torch.manual_seed(3)
        expected = forward_backward(ELUBlock(fused, False), x, edge_index)
    assert got[3] == ONE and expected[3] != ONE
    assert_same(got, expected)


def test_lip_tied_neighbour_maxima_share_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sources of one target with equal ‖Wx‖ (identical features): the maximum's gradient is split between
    them, as in the general path."""
    edge_index = torch.tensor([[1, 2, 3, 0, 2], [0, 0, 0, 1, 1]])
    x = torch.randn(4, 12, generator=seeded(11))
    x[2] = x[1]
    _, fused = lip_pair(1, True, 1.0)
    one = forward_backward(fused, x, edge_index)
    fused.zero_grad(set_to_none=True)
    general_path(monkeypatch)
    general = forward_backward(fused, x, edge_index)
    assert one[3] == ONE and general[3] != ONE
    assert_same(one, general)


def test_without_self_loops_a_node_with_no_edges_gets_the_bias_only() -> None:
    assert_node_without_edges_gets_the_bias_only(1, ONE)


@pytest.mark.parametrize("lip_alpha", [None, 2.0], ids=["gat", "gat-lip"])
@pytest.mark.parametrize("elu", [None, 1.0], ids=["plain", "elu"])
def test_gradcheck_float64(lip_alpha: float | None, elu: float | None) -> None:
    graph = CSRGraph.from_edge_index(torch.tensor([[0, 1, 2, 3, 3, 1, 4], [1, 2, 0, 0, 2, 4, 1]]), 6)
    g = seeded(7)
    x = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    att_src = torch.randn(1, 3, dtype=torch.float64, generator=g, requires_grad=True)
    att_dst = torch.randn(1, 3, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, generator=g, requires_grad=True)
    assert gradcheck(lambda *a: gat_one_head.one_head_gat(*a, graph, 0.2, lip_alpha=lip_alpha, elu_alpha=elu),
                     (x, weight, att_src, att_dst, bias))


def path(fused: FusedLipGATConv, x: torch.Tensor, edge_index: torch.Tensor) -> str:
    return type(fused(x.requires_grad_(True), edge_index).grad_fn).__name__


def test_path_is_taken_only_where_it_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    edge_index, n = tree_batch()
    x = torch.randn(n, 12, generator=seeded(9))
    assert path(FusedLipGATConv(12, 5, lipschitz_norm=False), x.clone(), edge_index) == ONE
    assert path(FusedLipGATConv(12, 5, lipschitz_norm=True), x.clone(), edge_index) == ONE
    # several heads, the authors' reference variant and a residual projection take the general path
    assert path(FusedLipGATConv(12, 5, heads=2, lipschitz_norm=False), x.clone(), edge_index) != ONE
    assert path(FusedLipGATConv(12, 5, lipschitz_norm=True, variant="reference"), x.clone(), edge_index) != ONE
    assert path(FusedLipGATConv(12, 5, lipschitz_norm=False, residual=True), x.clone(), edge_index) != ONE
    # small graphs go to gat_small; without the compiled loops (CUDA, LIPGNN_KERNELS=eager) the general path
    conv = FusedLipGATConv(12, 5, lipschitz_norm=False)
    graph = CSRGraph.from_edge_index(edge_index, n)
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 5)
    assert path(conv, x.clone(), edge_index) == "_SmallGATBackward"
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 5 - 1)
    assert path(conv, x.clone(), edge_index) == ONE
    with kernels.disabled():
        assert path(conv, x.clone(), edge_index) != ONE
    # within gat_small's limit, one head on a graph of MIN_EDGES edges or more comes here (several heads do not)
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 5)
    assert graph.num_edges < gat_one_head.MIN_EDGES
    monkeypatch.setattr(gat_one_head, "MIN_EDGES", graph.num_edges + 1)
    assert path(conv, x.clone(), edge_index) == "_SmallGATBackward"
    monkeypatch.setattr(gat_one_head, "MIN_EDGES", graph.num_edges)
    assert path(conv, x.clone(), edge_index) == ONE
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 2 * 5)
    assert path(FusedLipGATConv(12, 5, heads=2, lipschitz_norm=False), x.clone(), edge_index) == "_SmallGATBackward"
    with kernels.disabled():
        assert path(conv, x.clone(), edge_index) != ONE


def test_row_maximum_keeps_large_scores_finite() -> None:
    assert_large_scores_stay_finite(1, ONE)
