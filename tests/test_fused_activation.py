"""The fused path's ELU and compiled SDDMM against torch (lipgnn.nn.fused.activation, sparse_kernels.sddmm)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from devices import seeded

from lipgnn.nn.fused import ELU, CSRGraph, FusedLipGATConv, kernels
from lipgnn.nn.fused.activation import bias_elu
from lipgnn.nn.fused.sparse import _sddmm, csr_spmm, csr_spmm_bias_elu

pytestmark = pytest.mark.skipif(kernels.numba is None, reason="numba not installed")


def assert_equal_with_gradients(out: torch.Tensor, want: torch.Tensor, fused: torch.nn.Module,
                                ref: torch.nn.Module, gen: torch.Generator) -> None:
    """``out`` equals ``want`` within 1e-5, and so does every parameter's gradient after one random
    backward through both (``fused`` and ``ref`` hold the same parameters in the same order)."""
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    g = torch.randn(out.shape, generator=gen)
    out.backward(g)
    want.backward(g)
    for (name, p), q in zip(fused.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu_equals_torch_in_value_and_gradient(alpha: float) -> None:
    """Every float32 from -100 to 30 (ELU saturates below, the polynomial's range reduction spans
    all of it) and random hidden features: values within float32 rounding of ``F.elu``, gradients too."""
    gen = seeded(0)
    x = torch.cat([torch.linspace(-100.0, 30.0, 200_001), 4 * torch.randn(3000, generator=gen)])
    leaf, ref_leaf = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y, ref = ELU(alpha)(leaf), F.elu(ref_leaf, alpha)
    # the compiled loop on CPU (1-D: viewed 2-D), torch's ELU on CUDA
    assert ("BiasELU" in type(y.grad_fn.next_functions[0][0]).__name__) == kernels.available(x)
    torch.testing.assert_close(y, ref, rtol=0, atol=2e-7)
    g = torch.randn(x.shape, generator=gen)
    y.backward(g)
    ref.backward(g)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=0, atol=5e-7)
    # hand-computed points: ELU(-1) = alpha (e^-1 - 1), ELU(2) = 2, saturation at -alpha
    pts = ELU(alpha)(torch.tensor([-1.0, 2.0, -100.0, 0.0]))
    torch.testing.assert_close(pts, torch.tensor([alpha * (0.36787944117 - 1), 2.0, -alpha, 0.0]))


def test_elu_propagates_nan_and_infinities() -> None:
    """A diverging run must still show its NaN (the trainer stops on it)."""
    y = ELU()(torch.tensor([float("nan"), float("inf"), -float("inf")]))
    assert torch.isnan(y[0]) and y[1] == float("inf") and y[2] == -1.0


def test_elu_falls_back_where_the_loop_does_not_apply() -> None:
    """float64 (the loop's exp is float32), inplace=True and the eager switch give torch's own ELU."""
    x = torch.linspace(-5, 5, 101, dtype=torch.float64, requires_grad=True)
    assert type(ELU()(x).grad_fn).__name__ == type(F.elu(x).grad_fn).__name__
    with kernels.disabled():
        y = ELU()(x.float())
    assert type(y.grad_fn).__name__ == type(F.elu(x.float()).grad_fn).__name__
    z = torch.linspace(-5, 5, 11)
    ELU(inplace=True)(z)
    torch.testing.assert_close(z, F.elu(torch.linspace(-5, 5, 11)))


@pytest.mark.parametrize("with_bias", [True, False])
def test_bias_elu_equals_elu_of_the_sum_with_the_bias_gradient(with_bias: bool) -> None:
    """``bias_elu(x, b)`` = ``F.elu(x + b)``: values, ``∂x`` and ``∂b`` (summed over 5000 rows)."""
    gen = seeded(2)
    x, b = 3 * torch.randn(5000, 24, generator=gen), torch.randn(24, generator=gen)
    leaves = [x.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    refs = [x.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    y = bias_elu(leaves[0], leaves[1] if with_bias else None, 0.7)
    ref = F.elu(refs[0] + refs[1] if with_bias else refs[0], 0.7)
    assert ("BiasELU" in type(y.grad_fn).__name__) == kernels.available(x)
    torch.testing.assert_close(y, ref, rtol=0, atol=2e-7)
    g = torch.randn(y.shape, generator=gen)
    y.backward(g)
    ref.backward(g)
    torch.testing.assert_close(leaves[0].grad, refs[0].grad, rtol=0, atol=5e-7)
    if with_bias:
        torch.testing.assert_close(leaves[1].grad, refs[1].grad, rtol=1e-6, atol=1e-5)
    else:
        assert leaves[1].grad is None


def test_fused_models_apply_elu_with_the_bias_and_equal_the_pyg_model() -> None:
    """model.impl=fused builds the compiled ELU and its GAT blocks hand it to the layer (``forward(...,
    activation=)``), which on this small graph applies it with the bias inside its own operation
    (lipgnn.nn.fused.gat_small), not as a separate ELU; logits and every gradient equal model.impl=pyg's, dropout
    off."""
    from lipgnn.models import build_model

    spec = SimpleNamespace(num_features=5, num_classes=3, input="dense", vocab_sizes=(), edge_dim=None)
    cfg = {"name": "gat", "hidden": 8, "heads": 2, "dropout": 0.0, "attn_dropout": 0.0}
    fused = build_model(SimpleNamespace(**cfg, impl="fused"), SimpleNamespace(name="lip"), spec, 3)
    ref = build_model(SimpleNamespace(**cfg, impl="pyg"), SimpleNamespace(name="lip"), spec, 3)
    assert [type(b.act) for b in fused.blocks] == [ELU, ELU, type(None)]
    assert [type(b.act) for b in ref.blocks] == [torch.nn.ELU, torch.nn.ELU, type(None)]
    fused.load_state_dict(ref.state_dict())
    gen = seeded(4)
    x = torch.randn(40, 5, generator=gen)
    ei = torch.randint(0, 40, (2, 160), generator=gen)
    h = fused.encode(x)
    assert (type(fused.blocks[0](h, ei).grad_fn).__name__ == "_SmallGATBackward") == kernels.available(h)
    assert_equal_with_gradients(fused(x, ei), ref(x, ei), fused, ref, gen)


def test_activation_argument_is_the_layer_then_the_activation() -> None:
    gen = seeded(6)
    conv = FusedLipGATConv(6, 6)
    x, ei = torch.randn(12, 6, generator=gen), torch.randint(0, 12, (2, 30), generator=gen)
    relu = torch.nn.ReLU()
    torch.testing.assert_close(conv(x, ei, activation=relu), relu(conv(x, ei)))
    torch.testing.assert_close(conv(x, ei, activation=torch.nn.ELU(0.5)), F.elu(conv(x, ei), 0.5))
    out, (_, alpha) = conv(x, ei, return_attention_weights=True, activation=torch.nn.ELU())  # reference path
    torch.testing.assert_close(out, F.elu(conv(x, ei)))
    assert alpha.shape[1] == 1


@pytest.mark.cpu_only
@pytest.mark.parametrize("heads", [1, 3])
def test_compiled_sddmm_equals_the_dense_definition(heads: int) -> None:
    """``s[e, h] = <a[row_e, h], b[col_e, h]>`` on a graph with duplicate edges and rows without edges,
    compiled (float32) against the definition in float64 and against ``sampled_addmm`` (eager)."""
    gen = seeded(1)
    src = torch.tensor([0, 1, 2, 2, 3, 4, 5, 5, 1, 0, 3, 3, 4, 6])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 4, 2])
    graph = CSRGraph.from_edge_index(torch.stack([src, dst]), 8, add_self_loops=False)
    a, b = torch.randn(8, heads, 16, generator=gen), torch.randn(8, heads, 16, generator=gen)
    got = _sddmm(graph, a, b)
    want = (a.double()[graph.row] * b.double()[graph.col]).sum(-1)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    with kernels.disabled():
        torch.testing.assert_close(_sddmm(graph, a, b), got)


@pytest.mark.parametrize(("heads", "with_bias"), [(1, True), (3, True), (2, False)])
def test_spmm_bias_elu_equals_the_sum_then_bias_elu(heads: int, with_bias: bool) -> None:
    """``csr_spmm_bias_elu`` (one pass: sum, bias, ELU per row) = ``bias_elu(csr_spmm(·))`` with the heads
    concatenated, on a graph with duplicate edges and rows without edges: values and the gradients of the
    attention values, the sources and the bias; the eager twin gives the same."""
    gen = seeded(7)
    src = torch.tensor([0, 1, 2, 2, 3, 4, 5, 5, 1, 0, 3, 3, 4, 6])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 4, 2])
    graph = CSRGraph.from_edge_index(torch.stack([src, dst]), 8, add_self_loops=False)
    inputs = [torch.rand(graph.num_edges, heads, generator=gen), 2 * torch.randn(8, heads, 5, generator=gen),
              torch.randn(heads * 5, generator=gen)]
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    refs = [t.clone().requires_grad_(True) for t in inputs]
    y = csr_spmm_bias_elu(leaves[0], leaves[1], graph, leaves[2] if with_bias else None, 0.8)
    want = bias_elu(csr_spmm(refs[0], refs[1], graph).reshape(8, -1), refs[2] if with_bias else None, 0.8)
    assert y.shape == (8, heads * 5)
    assert (type(y.grad_fn).__name__ == "_CSRSpMMBiasELUBackward") == kernels.available(inputs[0])
    torch.testing.assert_close(y, want, rtol=0, atol=1e-6)
    g = torch.randn(y.shape, generator=gen)
    y.backward(g)
    want.backward(g)
    for name, leaf, ref in zip(("values", "x", "bias"), leaves, refs, strict=True):
        if name == "bias" and not with_bias:
            assert leaf.grad is None
            continue
        torch.testing.assert_close(leaf.grad, ref.grad, rtol=1e-6, atol=1e-6, msg=name)
    with kernels.disabled():
        eager = csr_spmm_bias_elu(inputs[0], inputs[1], graph, inputs[2] if with_bias else None, 0.8)
    torch.testing.assert_close(eager, y.detach(), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("heads", "concat", "one_pass"), [(1, True, True), (2, True, True), (2, False, False)])
def test_large_graph_gat_blocks_aggregate_with_bias_and_elu_in_one_pass(
    heads: int, concat: bool, one_pass: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a GAT layer does not run as one operation (graphs above gat_small's size), a concatenating
    layer followed by its ELU aggregates, adds its bias and applies the ELU in one pass; a head-averaging
    layer keeps the separate ELU. Outputs and every gradient equal the PyG layer's, dropout off."""
    from lipgnn.nn.fused import gat_small
    from lipgnn.nn.lip_gat_conv import LipGATConv

    monkeypatch.setattr(gat_small, "applies", lambda *args: False)
    gen = seeded(8)
    kw = {"heads": heads, "concat": concat, "lipschitz_norm": True}
    fused, ref = FusedLipGATConv(6, 4, **kw), LipGATConv(6, 4, **kw)
    with torch.no_grad():
        ref.bias.normal_(generator=gen)
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(30, 6, generator=gen)
    ei = torch.randint(0, 30, (2, 120), generator=gen)
    out = fused(x, ei, activation=torch.nn.ELU())
    want = F.elu(ref(x, ei))
    name = type(out.grad_fn).__name__
    assert (name == "_CSRSpMMBiasELUBackward") == (one_pass and kernels.available(x)), name
    assert_equal_with_gradients(out, want, fused, ref, gen)
