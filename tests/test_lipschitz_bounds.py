"""Lipschitz bounds and estimates: Theorem 3.2 (Kim et al.) against exact Jacobians, Lemma F.1's unbounded
untied case, the lower-bound optimiser on maps with known constants, LipschitzNorm's graph-layer bounds."""

from __future__ import annotations

import math

import pytest
import torch
from devices import seeded

from lipgnn.lipschitz import (
    graph_layer_bound,
    inf_norm,
    jacobian_matrix,
    l2_mha_bound,
    lipschitznorm_attention_bound,
    maximise_jacobian_norm,
    phi_inverse,
    spectral_norm,
)
from lipgnn.nn import L2MultiheadAttention, LipGATConv, LipTransformerConv


@pytest.mark.parametrize("n", [2, 3, 10, 100, 1000, 10**6])
def test_phi_inverse_solves_phi(n: int) -> None:
    x = phi_inverse(n)
    assert x * math.exp(x + 1) == pytest.approx(n - 1, rel=1e-10)
    if n >= 3:
        assert x <= math.log(n)  # Appendix F: phi^{-1}(N-1) <= log N for N >= 3


def test_tied_jacobian_never_exceeds_theorem_3_2() -> None:
    torch.manual_seed(0)
    g = seeded(0)
    for heads, dim, n in ((1, 1, 6), (2, 4, 5), (1, 3, 4)):
        attn = L2MultiheadAttention(dim, heads).double()
        bound_inf, bound_2 = l2_mha_bound(attn, n, "inf"), l2_mha_bound(attn, n, 2)
        for scale in (0.01, 1.0, 3.0, 30.0):
            for _ in range(3):
                x = scale * torch.randn(n, dim, generator=g, dtype=torch.float64)
                jac = jacobian_matrix(attn, x)
                assert jac.abs().sum(dim=1).max() <= bound_inf
                assert torch.linalg.matrix_norm(jac, 2) <= bound_2


def _lemma_f1_input(attn: L2MultiheadAttention, t: float) -> torch.Tensor:
    """Lemma F.1: x_0 = t e, and every other x_j with x_j^T W^K = x_0^T (2 W^Q - W^K), so that
    y_j = -y_0 for all j != 0 and the attention of row 0 is uniform while ||y_0|| grows with t."""
    wq, wk = attn.q_weight[0], attn.key_weight[0]  # square (H = 1) and full rank
    x0 = t * torch.ones(wq.size(0), dtype=wq.dtype)
    xj = torch.linalg.solve(wk.T, (x0 @ (2 * wq - wk)))
    return torch.stack([x0] + [xj] * 4)


def test_untied_weights_exceed_any_multiple_of_the_tied_bound() -> None:
    torch.manual_seed(1)
    attn = L2MultiheadAttention(2, 1, tie_qk=False).double()
    tied = L2MultiheadAttention(2, 1, tie_qk=True).double()
    with torch.no_grad():
        tied.q_weight.copy_(attn.q_weight)
        tied.v_weight.copy_(attn.v_weight)
        tied.o_weight.copy_(attn.o_weight)
    reference = l2_mha_bound(tied, 5, "inf")
    norms = [inf_norm(attn, _lemma_f1_input(attn, t)) for t in (1.0, 10.0, 100.0, 1000.0)]
    assert norms[-1] > 10_000 * reference  # grows ~ t^2 without limit
    assert all(b > 50 * a for a, b in zip(norms[1:], norms[2:], strict=False))
    with pytest.raises(ValueError, match="Lemma F.1"):
        l2_mha_bound(attn, 5, "inf")


def test_optimiser_finds_the_constant_of_a_linear_map() -> None:
    torch.manual_seed(2)
    w = torch.randn(4, 3, dtype=torch.float64)  # f(X) = X W on X in R^{5x4}: J = I_5 (x) W^T
    f = lambda x: x @ w  # noqa: E731
    x0 = torch.randn(3, 5, 4, dtype=torch.float64)
    lb_inf = maximise_jacobian_norm(f, x0, "inf", steps=3)
    assert lb_inf.best == pytest.approx(float(w.T.abs().sum(dim=1).max()), rel=1e-12)
    lb_2 = maximise_jacobian_norm(f, x0, 2, steps=3)
    assert lb_2.best == pytest.approx(float(torch.linalg.matrix_norm(w, 2)), rel=1e-6)


def test_optimiser_finds_the_constant_of_a_nonlinear_map() -> None:
    # f(x) = sin(3x) elementwise: Lip_inf = Lip_2 = 3, reached only where cos(3x_k) = +-1 for some k.
    f = lambda x: torch.sin(3.0 * x)  # noqa: E731
    x0 = math.pi / 6 + 0.05 * torch.rand(4, 6, dtype=torch.float64, generator=seeded(0))
    start = max(inf_norm(f, x) for x in x0)
    lb = maximise_jacobian_norm(f, x0, "inf", steps=150, lr=0.05, vectorize=True, trace_every=10)
    assert start < 1.0 and 2.99 < lb.best <= 3.0 + 1e-12
    assert len(lb.trace) == 4 and len(lb.trace[0]) == 16


def test_power_iteration_matches_the_exact_spectral_norm() -> None:
    torch.manual_seed(3)
    attn = L2MultiheadAttention(4, 2).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    sigma, _ = spectral_norm(attn, x, iters=500, tol=1e-12)
    assert sigma == pytest.approx(float(torch.linalg.matrix_norm(jacobian_matrix(attn, x).detach(), 2)), rel=1e-6)


def test_power_iteration_keeps_no_autograd_history_through_parameters() -> None:
    # The iterates must not chain each iteration's graph through the module's parameters: kept, a deep
    # network's estimate held iters x depth graphs (tens of GB on Cora at 30 layers).
    torch.manual_seed(3)
    attn = L2MultiheadAttention(4, 2).double()
    assert all(p.requires_grad for p in attn.parameters())
    x = torch.randn(5, 4, dtype=torch.float64)
    _, v = spectral_norm(attn, x, iters=5, tol=0.0)
    assert not v.requires_grad and v.grad_fn is None


def test_spectral_ascent_is_reproducible_from_its_generator() -> None:
    # The power iteration's random start vectors come from the generator, not the global RNG.
    torch.manual_seed(4)
    attn = L2MultiheadAttention(2, 1).double()
    x0 = torch.randn(1, 4, 2, dtype=torch.float64)
    runs = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        lb = maximise_jacobian_norm(attn, x0, 2, steps=1, generator=seeded(5))
        runs.append(lb.values)
    assert runs[0] == runs[1]


def test_lipschitznorm_attention_bounds_are_the_corollaries() -> None:
    assert lipschitznorm_attention_bound("gat", 4, 4) == pytest.approx(math.e + math.sqrt(8))  # Corollary 1
    assert lipschitznorm_attention_bound("gt", 4, 4) == pytest.approx(math.exp(math.sqrt(3)) + 2 * math.sqrt(6))


def _random_graph(n: int, e: int, seed: int) -> torch.Tensor:
    g = seeded(seed)
    return torch.randint(0, n, (2, e), generator=g)


@pytest.mark.parametrize("kind", ["gat", "gt"])
def test_graph_layer_bound_holds_for_lipschitznorm_layers(kind: str) -> None:
    torch.manual_seed(4)
    n = 7
    edge_index = torch.cat([_random_graph(n, 18, seed=5), torch.arange(n).repeat(2, 1)], dim=1)
    if kind == "gat":
        conv = LipGATConv(3, 2, heads=2).double().eval()
        plain = LipGATConv(3, 2, heads=2, lipschitz_norm=False).double().eval()
    else:
        conv = LipTransformerConv(3, 2, heads=2).double().eval()
        plain = LipTransformerConv(3, 2, heads=2, lipschitz_norm=False).double().eval()
    bound = graph_layer_bound(conv, edge_index, n)
    assert math.isfinite(bound) and math.isinf(graph_layer_bound(plain, edge_index, n))
    g = seeded(6)
    for scale in (0.01, 1.0, 100.0):
        for _ in range(4):
            x = scale * torch.randn(n, 3, generator=g, dtype=torch.float64)
            jac = jacobian_matrix(lambda z: conv(z, edge_index), x)
            assert torch.linalg.matrix_norm(jac, 2) <= bound


def test_graph_layer_bound_hand_computed_on_two_nodes() -> None:
    # Two nodes, both edges, self-loops: every node has n_i = 2 inputs and feeds 2 targets (S_j = 2 L^2).
    edge_index = torch.tensor([[0, 1, 0, 1], [1, 0, 0, 1]])
    gt = LipTransformerConv(1, 1, heads=1).double()
    with torch.no_grad():
        for lin, w in ((gt.lin_query, 0.5), (gt.lin_key, -2.0), (gt.lin_value, 3.0), (gt.lin_skip, -0.25)):
            lin.weight.fill_(w)
    big_l = math.exp(math.sqrt(3.0)) / math.sqrt(2.0) + 2.0 * math.sqrt(6.0)
    expected = big_l * math.sqrt(0.5**2 + 2 * 2.0**2 + 2 * 3.0**2) + 0.25
    assert graph_layer_bound(gt, edge_index, 2) == pytest.approx(expected, rel=1e-12)
    gat = LipGATConv(1, 1, heads=1).double()  # adds the self-loops itself
    with torch.no_grad():
        gat.lin.weight.fill_(-1.5)
    big_l = math.e / math.sqrt(2.0) + math.sqrt(8.0)
    assert graph_layer_bound(gat, edge_index[:, :2], 2) == pytest.approx(2 * big_l * 1.5, rel=1e-12)
