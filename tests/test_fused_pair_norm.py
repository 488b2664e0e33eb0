"""The fused PairNorm (lipgnn.nn.fused.pair_norm) against PyG's PairNorm, whose drop-in subclass it is."""

from __future__ import annotations

import pytest
import torch
from devices import gradcheck, seeded
from plain_fused import awkward_graph, models_by_impl
from torch_geometric.nn.norm import PairNorm

from lipgnn.nn.fused import FusedPairNorm, kernels, pair_norm_kernels

needs_numba = pytest.mark.skipif(kernels.numba is None, reason="numba not installed")


def test_pair_norm_by_hand() -> None:
    """Rows (1, 2) and (3, 6): mean (2, 4), centred ±(1, 2), mean squared norm 5, so y = ±s (1, 2) / √5."""
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=torch.float64)
    y = FusedPairNorm(scale=2.0, eps=0.0)(x)
    want = torch.tensor([[-1.0, -2.0], [1.0, 2.0]], dtype=torch.float64) * 2.0 / 5**0.5
    torch.testing.assert_close(y, want)


@needs_numba
@pytest.mark.cpu_only
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_fused_pair_norm_equals_pyg_values_and_gradients(dtype: torch.dtype, scale: float,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = pair_norm_kernels.pair_norm_forward
    monkeypatch.setattr(pair_norm_kernels, "pair_norm_forward", lambda *a: calls.append(1) or original(*a))
    gen = seeded(0)
    # a large common offset: the one-pass variance must not cancel it away
    x = torch.randn(300, 7, generator=gen, dtype=dtype) * 3 + 50
    g = torch.randn(300, 7, generator=gen, dtype=dtype)
    outs = []
    for layer in (PairNorm(scale=scale), FusedPairNorm(scale=scale)):
        xl = x.clone().requires_grad_(True)
        y = layer(xl)
        outs.append((y.detach(), torch.autograd.grad(y, xl, g)[0]))
    assert calls == [1]
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for a, b in zip(outs[1], outs[0], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    xd = torch.randn(6, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert gradcheck(lambda t: FusedPairNorm(scale=1.7)(t), (xd,))


def test_fused_pair_norm_falls_back_where_pyg_options_differ() -> None:
    x, batch = torch.randn(10, 4), torch.tensor([0] * 4 + [1] * 6)
    torch.testing.assert_close(FusedPairNorm(scale_individually=True)(x), PairNorm(scale_individually=True)(x))
    torch.testing.assert_close(FusedPairNorm()(x, batch), PairNorm()(x, batch))
    with kernels.disabled():
        torch.testing.assert_close(FusedPairNorm()(x), PairNorm()(x))


@pytest.mark.parametrize("name", ["gcn", "gin"])
def test_pairnorm_models_use_it_unless_impl_is_pyg(name: str) -> None:
    """As the sparse-input encoder: ``auto`` and ``fused`` take it for any model (GIN, whose convolution has no
    fused version, included), ``pyg`` keeps PyG's; the models agree."""
    impls = ("pyg", "auto", "fused") if name == "gcn" else ("pyg", "auto")
    nets = models_by_impl(name, impls, norm="pairnorm")
    for impl in impls:
        want = PairNorm if impl == "pyg" else FusedPairNorm
        assert all(type(b.pair_norm) is want for b in nets[impl].blocks)
    x, ei = torch.randn(8, 6), awkward_graph()
    for impl in impls[1:]:
        nets[impl].load_state_dict(nets["pyg"].state_dict())
        nets[impl].eval()
    nets["pyg"].eval()
    for impl in impls[1:]:
        torch.testing.assert_close(nets[impl](x, ei), nets["pyg"](x, ei), atol=1e-5, rtol=1e-5)
