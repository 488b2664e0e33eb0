"""The compiled CPU loops (lipgnn.nn.fused.kernels) against their eager twins.

Each compiled autograd function is run with the kernels on and off on the same inputs (float64,
several heads, tied maxima, targets without in-edges) and must give the same values and gradients;
the hand-written backward passes are also checked with ``torch.autograd.gradcheck``. The layer-level
equality with the PyG reference runs in both modes in test_fused.py.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from devices import seeded

from lipgnn.nn.fused import (
    CSRGraph,
    FusedLipGATConv,
    FusedLipTransformerConv,
    gat_small,
    kernels,
    neighbour_max_csr,
    row_sq_norm,
    score_kernels,
    sparse_kernels,
    transformer_denominator_csr,
    transformer_scale_csr,
    with_sq_norm,
)
from lipgnn.nn.fused.gat_conv import _NodeScores
from lipgnn.nn.fused.lipschitz_csr import _NeighbourMaxPair
from lipgnn.nn.fused.sparse import _GATScaledScores, _RowScale, csr_spmm

pytestmark = [pytest.mark.skipif(kernels.numba is None, reason="numba not installed"), pytest.mark.cpu_only]


def graph_with_ties_and_empty_rows() -> CSRGraph:
    """Targets 0-5 with several sources (duplicate edges → exact ties), targets 6, 7 without in-edges."""
    src = torch.tensor([0, 1, 2, 2, 3, 4, 5, 5, 1, 0, 3, 3, 4, 6, 7, 7, 2])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 2])
    return CSRGraph.from_edge_index(torch.stack([src, dst]), 8, add_self_loops=False)


def both_modes(fn, *inputs: torch.Tensor):
    """(output, input gradients) of ``fn`` with the compiled loops and with the eager path."""
    gen = seeded(5)
    results = []
    for compiled in (True, False):
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        # the backward inside the same mode: a hand-written backward calls the kernels too
        with contextlib.nullcontext() if compiled else kernels.disabled():
            out = fn(*leaves)
            outs = out if isinstance(out, tuple) else (out,)
            gen.manual_seed(5)
            loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
            loss.backward()
        results.append(([o.detach() for o in outs], [t.grad for t in leaves]))
    return results


def assert_modes_agree(fn, *inputs: torch.Tensor) -> None:
    (out_c, grad_c), (out_e, grad_e) = both_modes(fn, *inputs)
    for a, b in zip(out_c, out_e, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(grad_c, grad_e, strict=True):
        torch.testing.assert_close(a, b)


def count_heads(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Spy on ``sparse_kernels.<name>``: the list that collects the head count (``size(1)`` of the first
    argument) of every call."""
    calls: list[int] = []
    original = getattr(sparse_kernels, name)

    def spy(*args, **kw):
        calls.append(args[0].size(1))
        return original(*args, **kw)

    monkeypatch.setattr(sparse_kernels, name, spy)
    return calls


def test_available_follows_dtype_device_and_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.zeros(2, 2)
    assert kernels.available(x, x.double()) is False  # mixed dtypes
    assert kernels.available(x.half()) is False
    assert kernels.available(x) is True
    with kernels.disabled():
        assert kernels.available(x) is False
    monkeypatch.setenv("LIPGNN_KERNELS", "eager")
    assert kernels.available(x) is False


def test_neighbour_max_values_ties_and_empty_rows() -> None:
    g = graph_with_ties_and_empty_rows()
    s = torch.tensor([[1.0, 2.0], [4.0, 2.0], [4.0, 0.5], [0.0, 3.0], [2.0, 3.0], [1.0, 1.0], [0.0, 0.0],
                      [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    m = neighbour_max_csr(s, g)
    # target 0: sources 0,1,2 → head 0 max 4 (tie 1, 2), head 1 max 2 (tie 0, 1); targets 6, 7: 0
    assert m[0].tolist() == [4.0, 2.0] and m[6].tolist() == [0.0, 0.0] and m[7].tolist() == [0.0, 0.0]
    # target 4: source 3 twice and 4 → head 0 max 2 (source 4), head 1 max 3 (3, 3, 4: three ties)
    assert m[4].tolist() == [2.0, 3.0]
    grad = torch.zeros_like(m)
    grad[0] = torch.tensor([2.0, 4.0])
    grad[4] = torch.tensor([1.0, 3.0])
    m.backward(grad)
    expected = torch.zeros(8, 2, dtype=torch.float64)
    expected[1, 0] = expected[2, 0] = 1.0  # 2 split between the tied sources 1, 2
    expected[0, 1] = expected[1, 1] = 2.0
    expected[4, 0] = 1.0
    expected[3, 1] = 2.0  # source 3 appears twice among the three tied edges: 2 × 3/3
    expected[4, 1] = 1.0
    torch.testing.assert_close(s.grad, expected)
    assert_modes_agree(lambda t: neighbour_max_csr(t, g), s)
    # GT's paired maxima (keys and values in one loop) equal two separate ones, gradients included
    s2 = torch.rand(8, 2, dtype=torch.float64)
    s2[5] = s2[4]  # a tie in target 4's row
    (pair, pair_grads), (single, single_grads) = [
        both_modes(fn, s, s2)[0] for fn in
        (lambda a, b: _NeighbourMaxPair.apply(a, b, g), lambda a, b: (neighbour_max_csr(a, g), neighbour_max_csr(b, g)))
    ]
    for a, b in zip(pair + pair_grads, single + single_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_nan_propagates_through_the_compiled_loops_as_through_torch() -> None:
    """A NaN feature must reach the loss in both modes (the trainer stops a diverged run on it)."""
    g = graph_with_ties_and_empty_rows()
    s = torch.rand(8, 1)
    s[2] = float("nan")  # a source of targets 0, 1 and 2
    x = torch.randn(8, 1, 3)
    x[4, 0, 1] = float("nan")
    for ctx in (torch.enable_grad, kernels.disabled):
        with ctx():
            m = neighbour_max_csr(s, g)
            assert m[:3].isnan().all() and not m[3:].isnan().any()
            assert row_sq_norm(x).isnan().view(-1).tolist() == [i == 4 for i in range(8)]


@pytest.mark.parametrize("heads", [1, 3])
def test_gat_node_terms_and_edge_scores_match_eager(heads: int) -> None:
    g = CSRGraph.from_edge_index(graph_with_ties_and_empty_rows().edge_index, 8, add_self_loops=True)
    gen = seeded(0)
    x = torch.randn(8, heads, 5, generator=gen, dtype=torch.float64)
    att_src, att_dst = (torch.randn(heads, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    for with_norm in (False, True):
        # the pass-through is used downstream as the layer does (its gradient buffer is updated in place)
        assert_modes_agree(lambda h, a, b, w=with_norm: tuple(t * 1 for t in _NodeScores.apply(h, a, b, w)),
                           x, att_src, att_dst)
    a_src, a_dst = (torch.randn(8, heads, generator=gen, dtype=torch.float64) for _ in range(2))
    k = torch.rand(8, heads, generator=gen, dtype=torch.float64) + 0.1
    assert_modes_agree(lambda p, q: _GATScaledScores.apply(p, q, None, g), a_src, a_dst)
    assert_modes_agree(lambda p, q, r: _GATScaledScores.apply(p, q, r, g), a_src, a_dst, k)
    raw = (a_src[g.col] + a_dst[g.row]) * k[g.row]
    torch.testing.assert_close(_GATScaledScores.apply(a_src, a_dst, k, g), raw)


@pytest.mark.parametrize("heads", [1, 2])
def test_row_scale_and_norms_match_eager(heads: int) -> None:
    g = graph_with_ties_and_empty_rows()
    gen = seeded(1)
    s = torch.randn(g.num_edges, heads, generator=gen, dtype=torch.float64)
    k = torch.randn(8, heads, generator=gen, dtype=torch.float64)
    assert_modes_agree(lambda p, q: _RowScale.apply(p, q, g), s, k)
    x = torch.randn(8, heads, 4, generator=gen, dtype=torch.float64)
    assert_modes_agree(row_sq_norm, x)
    assert_modes_agree(lambda h: tuple(t * 1 for t in with_sq_norm(h)), x)


def test_sq_norm_gradient_leaves_rows_with_zero_gradient_untouched() -> None:
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    grad_x = torch.randn(6, 2, 3, dtype=torch.float64)
    grad_sq = torch.zeros(6, 2, dtype=torch.float64)
    grad_sq[1, 0], grad_sq[4, 1] = 0.5, -2.0
    expected = grad_x + 2 * grad_sq.unsqueeze(-1) * x
    out = score_kernels.add_sq_norm_grad_(grad_x, x, grad_sq)
    assert out is grad_x
    torch.testing.assert_close(out, expected)


def eq19_inputs(heads: int, tie: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = seeded(heads)
    q, k, v = (torch.rand(8, heads, generator=gen, dtype=torch.float64) * 4 for _ in range(3))
    if tie == "uv=uw":  # equal key and value norms: u v = u w on every target
        v = k.clone()
    elif tie == "all":  # every product equal
        q, v = k.clone(), k.clone()
    q[3] = 0.0  # a zero query norm: finite gradients at 0 (ε)
    return q, k, v


@pytest.mark.parametrize("tie", ["none", "uv=uw", "all"])
@pytest.mark.parametrize("heads", [1, 3])
def test_eq19_scale_equals_alpha_over_the_denominator(heads: int, tie: str) -> None:
    """The compiled α / c_i of eq. (19) equals α / transformer_denominator_csr in value and gradient,
    with ties between the three products (half the gradient to each of two equal ones) and for
    targets without in-edges (factor α, no gradient)."""
    g = graph_with_ties_and_empty_rows()
    alpha = 2.5

    def compiled(q, k, v):
        return transformer_scale_csr(q, k, v, g, alpha, channels=4)

    def eager(q, k, v):
        with kernels.disabled():
            return alpha / transformer_denominator_csr(q, k, v, g)

    inputs = eq19_inputs(heads, tie)
    out, grads = [], []
    for fn in (compiled, eager):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        o = fn(*leaves)
        (o * torch.arange(1.0, 1 + o.numel(), dtype=o.dtype).view_as(o)).sum().backward()
        out.append(o.detach())
        grads.append([t.grad for t in leaves])
    torch.testing.assert_close(out[0], out[1])
    assert out[0][6:].eq(alpha).all()
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b)
    with kernels.disabled():  # the reference variant has no compiled path: same function both ways
        ref = transformer_scale_csr(*inputs, g, alpha, channels=4, variant="reference")
    torch.testing.assert_close(ref, alpha / (transformer_denominator_csr(*inputs, g, "reference") * 2.0))


def test_compiled_backward_passes_gradcheck() -> None:
    g = graph_with_ties_and_empty_rows()
    gen = seeded(3)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen, dtype=torch.float64) + 0.1).requires_grad_(True)

    q, k, v = rand(8, 2), rand(8, 2), rand(8, 2)
    assert torch.autograd.gradcheck(lambda a, b, c: transformer_scale_csr(a, b, c, g, 1.5, channels=4), (q, k, v))
    assert torch.autograd.gradcheck(lambda s: neighbour_max_csr(s, g), (rand(8, 2),))
    assert torch.autograd.gradcheck(lambda s, f: _RowScale.apply(s, f, g), (rand(g.num_edges, 2), rand(8, 2)))
    assert torch.autograd.gradcheck(lambda a, b, f: _GATScaledScores.apply(a, b, f, g), (rand(8, 2), rand(8, 2),
                                                                                         rand(8, 2)))
    x, a_src, a_dst = rand(8, 2, 3), rand(2, 3), rand(2, 3)
    assert torch.autograd.gradcheck(lambda h, a, b: tuple(t * 1 for t in _NodeScores.apply(h, a, b, True)),
                                    (x, a_src, a_dst))


@pytest.mark.parametrize("kind", ["gat", "gt"])
def test_layers_take_the_compiled_path_on_cpu(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LipschitzNorm on a CPU float tensor the layers run the compiled loops (not silently the
    eager twins): count the calls."""
    calls: list[str] = []
    for name in ("neighbour_max", "neighbour_max_pair", "sq_norm", "gat_node_terms", "gat_edge_scores", "row_scale",
                 "eq19_scale"):
        original = getattr(score_kernels, name)

        def spy(*args, _name=name, _original=original, **kw):
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(score_kernels, name, spy)
    ei = graph_with_ties_and_empty_rows().edge_index
    conv = (FusedLipGATConv(5, 4, heads=2, lipschitz_norm=True) if kind == "gat"
            else FusedLipTransformerConv(5, 4, heads=2, lipschitz_norm=True))
    if kind == "gat":  # a graph this small runs GAT-Lip as one operation, whose loops are compiled too
        out = conv(torch.randn(8, 5), ei)
        assert type(out.grad_fn).__name__ == "_SmallGATBackward" and calls == []
        monkeypatch.setattr(gat_small, "SMALL_EDGE_CHANNELS", 0)  # the general path below
    conv(torch.randn(8, 5), ei).sum().backward()
    expected = ({"gat_node_terms", "neighbour_max", "gat_edge_scores"} if kind == "gat"
                else {"sq_norm", "neighbour_max_pair", "eq19_scale", "row_scale"})
    assert expected <= set(calls)
    calls.clear()
    with kernels.disabled():
        conv(torch.randn(8, 5), ei).sum().backward()
    assert calls == []


@pytest.mark.parametrize(("heads", "width"), [(2, 3), (4, 8), (3, 1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_multi_head_spmm_matches_the_per_head_products(heads: int, width: int, dtype: torch.dtype,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Several heads go through one compiled row loop (not MKL head by head, with each strided slice copied):
    values and gradients equal the eager per-head products, rows without in-edges give zeros, and one head
    keeps MKL."""
    g = graph_with_ties_and_empty_rows()
    gen = seeded(heads * 10 + width)
    values = torch.rand(g.num_edges, heads, generator=gen, dtype=dtype)
    x = torch.randn(8, heads, width, generator=gen, dtype=dtype)
    calls = count_heads(monkeypatch, "spmm_heads")
    assert_modes_agree(lambda v, h: csr_spmm(v, h, g), values, x)
    assert calls == [heads, heads]  # the forward and the transposed product of the backward
    out = csr_spmm(values, x, g)
    assert out[6:].eq(0).all()  # targets 6 and 7 have no in-edges
    dense = torch.zeros(heads, 8, 8, dtype=dtype)
    dense[:, g.row, g.col] = 0  # pattern only; duplicate edges are summed below
    for e in range(g.num_edges):
        dense[:, g.row[e], g.col[e]] += values[e]
    torch.testing.assert_close(out, torch.einsum("hij,jhc->ihc", dense, x))
    calls.clear()
    csr_spmm(values[:, :1], x[:, :1], g)
    assert calls == []


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("bound", [None, 2.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_multi_head_row_softmax_matches_pyg_and_the_eager_path(heads: int, bound: float | None, dtype: torch.dtype,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Several heads take one compiled pass per CSR row (forward and backward): values equal PyG's
    ``softmax`` (with the row maximum or the constant shift), gradients equal the eager path's, rows sum to
    one, and one head keeps the 1-D passes."""
    from torch_geometric.utils import softmax as pyg_softmax

    from lipgnn.nn.fused.sparse import csr_softmax

    g = graph_with_ties_and_empty_rows()
    gen = seeded(heads)
    scores = (torch.rand(g.num_edges, heads, generator=gen, dtype=dtype) * 4 - 2)
    scores[1] = scores[0]  # a tie inside row 0
    calls = count_heads(monkeypatch, "row_softmax")
    assert_modes_agree(lambda s: csr_softmax(s, g, bound), scores)
    assert calls == ([heads] if heads > 1 else [])
    p = csr_softmax(scores, g, bound)
    torch.testing.assert_close(p, pyg_softmax(scores, g.row, num_nodes=g.num_dst))
    sums = torch.zeros(g.num_dst, heads, dtype=dtype).index_add_(0, g.row, p)
    torch.testing.assert_close(sums[:6], torch.ones(6, heads, dtype=dtype))
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(lambda s: csr_softmax(s, g, bound), (scores.detach().requires_grad_(),))


def test_node_terms_backward_takes_the_batched_attention_gradient_on_large_inputs() -> None:
    """From ~2k nodes with several heads the attention vectors' gradients come from one batched product, not
    the loop: both branches equal the eager path."""
    gen = seeded(3)
    for n in (50, 2100):
        x = torch.randn(n, 3, 5, generator=gen, dtype=torch.float64)
        att_src, att_dst = (torch.randn(3, 5, generator=gen, dtype=torch.float64) for _ in range(2))
        assert_modes_agree(lambda h, a, b: tuple(t * 1 for t in _NodeScores.apply(h, a, b, True)),
                           x, att_src, att_dst)


def fused_loops() -> dict[str, object]:
    """Every compiled loop (numba dispatcher) of :mod:`lipgnn.nn.fused`, keyed by ``module.function``."""
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    import lipgnn.nn.fused as fused

    loops: dict[str, object] = {}
    for info in pkgutil.iter_modules(fused.__path__):
        module = importlib.import_module(f"{fused.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                loops[f"{value.py_func.__module__}.{value.py_func.__qualname__}"] = value
    return loops


def test_every_compiled_loop_lives_in_a_kernels_module_and_keeps_its_disk_cache() -> None:
    """The fused path's kernel convention (:mod:`lipgnn.nn.fused.kernels`): every compiled loop is defined in a
    ``*_kernels`` module, one per layer family or shared family of operations, never in a layer's module; and each
    keeps numba's on-disk cache (no recompilation per process)."""
    loops = fused_loops()
    assert len(loops) >= 40, sorted(loops)  # the discovery finds them (49 loops in 8 modules)
    outside = sorted(name for name in loops if not name.rsplit(".", 1)[0].endswith("_kernels"))
    assert not outside, f"compiled loops outside a *_kernels module: {outside}"
    uncached = sorted(name for name, loop in loops.items() if type(loop._cache).__name__ != "FunctionCache")
    assert not uncached, f"compiled loops without numba's disk cache: {uncached}"
