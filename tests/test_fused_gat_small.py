"""The one-operation GAT layer for small graphs (lipgnn.nn.fused.gat_small): equal to PyG's GATConv and to the
general CSR path, values and gradients; taken exactly where it applies."""

from __future__ import annotations

import pytest
import torch
from devices import gradcheck, seeded
from torch import nn
from torch_geometric.nn import GATConv

from lipgnn.data.trees import tree_edge_index
from lipgnn.nn.fused import FusedLipGATConv, gat_one_head, gat_small, kernels
from lipgnn.nn.fused.graph import CSRGraph
from lipgnn.nn.lip_gat_conv import LipGATConv

TOL = {"atol": 1e-5, "rtol": 1e-5}
SMALL = "_SmallGATBackward"


def tree_batch(count: int = 8, depth: int = 3) -> tuple[torch.Tensor, int]:
    """Fig. 5's batch graph: ``count`` disjoint trees of depth ``depth``."""
    n = 2 ** (depth + 1) - 1
    template = tree_edge_index(depth)
    edge_index = (template.view(2, 1, -1) + (torch.arange(count) * n).view(1, count, 1)).reshape(2, -1)
    return edge_index, count * n


def random_graph(num_nodes: int = 30, num_edges: int = 90) -> torch.Tensor:
    g = seeded(0)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    return ei[:, ei[0] != ei[1]]


def pair(heads: int, concat: bool, in_channels: int = 12, out_channels: int = 5,
         **kwargs) -> tuple[GATConv, FusedLipGATConv]:
    ref = GATConv(in_channels, out_channels, heads=heads, concat=concat, **kwargs)
    with torch.no_grad():  # away from PyG's initialisation (zero bias), so every term shows
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=seeded(2)) * 0.7)
    fused = FusedLipGATConv(in_channels, out_channels, heads=heads, concat=concat, lipschitz_norm=False, **kwargs)
    assert set(fused.state_dict()) == set(ref.state_dict())
    fused.load_state_dict(ref.state_dict())
    return ref, fused


def lip_pair(heads: int, concat: bool, alpha: float, in_channels: int = 12, out_channels: int = 5,
             **kwargs) -> tuple[LipGATConv, FusedLipGATConv]:
    ref = LipGATConv(in_channels, out_channels, heads=heads, concat=concat, lipschitz_norm=True, alpha=alpha,
                     variant="paper", **kwargs)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=seeded(2)) * 0.7)
    fused = FusedLipGATConv(in_channels, out_channels, heads=heads, concat=concat, lipschitz_norm=True, alpha=alpha,
                            variant="paper", **kwargs)
    fused.load_state_dict(ref.state_dict())
    return ref, fused


class ELUBlock(nn.Module):
    """``conv`` followed by an ELU: handed to the conv as its activation (``folded``, a deep block's call) or
    applied after it with torch's ``elu``."""

    def __init__(self, conv: FusedLipGATConv, folded: bool) -> None:
        super().__init__()
        self.conv, self.folded = conv, folded

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        if self.folded:
            return self.conv(x, edge_index, activation=nn.ELU())
        return nn.functional.elu(self.conv(x, edge_index))


def forward_backward(module: nn.Module, x: torch.Tensor, edge_index: torch.Tensor):
    x = x.clone().requires_grad_(True)
    out = module(x, edge_index)
    weight = torch.randn(out.shape, generator=seeded(3)).to(out.dtype)
    (out * weight).sum().backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    return out.detach(), x.grad, grads, type(out.grad_fn).__name__


def both_paths(fused: FusedLipGATConv, x: torch.Tensor, edge_index: torch.Tensor, monkeypatch: pytest.MonkeyPatch):
    """``forward_backward`` on the one-operation path, then (limit 0) on the general path; checks which ran."""
    small = forward_backward(fused, x, edge_index)
    fused.zero_grad(set_to_none=True)
    general_path(monkeypatch)
    general = forward_backward(fused, x, edge_index)
    assert small[3] == SMALL and general[3] not in (SMALL, "_OneHeadGATBackward")
    return small, general


def assert_same(a, b, tol: dict | None = None) -> None:
    tol = TOL if tol is None else tol
    torch.testing.assert_close(a[0], b[0], **tol)
    torch.testing.assert_close(a[1], b[1], **tol)
    assert a[2].keys() == b[2].keys()
    for name in a[2]:
        torch.testing.assert_close(a[2][name], b[2][name], **tol, msg=lambda m, n=name: f"grad of {n}: {m}")


def assert_near(got, exact, rel: float = 1e-5) -> None:
    """Every output and gradient within ``rel`` of the exact tensor's largest entry."""
    pairs = [("output", got[0], exact[0]), ("x", got[1], exact[1]),
             *((f"grad of {k}", got[2][k], exact[2][k]) for k in exact[2])]
    for name, a, b in pairs:
        error = float((a.double() - b.double()).abs().max() / b.abs().max())
        assert error < rel, f"{name}: {error:.2e} of its scale"


@pytest.fixture(autouse=True)
def compiled():
    assert kernels.available(torch.zeros(1)), "numba kernels unavailable: the one-operation path would go untested"


@pytest.mark.parametrize("graph", ["trees", "random"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_small_path_equals_pyg_gatconv(heads: int, concat: bool, graph: str) -> None:
    edge_index, n = tree_batch() if graph == "trees" else (random_graph(), 30)
    ref, fused = pair(heads, concat)
    x = torch.randn(n, 12, generator=seeded(4))
    got = forward_backward(fused, x, edge_index)
    assert got[3] == SMALL, "the one-operation path did not run"
    assert_same(got, forward_backward(ref, x, edge_index))


@pytest.mark.parametrize("layer", ["gat", "gat-lip"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
def test_small_and_general_paths_agree_on_a_tree_batch(concat: bool, layer: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Fig. 5's batch at tree depth 3 (960 nodes, 4 heads of 8): both float32 paths against the reference layer in
    float64 (their sums run in different orders, so they are compared with the exact layer, not with each other;
    both stay near 2e-6 of each tensor's scale)."""
    edge_index, n = tree_batch(count=64)
    ref, fused = (pair(4, concat, in_channels=32, out_channels=8) if layer == "gat"
                  else lip_pair(4, concat, 2.0, in_channels=32, out_channels=8))
    x = torch.randn(n, 32, generator=seeded(5))
    exact = forward_backward(ref.double(), x.double(), edge_index)
    small, general = both_paths(fused, x, edge_index, monkeypatch)
    assert_near(small, exact)
    assert_near(general, exact)


def general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send every GAT layer to the general CSR path (neither one-operation path)."""
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", 0)
    monkeypatch.setattr(gat_one_head, "applies", lambda *args: False)


def assert_dropout_matches_the_general_path(heads: int, concat: bool, layer: str, path_name: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Training with attention dropout p = 0.5: from the same torch seed the path ``path_name`` drops the same
    weights as the general path (same draw, same decisions), so in float64 outputs and every gradient agree to
    rounding; another seed drops others (the output changes), and evaluation drops nothing."""
    edge_index, n = tree_batch(count=16)
    ref, fused = (pair(heads, concat, dropout=0.5) if layer == "gat"
                  else lip_pair(heads, concat, 2.0, dropout=0.5))
    fused = fused.double().train()
    x = torch.randn(n, 12, generator=seeded(11), dtype=torch.float64)
    torch.manual_seed(7)
    got = forward_backward(fused, x, edge_index)
    fused.zero_grad(set_to_none=True)
    torch.manual_seed(8)
    other = forward_backward(fused, x, edge_index)
    fused.zero_grad(set_to_none=True)
    with monkeypatch.context() as m:
        general_path(m)
        torch.manual_seed(7)
        general = forward_backward(fused, x, edge_index)
    assert got[3] == path_name == other[3] and general[3] not in (SMALL, "_OneHeadGATBackward")
    tight = {"atol": 1e-10, "rtol": 1e-10}
    assert_same(got, general, tight)
    assert (got[0] - other[0]).abs().max() > 1e-3
    with torch.no_grad():
        torch.testing.assert_close(fused.eval()(x, edge_index), ref.double().eval()(x, edge_index), **tight)


@pytest.mark.parametrize("layer", ["gat", "gat-lip"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.parametrize("heads", [1, 4])
def test_attention_dropout_drops_what_the_general_path_drops(heads: int, concat: bool, layer: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert_dropout_matches_the_general_path(heads, concat, layer, SMALL, monkeypatch)


def assert_node_without_edges_gets_the_bias_only(heads: int, path_name: str) -> None:
    edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])  # node 3 has no incoming edge
    ref, fused = pair(heads, True, add_self_loops=False)
    x = torch.randn(4, 12, generator=seeded(6))
    got = forward_backward(fused, x, edge_index)
    assert got[3] == path_name
    torch.testing.assert_close(got[0][3], fused.bias.detach())
    assert_same(got, forward_backward(ref, x, edge_index))


def test_without_self_loops_a_node_with_no_edges_gets_the_bias_only() -> None:
    assert_node_without_edges_gets_the_bias_only(2, SMALL)


@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
def test_gradcheck_float64(concat: bool) -> None:
    graph = CSRGraph.from_edge_index(torch.tensor([[0, 1, 2, 3, 3, 1], [1, 2, 0, 0, 2, 4]]), 6, add_self_loops=False)
    g = seeded(7)
    x = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(3 * 2, 4, dtype=torch.float64, generator=g, requires_grad=True)
    att_src = torch.randn(3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    att_dst = torch.randn(3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(6 if concat else 2, dtype=torch.float64, generator=g, requires_grad=True)
    assert gradcheck(lambda *a: gat_small.small_gat(*a, graph, concat, 0.2), (x, weight, att_src, att_dst, bias))


@pytest.mark.parametrize("heads, concat, lip", [(4, True, False), (4, False, True), (1, True, True)])
@pytest.mark.parametrize("dtype, p", [(torch.float32, 0.0), (torch.float32, 0.5), (torch.float64, 0.5)])
def test_folded_elu_equals_elu_of_the_layer(heads: int, concat: bool, lip: bool, dtype: torch.dtype,
                                            p: float) -> None:
    """``activation=ELU`` on this path: float32 folds the bias and the ELU into the layer's row visits (one
    operation, no ELU node after it), float64 applies them after it; values and every gradient as torch's
    ``elu`` of the layer's output, in evaluation and in training with attention dropout (the same decisions from
    the same seed). Eval also against PyG's layer."""
    edge_index, n = tree_batch()
    ref, fused = lip_pair(heads, concat, 2.0, dropout=p) if lip else pair(heads, concat, dropout=p)
    fused = fused.to(dtype).train(p > 0)
    x = torch.randn(n, 12, generator=seeded(8), dtype=dtype)
    torch.manual_seed(3)
    got = forward_backward(ELUBlock(fused, True), x, edge_index)
    fused.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    expected = forward_backward(ELUBlock(fused, False), x, edge_index)
    assert (got[3] == SMALL) == (dtype == torch.float32) and expected[3] != SMALL
    assert (got[0] < 0).any() and (got[0] > 0).any()  # both branches of the ELU are exercised
    assert_same(got, expected)
    if p == 0.0:
        torch.testing.assert_close(got[0], nn.functional.elu(ref.to(dtype)(x, edge_index)).detach(), **TOL)


def test_folding_the_elu_needs_float32() -> None:
    """The folded ELU's exponential is a float32 polynomial: small_gat refuses it for float64 (FusedLipGATConv
    applies torch's ELU after the layer there)."""
    edge_index, n = tree_batch()
    _, fused = pair(4, True)
    fused = fused.double()
    x = torch.randn(n, 12, generator=seeded(8), dtype=torch.float64)
    graph = CSRGraph.from_edge_index(edge_index, n)
    with pytest.raises(ValueError, match="float32 only"):
        gat_small.small_gat(x, fused.lin.weight, fused.att_src[0], fused.att_dst[0], fused.bias, graph, True, 0.2,
                            elu_alpha=1.0)


def path(fused: FusedLipGATConv, x: torch.Tensor, edge_index: torch.Tensor) -> str:
    return type(fused(x.requires_grad_(True), edge_index).grad_fn).__name__


def test_path_is_taken_only_where_it_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    edge_index, n = tree_batch()
    x = torch.randn(n, 12, generator=seeded(9))
    _, fused = pair(4, True)
    assert path(fused, x.clone(), edge_index) == SMALL
    # eq. (17) and attention dropout (training or not) run here; the authors' reference variant or a residual
    # projection take the general path
    assert path(FusedLipGATConv(12, 5, heads=4, lipschitz_norm=True), x.clone(), edge_index) == SMALL
    lip = FusedLipGATConv(12, 5, heads=4, lipschitz_norm=True, variant="reference")
    assert path(lip, x.clone(), edge_index) != SMALL
    drop = FusedLipGATConv(12, 5, heads=4, lipschitz_norm=False, dropout=0.5)
    assert path(drop, x.clone(), edge_index) == SMALL
    assert path(drop.eval(), x.clone(), edge_index) == SMALL
    res = FusedLipGATConv(12, 5, heads=4, lipschitz_norm=False, residual=True)
    assert path(res, x.clone(), edge_index) != SMALL
    # above the size limit, or without the compiled loops (CUDA, LIPGNN_KERNELS=eager)
    graph = CSRGraph.from_edge_index(edge_index, n)
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 4 * 5 - 1)
    assert path(fused, x.clone(), edge_index) != SMALL
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", graph.num_edges * 4 * 5)
    assert path(fused, x.clone(), edge_index) == SMALL
    with kernels.disabled():
        assert path(fused, x.clone(), edge_index) != SMALL


def assert_large_scores_stay_finite(heads: int, path_name: str) -> None:
    """Scores hundreds apart along a row: the softmax must shift by the row maximum (exp overflows otherwise)."""
    edge_index, n = tree_batch()
    ref, fused = pair(heads, True)
    x = 200 * torch.randn(n, 12, generator=seeded(10))
    got = forward_backward(fused, x, edge_index)
    assert got[3] == path_name
    assert torch.isfinite(got[0]).all() and torch.isfinite(got[1]).all()
    exact = forward_backward(ref.double(), x.double(), edge_index)
    error = float((got[0].double() - exact[0]).abs().max() / exact[0].abs().max())
    assert error < 1e-4, error  # float32 softmax of scores in the hundreds


def test_row_maximum_keeps_large_scores_finite() -> None:
    assert_large_scores_stay_finite(2, SMALL)


# ---------------------------------------------------------------- GAT-Lip (eq. (17), paper variant) -------


@pytest.mark.parametrize("alpha", [1.0, 5.0])
@pytest.mark.parametrize("graph", ["trees", "random"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.parametrize("heads", [1, 4])
def test_lip_small_path_equals_the_reference_layer(heads: int, concat: bool, graph: str, alpha: float) -> None:
    """Against LipGATConv (eq. (17) on PyG's message passing) in float64, values and every gradient."""
    edge_index, n = tree_batch() if graph == "trees" else (random_graph(), 30)
    ref, fused = lip_pair(heads, concat, alpha)
    x = torch.randn(n, 12, generator=seeded(4))
    got = forward_backward(fused, x, edge_index)
    assert got[3] == SMALL, "the one-operation path did not run"
    assert_near(got, forward_backward(ref.double(), x.double(), edge_index))


def test_lip_tied_neighbour_maxima_share_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sources of one target with equal ‖Wx‖ (identical features): the maximum's gradient is split between
    them, as in the general path (torch's max gives it to one of them)."""
    edge_index = torch.tensor([[1, 2, 3, 0, 2], [0, 0, 0, 1, 1]])
    x = torch.randn(4, 12, generator=seeded(11))
    x[2] = x[1]
    _, fused = lip_pair(2, True, 1.0)
    small, general = both_paths(fused, x, edge_index, monkeypatch)
    assert_same(small, general)


@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
def test_lip_gradcheck_float64(concat: bool) -> None:
    graph = CSRGraph.from_edge_index(torch.tensor([[0, 1, 2, 3, 3, 1], [1, 2, 0, 0, 2, 4]]), 6)
    g = seeded(12)
    x = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(3 * 2, 4, dtype=torch.float64, generator=g, requires_grad=True)
    att_src = torch.randn(3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    att_dst = torch.randn(3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(6 if concat else 2, dtype=torch.float64, generator=g, requires_grad=True)
    assert gradcheck(lambda *a: gat_small.small_gat(*a, graph, concat, 0.2, lip_alpha=2.0),
                     (x, weight, att_src, att_dst, bias))
