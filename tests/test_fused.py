"""The CSR fast path (lipgnn.nn.fused) against the reference layers it must equal.

Every fused layer is checked against the reference ``LipGATConv`` / ``LipTransformerConv`` with the
same weights (loaded from the reference's state dict): outputs and the gradients w.r.t. ``x`` and
every parameter agree within 1e-5 in float32, for 1/2/4 heads, concat and mean, without
LipschitzNorm and with both of its variants, on random graphs with isolated nodes, duplicate edges
and explicit self-loops. With ``lipschitz_norm=False`` the fused layers also equal PyG's stock
``GATConv`` / ``TransformerConv``. The sparse kernels' hand-written backward passes are checked with
``torch.autograd.gradcheck`` in float64. Every test runs with the compiled CPU loops of
:mod:`lipgnn.nn.fused.kernels` and again with their eager twins.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from devices import gradcheck, seeded
from torch import nn
from torch_geometric.nn import GATConv, TransformerConv
from torch_geometric.utils import softmax as pyg_softmax

from lipgnn.nn import (
    FusedLipGATConv,
    FusedLipTransformerConv,
    LipGATConv,
    LipTransformerConv,
    gat_lipschitz_denominator,
    transformer_lipschitz_denominator,
)
from lipgnn.nn.fused import (
    MAX_SHIFT_FREE_BOUND,
    CSRGraph,
    add_sq_norm_grad_,
    clear_csr_cache,
    csr_residual_energy,
    csr_sddmm,
    csr_sddmm_with_norms,
    csr_softmax,
    csr_spmm,
    csr_spmm_shared,
    gat_denominator_csr,
    get_csr_graph,
    kernels,
    neighbour_max_csr,
    row_sq_norm,
    transformer_denominator_csr,
    with_sq_norm,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(autouse=True, params=["numba", "eager"])
def kernel_mode(request: pytest.FixtureRequest):
    """Every test here runs twice: with the compiled CPU loops (lipgnn.nn.fused.kernels) and with their eager
    twins (the path CUDA tensors take)."""
    if request.param == "numba":
        assert kernels.available(torch.zeros(1)), "numba kernels unavailable: the compiled path would go untested"
        yield request.param
    else:
        with kernels.disabled():
            assert not kernels.available(torch.zeros(1))
            yield request.param
NUM_NODES = 40
IN_CHANNELS = 12


def make_graph(seed: int = 0, num_nodes: int = NUM_NODES, connected: int = 34, num_edges: int = 160) -> torch.Tensor:
    """Random directed edges among the first ``connected`` nodes (the rest are isolated), with
    duplicated edges and explicit (also duplicated) self-loops."""
    gen = seeded(seed)
    ei = torch.randint(0, connected, (2, num_edges), generator=gen)
    dup = ei[:, :20]
    loops = torch.tensor([[1, 1, 5], [1, 1, 5]])
    return torch.cat([ei, dup, loops], dim=1)


def _pair(ref_cls: type[nn.Module], fused_cls: type[nn.Module], *args, **kwargs) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(1)
    ref = ref_cls(*args, **kwargs)
    fused = fused_cls(*args, **kwargs)
    fused.load_state_dict(ref.state_dict())  # same parameters and state-dict keys
    return ref, fused


def _randomise(module: nn.Module, seed: int = 2) -> None:
    """Non-zero biases and attention vectors everywhere, so every parameter's gradient is exercised."""
    gen = seeded(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)


def assert_same_forward_backward(ref: nn.Module, fused: nn.Module, x: torch.Tensor, *args, **kwargs) -> None:
    """Equal outputs and equal gradients w.r.t. x and every parameter (a random linear functional)."""
    x_ref = x.clone().requires_grad_(True)
    x_fused = x.clone().requires_grad_(True)
    out_ref = ref(x_ref, *args, **kwargs)
    out_fused = fused(x_fused, *args, **kwargs)
    torch.testing.assert_close(out_fused, out_ref, **TOL)
    weight = torch.randn(out_ref.shape, generator=seeded(3), dtype=out_ref.dtype)
    (out_ref * weight).sum().backward()
    (out_fused * weight).sum().backward()
    torch.testing.assert_close(x_fused.grad, x_ref.grad, **TOL)
    ref_params = dict(ref.named_parameters())
    fused_params = dict(fused.named_parameters())
    assert ref_params.keys() == fused_params.keys()
    for name, p_ref in ref_params.items():
        p_fused = fused_params[name]
        if p_ref.grad is None:
            assert p_fused.grad is None or torch.count_nonzero(p_fused.grad) == 0, name
            continue
        assert p_fused.grad is not None, name
        torch.testing.assert_close(p_fused.grad, p_ref.grad, **TOL, msg=lambda m, n=name: f"grad of {n}: {m}")


LIP_SETTINGS = [
    {"lipschitz_norm": False},
    {"lipschitz_norm": True, "variant": "paper"},
    {"lipschitz_norm": True, "variant": "reference"},
]
LIP_IDS = ["nolip", "lip-paper", "lip-reference"]


# ---------------------------------------------------------------- kernels ---------------------------


@pytest.fixture
def tiny_graph() -> CSRGraph:
    ei = torch.tensor([[0, 1, 2, 3, 3, 5, 1, 1, 6, 6], [1, 2, 0, 0, 0, 2, 1, 4, 4, 4]])
    return CSRGraph.from_edge_index(ei, 8, add_self_loops=True)  # node 7 only has its self-loop


# Full (element-by-element) gradcheck for one head; the multi-head loop with gradcheck's fast mode
# (random projections of the Jacobian), which keeps the file quick on a shared CPU.
@pytest.mark.parametrize("heads", [1, 3])
def test_spmm_gradcheck(tiny_graph: CSRGraph, heads: int) -> None:
    g = tiny_graph
    values = torch.rand(g.num_edges, heads, dtype=torch.float64, requires_grad=True)
    x = torch.randn(g.num_src, heads, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda v, h: csr_spmm(v, h, g), (values, x), fast_mode=heads > 1)


@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_shared_spmm_equals_per_head_spmm_and_gradcheck(heads: int, self_loops: bool) -> None:
    """All heads' ``A_h X`` on one shared ``X`` (the stacked product and its stacked transpose) equal
    ``csr_spmm`` on ``X`` repeated per head, the residual energies ``‖A_h X − X‖²`` their definition;
    exact gradients (finite differences, float64). Without self-loops some nodes have no edges at all
    (empty rows and columns)."""
    ei = torch.tensor([[0, 1, 2, 3, 3, 5, 1, 1, 6, 6], [1, 2, 0, 0, 0, 2, 1, 4, 4, 4]])
    g = CSRGraph.from_edge_index(ei, 8, add_self_loops=self_loops)
    gen = seeded(0)
    values = torch.rand(g.num_edges, heads, dtype=torch.float64, generator=gen, requires_grad=True)
    x = torch.randn(g.num_src, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    expected = csr_spmm(values, x.unsqueeze(1).expand(-1, heads, -1), g).transpose(0, 1)
    torch.testing.assert_close(csr_spmm_shared(values, x, g), expected)
    assert gradcheck(lambda v, h: csr_spmm_shared(v, h, g), (values, x))
    torch.testing.assert_close(csr_residual_energy(values, x, g), (expected - x).pow(2).sum(dim=(1, 2)))
    assert gradcheck(lambda v, h: csr_residual_energy(v, h, g), (values, x))


@pytest.mark.parametrize("heads", [1, 3])
def test_sddmm_and_softmax_gradcheck(tiny_graph: CSRGraph, heads: int) -> None:
    g = tiny_graph
    a = torch.randn(g.num_dst, heads, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(g.num_src, heads, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda p, q: csr_sddmm(p, q, g), (a, b), fast_mode=heads > 1)
    assert gradcheck(lambda p, q: csr_sddmm_with_norms(p, q, g), (a, b), fast_mode=heads > 1)
    scores = torch.randn(g.num_edges, heads, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda s: csr_softmax(s, g), (scores,), fast_mode=heads > 1)


@pytest.mark.parametrize("share", [0.0, 0.1, 0.9])
def test_sq_norm_gradient_row_sparse_update(share: float) -> None:
    """grad += 2 g x, whether few rows of g are non-zero (indexed update) or most are (dense pass)."""
    gen = seeded(0)
    x = torch.randn(50, 2, 7, generator=gen)
    g = torch.randn(50, 2, generator=gen) * (torch.rand(50, 1, generator=gen) < share)
    g[3, 0] = 0.0  # a row with a zero in one head only still counts as non-zero
    base = torch.randn(50, 2, 7, generator=gen)
    expected = base + 2 * g.unsqueeze(-1) * x
    for row_sparse in (False, True):
        torch.testing.assert_close(add_sq_norm_grad_(base.clone(), x, g, row_sparse), expected)


@pytest.mark.parametrize("bound", [1.0, MAX_SHIFT_FREE_BOUND])
def test_bounded_softmax_equals_pyg_softmax(tiny_graph: CSRGraph, bound: float) -> None:
    """The shift-free softmax for scores in [-bound, bound] (LipschitzNorm's) equals PyG's row-max
    softmax in float32, also at the extremes (a row at -bound: exponentials near e^{-2 bound})."""
    g = tiny_graph
    scores = (torch.rand(g.num_edges, 2) * 2 - 1) * bound
    scores[g.row == 0] = -bound
    scores[g.row == 1] = bound
    expected = pyg_softmax(scores, g.row, num_nodes=g.num_dst)
    torch.testing.assert_close(csr_softmax(scores, g, bound), expected, rtol=1e-6, atol=1e-7)
    s64 = scores.double().requires_grad_(True)
    assert gradcheck(lambda s: csr_softmax(s, g, bound), (s64,))


def test_softmax_bound_above_limit_uses_row_maximum(tiny_graph: CSRGraph) -> None:
    """Above MAX_SHIFT_FREE_BOUND a constant shift could underflow a whole row: the row maximum is used."""
    g = tiny_graph
    scores = torch.full((g.num_edges, 1), -200.0)
    out = csr_softmax(scores, g, 200.0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, pyg_softmax(scores, g.row, num_nodes=g.num_dst))


@pytest.mark.parametrize("kind", ["gat", "gt"])
@pytest.mark.parametrize("lip", [False, True])
def test_layers_use_the_shift_free_softmax_only_under_lipschitznorm(
    tiny_graph: CSRGraph, monkeypatch: pytest.MonkeyPatch, kind: str, lip: bool
) -> None:
    from lipgnn.nn.fused import gat_conv, gat_small, transformer_conv

    seen: list[float | None] = []
    real = csr_softmax
    # the general CSR path's choice (small plain GAT layers run as one operation, always with the row maximum)
    monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", 0)
    for module in (gat_conv, transformer_conv):
        monkeypatch.setattr(module, "csr_softmax", lambda s, g, bound=None: seen.append(bound) or real(s, g, bound))
    x = torch.randn(tiny_graph.num_dst, 6)
    edge_index = tiny_graph.edge_index
    alpha = 2.5
    if kind == "gat":
        conv = FusedLipGATConv(6, 4, heads=2, lipschitz_norm=lip, alpha=alpha)
    else:
        conv = FusedLipTransformerConv(6, 4, heads=2, lipschitz_norm=lip, alpha=alpha)
    conv(x, edge_index)
    assert seen == [alpha if lip else None]


def test_kernels_match_dense_definitions(tiny_graph: CSRGraph) -> None:
    g = tiny_graph
    values = torch.rand(g.num_edges, dtype=torch.float64)
    x = torch.randn(g.num_src, 5, dtype=torch.float64)
    dense = torch.zeros(g.num_dst, g.num_src, dtype=torch.float64)
    dense.index_put_((g.row, g.col), values, accumulate=True)
    torch.testing.assert_close(csr_spmm(values, x, g), dense @ x)
    a = torch.randn(g.num_dst, 1, 5, dtype=torch.float64)
    b = torch.randn(g.num_src, 1, 5, dtype=torch.float64)
    expected = (a[g.row, 0] * b[g.col, 0]).sum(-1, keepdim=True)
    torch.testing.assert_close(csr_sddmm(a, b, g), expected)
    scores = torch.randn(g.num_edges, 2, dtype=torch.float64)
    torch.testing.assert_close(csr_softmax(scores, g), pyg_softmax(scores, g.row, num_nodes=g.num_dst))
    # Every row of the softmax sums to one (every node has at least its self-loop).
    row_sums = torch.zeros(g.num_dst, 2, dtype=torch.float64).index_add_(0, g.row, csr_softmax(scores, g))
    torch.testing.assert_close(row_sums, torch.ones_like(row_sums))


def test_neighbour_max_splits_ties_like_scatter_max() -> None:
    # Target 1 has a four-way tie between distinct sources (the case torch's own segment-max
    # backward got wrong: it gave every tied entry the full gradient).
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 1, 1, 1, 1, 2]])
    g = CSRGraph.from_edge_index(ei, 7, add_self_loops=False)
    values = torch.tensor([[1.0], [3.0], [3.0], [3.0], [3.0], [2.0], [5.0]], requires_grad=True)
    out = neighbour_max_csr(values, g)
    assert out.view(-1).tolist() == [1.0, 3.0, 5.0, 0.0, 0.0, 0.0, 0.0]  # 0 for targets without edges
    out.backward(torch.tensor([[1.0], [2.0], [4.0], [8.0], [8.0], [8.0], [8.0]]))
    assert values.grad.view(-1).tolist() == [1.0, 0.5, 0.5, 0.5, 0.5, 0.0, 4.0]


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("heads", [1, 3])
def test_per_node_denominators_equal_shared_functions(variant: str, heads: int) -> None:
    """The CSR restatements of eq. (17)/(19) give the shared functions' values and gradients, also with
    tied neighbour maxima (duplicate edges) and an all-zero node (finite gradients at 0)."""
    g = CSRGraph.from_edge_index(make_graph(heads), NUM_NODES, add_self_loops=True)
    gen = seeded(12)
    feats = [torch.randn(NUM_NODES, heads, 5, generator=gen, dtype=torch.float64) for _ in range(3)]
    feats[0][7] = 0.0
    att = [torch.randn(1, heads, 5, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    weight = torch.randn(g.num_edges, heads, generator=gen, dtype=torch.float64)

    def grads(fn, inputs):
        inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
        out = fn(*inputs)
        (out * weight).sum().backward()
        return out.detach(), [t.grad for t in inputs]

    x = feats[0]
    def gat_csr(h, a, b):
        sq = row_sq_norm(h)
        return gat_denominator_csr(sq, sq, a, b, g, variant)

    out_csr, g_csr = grads(gat_csr, [x, *att])
    out_ref, g_ref = grads(
        lambda h, a, b: gat_lipschitz_denominator(h, h, a, b, g.edge_index, NUM_NODES, variant=variant), [x, *att]
    )
    torch.testing.assert_close(out_csr, out_ref)
    for a, b in zip(g_csr, g_ref, strict=True):
        torch.testing.assert_close(a, b)

    out_csr, g_csr = grads(
        lambda q, k, v: transformer_denominator_csr(row_sq_norm(q), row_sq_norm(k), row_sq_norm(v), g, variant)
        .index_select(0, g.row),
        feats
    )
    out_ref, g_ref = grads(
        lambda q, k, v: transformer_lipschitz_denominator(
            q[g.row], k[g.col], v[g.col], g.row, NUM_NODES, variant=variant
        ),
        feats,
    )
    torch.testing.assert_close(out_csr, out_ref)
    for a, b in zip(g_csr, g_ref, strict=True):
        torch.testing.assert_close(a, b)
        assert torch.isfinite(a).all()


def test_csr_graph_structure() -> None:
    ei = torch.tensor([[2, 0, 1, 1, 2], [0, 1, 1, 2, 0]])  # one self-loop (1->1), one duplicate (2->0)
    g = CSRGraph.from_edge_index(ei, 4, add_self_loops=True)
    # GATConv's normalisation: existing self-loops removed, one per node added; duplicates kept.
    assert g.edge_index.tolist() == [[0, 2, 2, 0, 1, 1, 2, 3], [0, 0, 0, 1, 1, 2, 2, 3]]
    assert g.rowptr.tolist() == [0, 3, 5, 7, 8]
    # The transposed CSR lists the same edges grouped by source.
    assert g.col[g.t_perm].tolist() == sorted(g.col.tolist())
    assert g.t_ptr.tolist() == [0, 2, 4, 7, 8]
    assert g.t_col.tolist() == g.row[g.t_perm].tolist()
    plain = CSRGraph.from_edge_index(ei, 4, add_self_loops=False)
    assert plain.num_edges == 5 and plain.rowptr.tolist() == [0, 2, 4, 5, 5]
    assert (g.num_nonempty, plain.num_nonempty) == (4, 3)   # without self-loops node 3 has no in-edge
    with pytest.raises(ValueError, match="num_nodes"):
        CSRGraph.from_edge_index(ei, 2)


def test_csr_graph_cache_is_reused_and_invalidated() -> None:
    clear_csr_cache()
    ei = make_graph()
    g1 = get_csr_graph(ei, NUM_NODES)
    assert get_csr_graph(ei, NUM_NODES) is g1
    assert get_csr_graph(ei, NUM_NODES, add_self_loops=False) is not g1
    assert get_csr_graph(ei.clone(), NUM_NODES) is not g1  # equal content, other tensor: no identity hit
    ei[0, 0] = (ei[0, 0] + 1) % NUM_NODES  # in-place edit bumps the version counter
    g2 = get_csr_graph(ei, NUM_NODES)
    assert g2 is not g1
    torch.testing.assert_close(g2.edge_index, CSRGraph.from_edge_index(ei, NUM_NODES).edge_index)


def test_csr_graph_cache_and_layers_under_inference_mode() -> None:
    """An ``edge_index`` made under ``torch.inference_mode`` has no version counter: the cache compares
    its values instead (reused while unchanged, rebuilt after an in-place edit), and a fused layer run
    there equals its result outside."""
    clear_csr_cache()
    fused = FusedLipTransformerConv(IN_CHANNELS, 4, heads=2)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(0))
    with torch.no_grad():
        expected = fused(x, make_graph())
    with torch.inference_mode():
        ei = make_graph()
        g1 = get_csr_graph(ei, NUM_NODES)
        assert get_csr_graph(ei, NUM_NODES) is g1
        torch.testing.assert_close(fused(x, ei), expected)
        ei[0, 0] = (ei[0, 0] + 1) % NUM_NODES
        g2 = get_csr_graph(ei, NUM_NODES)
        assert g2 is not g1
        torch.testing.assert_close(g2.edge_index, CSRGraph.from_edge_index(ei, NUM_NODES).edge_index)


# ---------------------------------------------------------------- layers vs reference ---------------


@pytest.mark.parametrize("lip", LIP_SETTINGS, ids=LIP_IDS)
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_fused_gat_equals_reference(heads: int, concat: bool, lip: dict) -> None:
    ref, fused = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 6, heads=heads, concat=concat, **lip)
    _randomise(ref)
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(4))
    assert_same_forward_backward(ref, fused, x, make_graph(heads))


@pytest.mark.parametrize("lip", LIP_SETTINGS, ids=LIP_IDS)
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_fused_gt_equals_reference(heads: int, concat: bool, lip: dict) -> None:
    ref, fused = _pair(LipTransformerConv, FusedLipTransformerConv, IN_CHANNELS, 6, heads=heads, concat=concat,
                       **lip)
    _randomise(ref)
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(4))
    assert_same_forward_backward(ref, fused, x, make_graph(heads))


@pytest.mark.parametrize("heads", [1, 2])
def test_fused_without_lip_equals_stock_pyg(heads: int) -> None:
    ei = make_graph(7)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(5))
    stock, fused = _pair(GATConv, FusedLipGATConv, IN_CHANNELS, 6, heads=heads)
    fused.lipschitz_norm = False
    assert_same_forward_backward(stock, fused, x, ei)
    torch.manual_seed(1)
    stock_t = TransformerConv(IN_CHANNELS, 6, heads=heads)
    fused_t = FusedLipTransformerConv(IN_CHANNELS, 6, heads=heads, lipschitz_norm=False)
    fused_t.load_state_dict(stock_t.state_dict())
    assert_same_forward_backward(stock_t, fused_t, x, ei)


@pytest.mark.parametrize("lip", LIP_SETTINGS, ids=LIP_IDS)
def test_fused_options_equal_reference(lip: dict) -> None:
    """Edge features (with GATConv's self-loop fill), residual, no bias, no self-loops, lin_src/lin_dst,
    GT's beta gate and edge embedding."""
    ei = make_graph(11)
    gen = seeded(6)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=gen)
    edge_attr = torch.randn(ei.size(1), 3, generator=gen)
    gat_cases = [
        ({"edge_dim": 3, "heads": 2}, edge_attr),
        ({"edge_dim": 3, "fill_value": 0.5}, edge_attr),
        ({"residual": True, "bias": False, "heads": 2}, None),
        ({"add_self_loops": False, "heads": 2, "concat": False}, None),
        # Steep LeakyReLU and α near the shift-free softmax limit: the bound is α·|slope| > 8 there, so
        # the row maximum is used; α = 2.5 with slope 3 stays below it and uses the constant shift.
        ({"negative_slope": 3.0, "alpha": 7.0, "heads": 2}, None),
        ({"negative_slope": 3.0, "alpha": 2.5}, None),
    ]
    for kwargs, ea in gat_cases:
        ref, fused = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 5, **kwargs, **lip)
        _randomise(ref)
        fused.load_state_dict(ref.state_dict())
        assert_same_forward_backward(ref, fused, x, ei, ea)
    ref, fused = _pair(LipGATConv, FusedLipGATConv, (IN_CHANNELS, IN_CHANNELS), 5, heads=2, **lip)
    assert_same_forward_backward(ref, fused, x, ei)
    gt_cases = [
        ({"alpha": 7.5, "heads": 2}, None),
        ({"edge_dim": 3, "heads": 2}, edge_attr),
        ({"beta": True, "heads": 2}, None),
        ({"root_weight": False, "bias": False, "concat": False, "heads": 2}, None),
    ]
    for kwargs, ea in gt_cases:
        ref, fused = _pair(LipTransformerConv, FusedLipTransformerConv, IN_CHANNELS, 5, **kwargs, **lip)
        _randomise(ref)
        fused.load_state_dict(ref.state_dict())
        assert_same_forward_backward(ref, fused, x, ei, ea)


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize(("kind", "scale"), [("gat", 1e-6), ("gt", 1e-6), ("gt", 1e-7)])
def test_fused_equals_reference_for_tiny_features(kind: str, scale: float, variant: str) -> None:
    """Near-zero inputs, where the denominators' ε guards matter: relative agreement of the attention
    output (no bias or skip term to hide it), so the fused and shared formulas must use the same guard."""
    if kind == "gat":
        ref, fused = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 5, heads=2, bias=False, variant=variant)
    else:
        ref, fused = _pair(LipTransformerConv, FusedLipTransformerConv, IN_CHANNELS, 5, heads=2, bias=False,
                           root_weight=False, variant=variant)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(9), dtype=torch.float64) * scale
    ref, fused = ref.double(), fused.double()
    ei = make_graph(3)
    out_ref, out_fused = ref(x, ei), fused(x, ei)
    assert out_ref.abs().max() > 0
    torch.testing.assert_close(out_fused, out_ref, rtol=1e-6, atol=1e-6 * out_ref.abs().max().item())


def test_prebuilt_csr_graph_and_fallbacks() -> None:
    ei = make_graph(3)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(8))
    ref, fused = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 4, heads=2)
    graph = CSRGraph.from_edge_index(ei, NUM_NODES, add_self_loops=True)
    torch.testing.assert_close(fused(x, graph), ref(x, ei), **TOL)
    with pytest.raises(ValueError, match="self_loops"):
        fused(x, CSRGraph.from_edge_index(ei, NUM_NODES, add_self_loops=False))
    # return_attention_weights takes the reference path and returns its (edge_index, alpha).
    out_r, (ei_r, alpha_r) = ref(x, ei, return_attention_weights=True)
    out_f, (ei_f, alpha_f) = fused(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out_f, out_r)
    assert torch.equal(ei_f, ei_r)
    torch.testing.assert_close(alpha_f, alpha_r)
    # attention_scores (inherited) works through the same fallback.
    torch.testing.assert_close(fused.attention_scores(x, ei)[1], ref.attention_scores(x, ei)[1])
    # Bipartite input falls back to the reference forward as well.
    x_dst = x[:30]
    torch.testing.assert_close(fused((x, x_dst), ei[:, ei[1] < 30]), ref((x, x_dst), ei[:, ei[1] < 30]), **TOL)
    ref_t, fused_t = _pair(LipTransformerConv, FusedLipTransformerConv, IN_CHANNELS, 4, heads=2)
    graph_t = CSRGraph.from_edge_index(ei, NUM_NODES, add_self_loops=False)
    torch.testing.assert_close(fused_t(x, graph_t), ref_t(x, ei), **TOL)


def test_graph_without_edges() -> None:
    empty = torch.zeros(2, 0, dtype=torch.long)
    x = torch.randn(5, IN_CHANNELS)
    ref, fused = _pair(LipTransformerConv, FusedLipTransformerConv, IN_CHANNELS, 4, heads=2)
    torch.testing.assert_close(fused(x, empty), ref(x, empty), **TOL)
    ref_g, fused_g = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 4, add_self_loops=False)
    torch.testing.assert_close(fused_g(x, empty), ref_g(x, empty), **TOL)


def test_attention_dropout_in_train_mode() -> None:
    """Dropout acts on the attention weights as in the reference layer: outputs vary, their mean is the
    eval output (inverted dropout is unbiased), their spread matches the reference's, and with p = 0
    train mode equals eval mode."""
    ei = make_graph(5)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(9))
    ref, fused = _pair(LipGATConv, FusedLipGATConv, IN_CHANNELS, 4, heads=2, dropout=0.5)
    fused.eval()
    expected = fused(x, ei)
    fused.train()
    ref.train()
    n = 200
    torch.manual_seed(0)
    with torch.no_grad():
        samples = torch.stack([fused(x, ei) for _ in range(n)])
        ref_samples = torch.stack([ref(x, ei) for _ in range(n)])
    assert not torch.allclose(samples[0], samples[1])
    # Sample mean within 5 standard errors of the eval output, element-wise.
    stderr = samples.std(0) / n**0.5
    assert ((samples.mean(0) - expected).abs() <= 5 * stderr + 1e-4).all()
    ratio = samples.var(0).mean() / ref_samples.var(0).mean()
    assert abs(float(ratio) - 1) < 0.15
    fused.dropout = 0.0
    torch.testing.assert_close(fused(x, ei), expected)


def test_models_switch_impl_by_loading_weights() -> None:
    """model.impl=fused loads a model.impl=pyg state dict and computes the same logits and gradients."""
    from lipgnn.models import build_model

    spec = SimpleNamespace(num_features=IN_CHANNELS, num_classes=3, input="dense", vocab_sizes=(), edge_dim=None)
    ei = make_graph(6)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(10))
    for name, norm in itertools.product(["gat", "gt"], ["none", "lip"]):
        cfg = {"name": name, "hidden": 8, "heads": 2, "dropout": 0.0, "attn_dropout": 0.0}
        ref = build_model(SimpleNamespace(**cfg, impl="pyg"), SimpleNamespace(name=norm), spec, 3)
        fused = build_model(SimpleNamespace(**cfg, impl="fused"), SimpleNamespace(name=norm), spec, 3)
        fused.load_state_dict(ref.state_dict())
        assert all(type(c).__name__.startswith("Fused") for c in fused.attention_layers())
        assert_same_forward_backward(ref, fused, x, ei)


def test_with_sq_norm_passes_x_through_and_adds_the_norm_gradient_once() -> None:
    """``with_sq_norm`` equals using ``x`` twice (once as is, once in ``(x*x).sum(-1)``): same values and
    the same gradient (the in-place ``2 g x`` must land on x's whole gradient exactly once)."""
    gen = seeded(3)
    x = torch.randn(7, 2, 5, generator=gen, dtype=torch.float64)
    w_out = torch.randn(7, 2, 5, generator=gen, dtype=torch.float64)
    w_sq = torch.randn(7, 2, generator=gen, dtype=torch.float64)

    def loss(fn):
        h = x.clone().requires_grad_(True)
        out, sq = fn(h * 1.0)  # a non-leaf, as the values are in the layer
        ((out * 3.0 * w_out).sum() + (sq * w_sq).sum()).backward()
        return out.detach(), sq.detach(), h.grad

    got = loss(with_sq_norm)
    want = loss(lambda h: (h, (h * h).sum(-1)))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    assert gradcheck(lambda h: with_sq_norm(h * 1.0), (x.clone().requires_grad_(True),))


# ------------------------------------------------------------------ one reference, fast copies


@pytest.mark.parametrize("tie", ["none", "uv=uw", "t=vw", "all"])
def test_max_of_products_equals_the_eq19_reference(tie: str) -> None:
    """The eager fast copy of eq. (19)'s maximum (lipschitz_csr._MaxOfProducts) equals
    lipschitz.eq19_denominator in value and gradient, ties split as the reference splits them."""
    from lipgnn.nn.fused.lipschitz_csr import _MaxOfProducts
    from lipgnn.nn.lipschitz import EPS, eq19_denominator

    gen = seeded(3)
    u, v, w = (torch.rand(6, 2, generator=gen, dtype=torch.float64) + 0.5 for _ in range(3))
    if tie == "uv=uw":
        w = v.clone()  # u v == u w
    elif tie == "t=vw":
        u, v = w.clone(), w + 0.3  # u v == v w > u w
    elif tie == "all":
        u, w = v.clone(), v.clone()
    weight = torch.randn(6, 2, generator=gen, dtype=torch.float64)

    def run(fn):
        leaves = [t.detach().clone().requires_grad_(True) for t in (u, v, w)]
        out = fn(*leaves)
        (out * weight).sum().backward()
        return out.detach(), [t.grad for t in leaves]

    got, got_grads = run(lambda a, b, c: _MaxOfProducts.apply(a, b, c) + EPS * EPS)
    ref, ref_grads = run(lambda a, b, c: eq19_denominator(a, b, c))
    torch.testing.assert_close(got, ref)
    for a, b in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_squared_norm_copies_equal_the_reference() -> None:
    """row_sq_norm, with_sq_norm and add_sq_norm_grad_ equal lipschitz.sq_norm and its autograd gradient."""
    from lipgnn.nn.lipschitz import sq_norm

    gen = seeded(4)
    x = torch.randn(9, 3, 5, generator=gen, dtype=torch.float64)
    g = torch.randn(9, 3, generator=gen, dtype=torch.float64)
    g[2] = 0.0
    ref_x = x.clone().requires_grad_(True)
    (sq_norm(ref_x) * g).sum().backward()
    for fn in (row_sq_norm, lambda h: with_sq_norm(h)[1]):
        leaf = x.clone().requires_grad_(True)
        out = fn(leaf)
        torch.testing.assert_close(out, sq_norm(x))
        (out * g).sum().backward()
        torch.testing.assert_close(leaf.grad, ref_x.grad)
    torch.testing.assert_close(add_sq_norm_grad_(torch.zeros_like(x), x, g), ref_x.grad)


# ------------------------------------------------------------------ dropout


def test_dropout_keep_rate_scaling_and_gradient() -> None:
    """Kept elements are x / (1 - p), the rest 0; the keep rate is 1 - p within 5 binomial standard
    errors; the gradient is the same mask and scale; the same torch seed gives the same mask."""
    from lipgnn.nn.fused import dropout

    n, p = 400_000, 0.6
    x = torch.rand(n, dtype=torch.float32) + 0.5
    torch.manual_seed(0)
    leaf = x.clone().requires_grad_(True)
    y = dropout(leaf, p, True)
    kept = y != 0
    rate = float(kept.double().mean())
    assert abs(rate - (1 - p)) < 5 * ((p * (1 - p) / n) ** 0.5)
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.backward(torch.full_like(y, 3.0))
    torch.testing.assert_close(leaf.grad, kept.float() * 3.0 / (1 - p))
    torch.manual_seed(0)
    assert torch.equal(dropout(x, p, True) != 0, kept)
    assert dropout(x, p, False) is x and dropout(x, 0.0, True) is x


@pytest.mark.parametrize("p", [0.3, 0.6])
def test_dropout_decisions_are_independent(p: float) -> None:
    """No dependence between neighbouring elements (the two halves of one 64-bit draw, the next draw,
    a row apart) or between two calls: the 2x2 tables of kept/dropped pairs match independent
    Bernoulli(1 - p) pairs (chi-square, 1 degree of freedom, far beyond the 1e-6 quantile 23.9), and
    the keep rate is the same in every column and at every position modulo 2."""
    from lipgnn.nn.fused import dropout

    rows, cols = 4000, 64
    x = torch.ones(rows, cols)
    torch.manual_seed(1)
    a = (dropout(x, p, True) != 0).view(-1)
    b = (dropout(x, p, True) != 0).view(-1)
    q = 1 - p

    def chi2(m1: torch.Tensor, m2: torch.Tensor) -> float:
        n = m1.numel()
        observed = torch.tensor([[(m1 & m2).sum(), (m1 & ~m2).sum()], [(~m1 & m2).sum(), (~m1 & ~m2).sum()]],
                                dtype=torch.float64)
        r, c = observed.sum(1, keepdim=True) / n, observed.sum(0, keepdim=True) / n
        expected = r * c * n
        return float(((observed - expected) ** 2 / expected).sum())

    for lag in (1, 2, 3, cols):
        assert chi2(a[:-lag], a[lag:]) < 23.9, lag
    assert chi2(a, b) < 23.9
    n = a.numel()
    for part in (a[0::2], a[1::2]):
        assert abs(float(part.double().mean()) - q) < 5 * (q * p / part.numel()) ** 0.5
    per_col = a.view(rows, cols).double().mean(0)
    assert ((per_col - q).abs() < 5 * (q * p / rows) ** 0.5).all()
    assert abs(float(a.double().mean()) - q) < 5 * (q * p / n) ** 0.5


def test_fused_layers_use_the_fast_dropout_in_training_only() -> None:
    """Feature dropout before a fused layer (models call ``conv.feature_dropout``) and the attention
    dropout use :func:`lipgnn.nn.fused.dropout`; eval mode is deterministic and equals the reference."""
    from lipgnn.nn.fused import dropout

    assert FusedLipGATConv.feature_dropout is dropout and FusedLipTransformerConv.feature_dropout is dropout
    assert not hasattr(LipGATConv, "feature_dropout")


# ------------------------------------------------------------------ GT score hook


def test_fused_gt_l2_score_equals_the_explicit_formula() -> None:
    """score="l2" without LipschitzNorm: softmax_j(-‖q_i - k_j‖² / √d), computed here from its definition
    (the -‖q_i‖² term cancels in the softmax), values and gradients."""
    ei = make_graph(6)
    gen = seeded(2)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=gen, dtype=torch.float64)
    torch.manual_seed(1)
    conv = FusedLipTransformerConv(IN_CHANNELS, 4, heads=2, lipschitz_norm=False, root_weight=False).double()
    conv.score = "l2"
    src, dst = ei

    def explicit(h: torch.Tensor) -> torch.Tensor:
        q, k, v = (lin(h).view(-1, 2, 4) for lin in (conv.lin_query, conv.lin_key, conv.lin_value))
        logits = -((q[dst] - k[src]) ** 2).sum(-1) / 2.0
        a = pyg_softmax(logits, dst, num_nodes=NUM_NODES)
        out = torch.zeros(NUM_NODES, 2, 4, dtype=h.dtype).index_add_(0, dst, a.unsqueeze(-1) * v[src])
        return out.view(NUM_NODES, -1)

    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    weight = torch.randn(NUM_NODES, 8, generator=gen, dtype=torch.float64)
    got, ref = conv(x1, ei), explicit(x2)
    torch.testing.assert_close(got, ref)
    (got * weight).sum().backward()
    (ref * weight).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
