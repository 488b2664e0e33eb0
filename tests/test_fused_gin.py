"""The fused GIN layer (lipgnn.nn.fused.gin_conv) against PyG's GINConv, whose drop-in subclass it is."""

from __future__ import annotations

import pytest
import torch
from plain_fused import (
    assert_fused_model_loads_and_equals_pyg,
    assert_layer_classes,
    awkward_graph,
    count_spmm,
    models_by_impl,
)
from torch_geometric.nn import MLP, GINConv

from lipgnn.nn.fused import FusedGINConv, kernels


def pair(train_eps: bool = False, seed: int = 0) -> tuple[GINConv, FusedGINConv]:
    torch.manual_seed(seed)
    ref = GINConv(MLP([5, 6, 4], norm="batch_norm", plain_last=False), eps=0.3, train_eps=train_eps)
    fused = FusedGINConv(MLP([5, 6, 4], norm="batch_norm", plain_last=False), eps=0.3, train_eps=train_eps)
    fused.load_state_dict(ref.state_dict())
    return ref, fused


def test_neighbour_sum_by_hand() -> None:
    """Identity nn, eps 0.5, path 0 → 1 ← 2 plus a parallel 0 → 1: node 1 gets 1.5 x_1 + 2 x_0 + x_2."""
    conv = FusedGINConv(torch.nn.Identity(), eps=0.5)
    x = torch.tensor([[1.0], [10.0], [100.0]], dtype=torch.float64)
    ei = torch.tensor([[0, 2, 0], [1, 1, 1]])
    torch.testing.assert_close(conv(x, ei), torch.tensor([[1.5], [117.0], [150.0]], dtype=torch.float64))


@pytest.mark.parametrize("mode", ["numba", "eager"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("train_eps", [False, True])
def test_fused_gin_equals_pyg_values_and_gradients(mode: str, dtype: torch.dtype, train_eps: bool) -> None:
    ref, fused = pair(train_eps)
    ref, fused = ref.to(dtype).train(), fused.to(dtype).train()
    ei = awkward_graph()
    x = torch.randn(8, 5, dtype=dtype)
    g = torch.randn(8, 4, dtype=dtype)
    results = []
    for conv in (ref, fused):
        xl = x.clone().requires_grad_(True)
        params = list(conv.parameters())
        with kernels.disabled() if mode == "eager" and conv is fused else torch.enable_grad():
            out = conv(xl, ei)
            results.append((out.detach(), torch.autograd.grad(out, [xl, *params], g)))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for a, b in zip(fused.buffers(), ref.buffers(), strict=True):  # BatchNorm's running statistics
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_fused_gin_takes_the_csr_path_and_falls_back_where_pyg_options_differ(monkeypatch) -> None:
    import lipgnn.nn.fused.gin_conv as module

    calls = count_spmm(monkeypatch, module)
    ei, x = awkward_graph(), torch.randn(8, 5)
    ref, fused = pair()
    ref.eval(), fused.eval()
    fused(x, ei)
    assert calls == [1]
    calls.clear()
    torch.testing.assert_close(fused(x, ei, (8, 8)), ref(x, ei, (8, 8)))  # explicit size: PyG's path
    torch.testing.assert_close(fused((x, x), ei), ref((x, x), ei))  # bipartite: PyG's path
    assert calls == []


def test_models_build_the_fused_gin_with_the_same_state_dict() -> None:
    nets = models_by_impl("gin", ("pyg", "fused", "auto"))
    assert_layer_classes(nets, FusedGINConv, GINConv)  # auto: fused on CPU
    assert_fused_model_loads_and_equals_pyg(nets)
