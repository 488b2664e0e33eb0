"""lipgnn.nn.lipschitz_norm on PyG's stock layers, and GATv2's LipschitzNorm bound (docs/reference.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

from lipgnn.errors import ConfigError
from lipgnn.lipschitz.estimate import lower_bound_at
from lipgnn.nn import LipGATConv, LipGATv2Conv, LipTransformerConv, lipschitz_norm


def _graph(n: int = 30, e: int = 120, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=gen, dtype=torch.float64), torch.randint(0, n, (2, e), generator=gen)


@pytest.mark.parametrize("impl", ["pyg", "auto"])
def test_gatconv_equals_lipgatconv(impl: str) -> None:
    torch.manual_seed(0)
    x, ei = _graph()
    conv = GATConv(16, 8, heads=2).double()
    wrapped = lipschitz_norm(conv, alpha=2.0, impl=impl)
    ref = LipGATConv(16, 8, heads=2, alpha=2.0).double()
    ref.load_state_dict(conv.state_dict())
    assert isinstance(wrapped, GATConv) and isinstance(wrapped, LipGATConv)
    assert wrapped.state_dict().keys() == conv.state_dict().keys()
    assert torch.allclose(wrapped(x, ei), ref(x, ei), atol=1e-6, rtol=0)
    assert not torch.allclose(wrapped(x, ei), conv(x, ei), atol=1e-3)  # the scores are normalised
    assert conv.training == wrapped.training


@pytest.mark.parametrize("impl", ["pyg", "auto"])
def test_transformerconv_equals_liptransformerconv(impl: str) -> None:
    torch.manual_seed(1)
    x, ei = _graph()
    conv = TransformerConv(16, 8, heads=2).double().eval()
    wrapped = lipschitz_norm(conv, impl=impl)
    ref = LipTransformerConv(16, 8, heads=2).double().eval()
    ref.load_state_dict(conv.state_dict())
    assert isinstance(wrapped, TransformerConv) and not wrapped.training
    assert torch.allclose(wrapped(x, ei), ref(x, ei), atol=1e-6, rtol=0)


def test_gatv2_wrapped_keeps_parameters_and_bounds_scores() -> None:
    torch.manual_seed(2)
    x, ei = _graph()
    conv = GATv2Conv(16, 8, heads=3).double()
    wrapped = lipschitz_norm(conv, alpha=1.5)
    assert isinstance(wrapped, LipGATv2Conv) and isinstance(wrapped, GATv2Conv)
    for (k1, v1), (k2, v2) in zip(conv.state_dict().items(), wrapped.state_dict().items(), strict=True):
        assert k1 == k2 and torch.equal(v1, v2)
    _, scores = wrapped._capture_scores(lambda: wrapped(100.0 * x, ei, return_attention_weights=True))
    assert scores.abs().max() <= 1.5 + 1e-9  # |g_ij| <= alpha (Theorem, first claim)
    wrapped.lipschitz_norm = False  # the same layer without the division is PyG's GATv2Conv
    assert torch.allclose(wrapped(x, ei), conv(x, ei), atol=1e-12)


def test_unsupported_layer_is_refused_in_one_line() -> None:
    from torch_geometric.nn import GCNConv

    with pytest.raises(ConfigError) as err:
        lipschitz_norm(GCNConv(4, 4))
    message = str(err.value)
    assert "\n" not in message and "GATConv" in message and "GATv2Conv" in message and "TransformerConv" in message
    with pytest.raises(ConfigError):
        lipschitz_norm(GATv2Conv(4, 4), impl="fused")
    with pytest.raises(ConfigError):
        lipschitz_norm(GATConv(4, 4), alpha=0.0)


def _edge_attention_jacobian_norm(conv: GATv2Conv, x_i: torch.Tensor, x_j: torch.Tensor) -> float:
    """Spectral norm of X -> sum_j softmax_j(g(X)) W_l x_j for one target whose columns X_ij = [x_i^(e) | x_j^(e)]
    are independent inputs ([n, 1, C] each, projections already applied), through the layer's own
    edge_update: the map of the Theorem in docs/reference.md."""
    n = x_i.size(0)
    index = torch.zeros(n, dtype=torch.long)

    def att(z: torch.Tensor) -> torch.Tensor:
        zi, zj = z[:, 0], z[:, 1]  # [n, 1, C] each
        alpha = conv.edge_update(zj, zi, None, index, None, 1)  # [n, 1]
        return (alpha.unsqueeze(-1) * zj).sum(dim=0).reshape(-1)

    jac = torch.func.jacrev(att)(torch.stack([x_i, x_j], dim=1))  # [C, n, 2, 1, C]
    return float(torch.linalg.matrix_norm(jac.detach().reshape(jac.size(0), -1), ord=2))


def _tie_inputs(c: int, n: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Target part 0 and sources that are permutations of one vector: with a constant attention vector every
    source has the same score, the softmax is flat and its derivative largest (where unbounded scores hurt)."""
    base = torch.linspace(0.5, 2.0, c, dtype=torch.float64)
    x_j = torch.stack([torch.roll(base, k) for k in range(n)]).unsqueeze(1) * scale
    return torch.zeros_like(x_j), x_j


def _gatv2(c: int, lip: bool, alpha: float = 1.0) -> GATv2Conv:
    conv = (LipGATv2Conv(c, c, alpha=alpha) if lip else GATv2Conv(c, c)).double().eval()
    with torch.no_grad():
        conv.att.fill_(0.7)
    return conv


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_gatv2_attention_jacobian_below_bound(alpha: float) -> None:
    c = 6
    gen = torch.Generator().manual_seed(3)
    conv = _gatv2(c, lip=True, alpha=alpha)
    worst = 0.0
    for n in (2, 4, 7):
        bound = math.exp(alpha) * math.sqrt(1 / n) + alpha * math.sqrt(8)
        for scale in (1.0, 10.0, 100.0, 1000.0):
            inputs = [_tie_inputs(c, n, scale)]
            inputs += [(torch.randn(n, 1, c, generator=gen, dtype=torch.float64) * scale,
                        torch.randn(n, 1, c, generator=gen, dtype=torch.float64) * scale) for _ in range(5)]
            for x_i, x_j in inputs:
                norm = _edge_attention_jacobian_norm(conv, x_i, x_j)
                assert norm <= bound + 1e-9, (n, scale, norm, bound)
                worst = max(worst, norm / bound)
    assert worst > 0.05  # not vacuous: the map comes within a factor 20 of the bound (the plain map exceeds it)


def test_plain_gatv2_attention_exceeds_the_bound() -> None:
    c, n = 6, 2
    conv = _gatv2(c, lip=False)
    bound = math.e * math.sqrt(1 / n) + math.sqrt(8)
    norms = [_edge_attention_jacobian_norm(conv, *_tie_inputs(c, n, s)) for s in (1.0, 10.0, 100.0)]
    assert norms[-1] > 10 * bound and norms[-1] > 50 * norms[0]


def _tie_graph(c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Node 0 (features 0) receives from nodes 1..3, whose features are permutations of one vector."""
    _, x_j = _tie_inputs(c, 3, 1.0)
    x = torch.cat([torch.zeros(1, c, dtype=torch.float64), x_j.squeeze(1)])
    edge_index = torch.tensor([[1, 2, 3, 2, 3, 1], [0, 0, 0, 1, 2, 3]])
    return x, edge_index


def _layer_lipschitz(conv: GATv2Conv, x: torch.Tensor, edge_index: torch.Tensor, scale: float) -> float:
    _, best = lower_bound_at(lambda z: conv(z, edge_index), scale * x, steps=3, power_iters=30,
                             generator=torch.Generator().manual_seed(0))
    return best


def _pair(c: int, identity: bool) -> tuple[LipGATv2Conv, GATv2Conv]:
    """A LipschitzNorm GATv2 layer and the plain one with the same parameters (no biases, so the attention of the
    normalised layer is exactly invariant to scaling the input), attention vector constant."""
    torch.manual_seed(5)
    plain = GATv2Conv(c, c, bias=False).double().eval()
    with torch.no_grad():
        plain.att.fill_(0.7)
        if identity:  # W_l = W_r = I: the permuted sources of _tie_graph keep equal scores
            plain.lin_l.weight.copy_(torch.eye(c))
            plain.lin_r.weight.copy_(torch.eye(c))
    lip = lipschitz_norm(plain)
    return lip, plain


def test_gatv2_lipschitz_estimate_flat_under_input_scaling() -> None:
    c = 6
    scales = (1.0, 10.0, 100.0, 1000.0)
    gen = torch.Generator().manual_seed(4)
    x_rand = torch.randn(12, c, generator=gen, dtype=torch.float64)
    e_rand = torch.randint(0, 12, (2, 40), generator=gen)
    lip, _ = _pair(c, identity=False)
    lip_est = [_layer_lipschitz(lip, x_rand, e_rand, s) for s in scales]
    assert max(lip_est) / min(lip_est) < 1.05, lip_est

    x, edge_index = _tie_graph(c)
    lip, plain = _pair(c, identity=True)
    lip_est = [_layer_lipschitz(lip, x, edge_index, s) for s in scales]
    plain_est = [_layer_lipschitz(plain, x, edge_index, s) for s in scales]
    assert max(lip_est) / min(lip_est) < 1.05, lip_est
    # the plain layer's estimate grows with the input's scale (about linearly), LipschitzNorm's does not
    assert plain_est[1] > 3 * plain_est[0] and plain_est[-1] > 100 * plain_est[0], plain_est
    assert plain_est[-1] > 100 * lip_est[-1], (plain_est, lip_est)


def test_fused_gat_fallback_works_after_a_stock_gatconv_exists() -> None:
    """lipschitz_norm builds the fused layer right after a stock GATConv: the fused class must not inherit the
    edge_updater PyG generated for GATConv (its reference fallback, e.g. return_attention_weights, then broke)."""
    torch.manual_seed(6)
    x, ei = _graph()
    conv = GATConv(16, 8).double()
    conv(x, ei)  # PyG generates GATConv's templates on first use
    wrapped = lipschitz_norm(conv, impl="fused")
    out, (edges, weights) = wrapped(x, ei, return_attention_weights=True)  # before any LipGATConv is built
    ref = LipGATConv(16, 8).double()
    ref.load_state_dict(conv.state_dict())
    assert torch.allclose(out, ref(x, ei), atol=1e-12) and weights.size(0) == edges.size(1)
