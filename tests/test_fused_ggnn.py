"""The fused GGNN layer (lipgnn.nn.fused.gated_graph_conv) and its compiled GRU cell (lipgnn.nn.fused.gru)
against PyG's GatedGraphConv and torch's GRUCell, whose drop-in replacements they are."""

from __future__ import annotations

import pytest
import torch
from devices import seeded
from plain_fused import (
    assert_fused_model_loads_and_equals_pyg,
    assert_layer_classes,
    awkward_graph,
    count_spmm,
    models_by_impl,
)
from torch_geometric.nn import GatedGraphConv

from lipgnn.nn.fused import FusedGatedGraphConv, gru_kernels, kernels
from lipgnn.nn.fused.gru import gru_cell

needs_numba = pytest.mark.skipif(kernels.numba is None, reason="numba not installed")


def grads_of(fn, inputs: list[torch.Tensor], params: list[torch.Tensor], g: torch.Tensor):
    out = fn(*inputs)
    return out.detach(), torch.autograd.grad(out, [*inputs, *params], g)


def test_gru_cell_by_hand() -> None:
    """One channel, all weights 1, biases 0: r = z = σ(m + h), n = tanh(m + r h), h' = (1 − z) n + z h."""
    cell = torch.nn.GRUCell(1, 1)
    with torch.no_grad():
        cell.weight_ih.fill_(1.0), cell.weight_hh.fill_(1.0), cell.bias_ih.zero_(), cell.bias_hh.zero_()
    m, h = torch.tensor([[0.5], [-2.0]]), torch.tensor([[1.0], [0.25]])
    r = torch.sigmoid(m + h)
    n = torch.tanh(m + r * h)
    want = (1 - r) * n + r * h
    torch.testing.assert_close(gru_cell(m, h, cell), want)
    # σ(1.5) = 0.8176, n = tanh(0.5 + 0.8176) = 0.8662, h' = 0.1824 · 0.8662 + 0.8176 · 1
    assert want[0].item() == pytest.approx(0.9756, abs=1e-4)


@needs_numba
@pytest.mark.cpu_only
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_gru_cell_equals_torch_values_and_gradients(bias: bool) -> None:
    gen = seeded(0)
    cell = torch.nn.GRUCell(6, 6, bias=bias)
    # wide pre-activations: saturated gates (|a| up to ~40) and values near 0 on both sides
    m = torch.randn(300, 6, generator=gen) * torch.logspace(-3, 1, 300).unsqueeze(1)
    h = torch.randn(300, 6, generator=gen) * 3
    g = torch.randn(300, 6, generator=gen)
    params = list(cell.parameters())
    calls = []
    original = gru_kernels.gru_cell
    gru_kernels.gru_cell = lambda *a: calls.append(1) or original(*a)
    try:
        got, got_grads = grads_of(lambda a, b: gru_cell(a, b, cell), [m.clone().requires_grad_(),
                                                                    h.clone().requires_grad_()], params, g)
    finally:
        gru_kernels.gru_cell = original
    assert calls == [1]  # the compiled loop ran
    want, want_grads = grads_of(cell, [m.clone().requires_grad_(), h.clone().requires_grad_()], params, g)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_numba
@pytest.mark.cpu_only
def test_gru_cell_falls_back_to_torch_off_float32_and_propagates_nan() -> None:
    cell = torch.nn.GRUCell(3, 3).double()
    m, h = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    assert torch.equal(gru_cell(m, h, cell), cell(m, h))  # float64: torch's cell itself
    cell = torch.nn.GRUCell(3, 3)
    m, h = torch.randn(4, 3), torch.randn(4, 3)
    m[1, 0] = float("nan")
    out = gru_cell(m, h, cell)
    assert out[1].isnan().all() and not out[[0, 2, 3]].isnan().any()  # a diverged run shows its NaN


def pair(channels: int = 5, num_layers: int = 2, seed: int = 0, **kw) -> tuple[GatedGraphConv, FusedGatedGraphConv]:
    torch.manual_seed(seed)
    ref = GatedGraphConv(channels, num_layers, **kw)
    fused = FusedGatedGraphConv(channels, num_layers, **kw)
    fused.load_state_dict(ref.state_dict())
    # PyG builds GatedGraphConv's weight with the legacy torch.Tensor constructor, which ignores the default device.
    device = torch.get_default_device()
    return ref.to(device), fused.to(device)


@pytest.mark.parametrize("mode", ["numba", "eager"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("in_channels", [5, 3])  # 3 < out_channels: the input is zero-padded
def test_fused_ggnn_equals_pyg_values_and_gradients(mode: str, dtype: torch.dtype, in_channels: int) -> None:
    ref, fused = pair()
    ref, fused = ref.to(dtype), fused.to(dtype)
    ei = awkward_graph()
    x = torch.randn(8, in_channels, dtype=dtype)
    g = torch.randn(8, 5, dtype=dtype)
    results = []
    for conv in (ref, fused):
        xl = x.clone().requires_grad_(True)
        params = list(conv.parameters())
        if mode == "eager" and conv is fused:
            with kernels.disabled():
                results.append(grads_of(lambda a, c=conv: c(a, ei), [xl], params, g))
        else:
            results.append(grads_of(lambda a, c=conv: c(a, ei), [xl], params, g))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_fused_ggnn_takes_the_csr_path_and_falls_back_where_pyg_options_differ(monkeypatch) -> None:
    import lipgnn.nn.fused.gated_graph_conv as module

    calls = count_spmm(monkeypatch, module)
    ei, x = awkward_graph(), torch.randn(8, 5)
    _, fused = pair()
    fused(x, ei)
    assert calls == [1, 1]  # one product per step
    calls.clear()
    for kw in ({"aggr": "mean"}, {"aggr": "max"}, {"flow": "target_to_source"}):
        ref, fused = pair(**kw)
        torch.testing.assert_close(fused(x, ei), ref(x, ei), atol=1e-5, rtol=1e-5)
    _, fused = pair()
    w = torch.rand(ei.size(1))
    torch.testing.assert_close(fused(x, ei, w), GatedGraphConv.forward(fused, x, ei, w))  # edge weights: PyG
    assert calls == []
    with pytest.raises(ValueError, match="not allowed to be larger"):
        fused(torch.randn(8, 6), ei)


def test_models_build_the_fused_ggnn_with_the_same_state_dict() -> None:
    nets = models_by_impl("ggnn", ("pyg", "fused", "auto"))
    assert_layer_classes(nets, FusedGatedGraphConv, GatedGraphConv)  # auto: fused on CPU
    assert_fused_model_loads_and_equals_pyg(nets)


def test_a_graph_first_seen_under_inference_mode_still_trains() -> None:
    ref, fused = pair()
    ei, x = awkward_graph(), torch.randn(8, 5)
    with torch.inference_mode():
        torch.testing.assert_close(fused(x, ei), ref(x, ei), atol=1e-5, rtol=1e-5)
    fused(x, ei).sum().backward()
