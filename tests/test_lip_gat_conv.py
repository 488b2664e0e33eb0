"""LipGATConv: equality with GATConv when off, hand-computed scores, Theorem 3's bound on the scores,
scale invariance, Corollary 1's Lipschitz bound, and finite gradients on zero inputs."""

import math
import warnings
from collections.abc import Callable

import pytest
import torch
from devices import seeded
from torch import Tensor
from torch_geometric.nn import GATConv
from torch_geometric.utils import coalesce, remove_self_loops, softmax, to_torch_csr_tensor

from lipgnn.errors import ConfigError
from lipgnn.nn import LipGATConv


def _random_graph(num_nodes: int, num_edges: int, seed: int) -> Tensor:
    g = seeded(seed)
    return torch.randint(0, num_nodes, (2, num_edges), generator=g)


def _complete_graph(n: int) -> Tensor:
    """All edges j -> i with i != j (the layer adds the self-loops): every node attends to all n."""
    mask = ~torch.eye(n, dtype=torch.bool)
    dst, src = mask.nonzero().t()
    return torch.stack([src, dst])


def _is_compiled(conv: torch.nn.Module) -> bool:
    """PyG generated the fast propagate/edge_updater for this class (it silently falls back to the
    generic path when the hook type hints are inconsistent with the parent's)."""
    prefix = f"{type(conv).__module__}_{type(conv).__name__}"
    return conv.propagate.__module__.startswith(prefix) and conv.edge_updater.__module__.startswith(prefix)


# --- drop-in compatibility ----------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_equals_gatconv_when_norm_off(heads: int, concat: bool, edge_dim: int | None) -> None:
    torch.manual_seed(heads * 10 + concat)
    x = torch.randn(12, 5)
    edge_index = _random_graph(12, 40, seed=heads)
    edge_attr = torch.randn(40, 3) if edge_dim else None
    ref = GATConv(5, 4, heads=heads, concat=concat, edge_dim=edge_dim, dropout=0.0)
    lip = LipGATConv(5, 4, heads=heads, concat=concat, edge_dim=edge_dim, lipschitz_norm=False)
    assert list(lip.state_dict()) == list(ref.state_dict())
    lip.load_state_dict(ref.state_dict())
    out_ref, (ei_ref, att_ref) = ref(x, edge_index, edge_attr, return_attention_weights=True)
    out_lip, (ei_lip, att_lip) = lip(x, edge_index, edge_attr, return_attention_weights=True)
    assert torch.allclose(out_lip, out_ref, atol=1e-6)
    assert torch.equal(ei_lip, ei_ref)
    assert torch.allclose(att_lip, att_ref, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(residual=True), dict(add_self_loops=False, bias=False)])
def test_equals_gatconv_options_and_bipartite(kwargs: dict) -> None:
    torch.manual_seed(0)
    ref = GATConv((5, 6), 4, heads=2, **kwargs)
    lip = LipGATConv((5, 6), 4, heads=2, lipschitz_norm=False, **kwargs)
    lip.load_state_dict(ref.state_dict())
    x = (torch.randn(9, 5), torch.randn(7, 6))
    edge_index = torch.stack([torch.randint(0, 9, (30,)), torch.randint(0, 7, (30,))])
    assert torch.allclose(lip(x, edge_index, size=(9, 7)), ref(x, edge_index, size=(9, 7)), atol=1e-6)


@pytest.mark.filterwarnings("ignore:Sparse")
def test_sparse_adjacency_matches_edge_index() -> None:
    torch.manual_seed(1)
    edge_index, _ = remove_self_loops(coalesce(_random_graph(10, 30, seed=2)))
    adj_t = to_torch_csr_tensor(edge_index.flip(0), size=(10, 10))
    x = torch.randn(10, 5)
    for variant in ("paper", "reference"):
        conv = LipGATConv(5, 4, heads=2, add_self_loops=False, variant=variant)
        assert torch.allclose(conv(x, adj_t), conv(x, edge_index), atol=1e-6)


def test_fast_pyg_path_and_no_inconsistent_type_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv = LipGATConv(5, 4, heads=2, edge_dim=2)
        conv(torch.randn(6, 5), _random_graph(6, 10, seed=0), torch.randn(10, 2))
    assert not [w for w in caught if "inconsistent" in str(w.message).lower()]
    assert _is_compiled(conv)
    conv.inspector.get_flat_param_dict(["message", "aggregate", "update"])  # raises on inconsistent hints


def test_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="variant"):
        LipGATConv(4, 4, variant="exact")
    with pytest.raises(ConfigError, match="alpha"):
        LipGATConv(4, 4, alpha=0.0)


# --- hand-computed scores -----------------------------------------------------------------------------


def _hand_layer(**kwargs) -> LipGATConv:
    conv = LipGATConv(2, 2, heads=1, negative_slope=0.2, **kwargs)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))  # W x = (2 x_1, x_2)
        conv.att_src.copy_(torch.tensor([[[0.5, -1.0]]]))
        conv.att_dst.copy_(torch.tensor([[[1.0, 0.5]]]))
    return conv


# x_0=(1,0), x_1=(0,2), x_2=(1,1), x_3=(0,-1)  ->  Wx: h_0=(2,0), h_1=(0,2), h_2=(2,1), h_3=(0,-1)
# ||h||^2 = 4, 4, 5, 1;  a_src.h = 1, -2, 0, 1;  a_dst.h = 2, 1, 2.5, -0.5;  ||a||^2 = 0.25+1+1+0.25 = 2.5
# Edges j->i: 1->0, 2->0, 0->1, 3->2, then the self-loops 0..3 that GATConv appends.
HAND_X = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, -1.0]])
HAND_EDGES = torch.tensor([[1, 2, 0, 3], [0, 0, 1, 2]])
HAND_RAW = [2 - 2, 2 + 0, 1 + 1, 2.5 + 1, 2 + 1, 1 - 2, 2.5 + 0, -0.5 + 1]  # a_dst.h_i + a_src.h_j


def _leaky(v: float) -> float:
    return v if v >= 0 else 0.2 * v


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_paper_scores_by_hand(alpha: float) -> None:
    # c_i = ||a|| sqrt(||h_i||^2 + max_{j in N(i)} ||h_j||^2); N(0)={1,2,0}, N(1)={0,1}, N(2)={3,2}, N(3)={3}
    na = math.sqrt(2.5)
    c = [na * math.sqrt(4 + 5), na * math.sqrt(4 + 4), na * math.sqrt(5 + 5), na * math.sqrt(1 + 1)]
    targets = [0, 0, 1, 2, 0, 1, 2, 3]
    expected = [_leaky(alpha * e / c[i]) for e, i in zip(HAND_RAW, targets, strict=True)]
    edge_index, scores = _hand_layer(alpha=alpha).attention_scores(HAND_X, HAND_EDGES)
    assert edge_index.tolist() == [[1, 2, 0, 3, 0, 1, 2, 3], targets]
    assert scores[:, 0].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_reference_scores_by_hand() -> None:
    # c_ij = 4 ||a|| sqrt(max_{k in N(i)} ||h_k||^2 + ||h_j||^2), the source norm of each edge.
    na = math.sqrt(2.5)
    per_edge = [5 + 4, 5 + 5, 4 + 4, 5 + 1, 5 + 4, 4 + 4, 5 + 5, 1 + 1]  # 1->0, 2->0, 0->1, 3->2, loops
    expected = [_leaky(e / (4 * na * math.sqrt(s))) for e, s in zip(HAND_RAW, per_edge, strict=True)]
    _, scores = _hand_layer(variant="reference").attention_scores(HAND_X, HAND_EDGES)
    assert scores[:, 0].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_plain_scores_by_hand_and_softmax_consistency() -> None:
    conv = _hand_layer(lipschitz_norm=False).eval()
    _, scores = conv.attention_scores(HAND_X, HAND_EDGES)
    assert scores[:, 0].tolist() == pytest.approx([_leaky(e) for e in HAND_RAW], rel=1e-6)
    lip = _hand_layer().eval()
    edge_index, scores = lip.attention_scores(HAND_X, HAND_EDGES)
    _, (_, weights) = lip(HAND_X, HAND_EDGES, return_attention_weights=True)
    assert torch.allclose(softmax(scores, edge_index[1], num_nodes=4), weights, atol=1e-7)


def test_reference_uses_one_query_norm_over_heads_and_per_head_maxima() -> None:
    # Two heads with very different feature scales. Per head h the reference score must be
    # e_ij^h / (4 ||a||_all sqrt(max_k ||h_k^h||^2 + ||h_j^h||^2)) with the max taken within head h.
    torch.manual_seed(3)
    conv = LipGATConv(3, 2, heads=2, variant="reference")
    with torch.no_grad():
        conv.lin.weight[2:] *= 50.0  # head 1 projects to much larger vectors than head 0
    x = torch.randn(5, 3)
    edge_index, scores = conv.attention_scores(x, _random_graph(5, 8, seed=3))
    h = conv.lin(x).view(-1, 2, 2).detach()
    src, dst = edge_index
    a_all = torch.cat([conv.att_src, conv.att_dst], -1).norm()
    raw = (h[src] * conv.att_src).sum(-1) + (h[dst] * conv.att_dst).sum(-1)
    sq = h.pow(2).sum(-1)
    max_k = torch.stack([sq[src[dst == i]].max(0).values for i in range(5)])
    expected = torch.nn.functional.leaky_relu(raw / (4 * a_all * (max_k[dst] + sq[src]).sqrt()), 0.2)
    assert torch.allclose(scores, expected.detach(), rtol=1e-5, atol=1e-7)


# --- Theorem 3 condition (1) and scale invariance ----------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("edge_dim", [None, 2])
def test_scores_bounded_by_alpha(alpha: float, edge_dim: int | None) -> None:
    torch.manual_seed(int(alpha * 10))
    edge_index = _random_graph(20, 60, seed=5)
    for variant, bound in (("paper", alpha), ("reference", alpha / 4)):
        conv = LipGATConv(6, 5, heads=3, edge_dim=edge_dim, alpha=alpha, variant=variant)
        for scale in (1e-3, 1e-1, 1.0, 1e2, 1e4):
            x = scale * torch.randn(20, 6)
            edge_attr = scale * torch.randn(60, 2) if edge_dim else None
            _, scores = conv.attention_scores(x, edge_index, edge_attr)
            # LeakyReLU keeps [-b, b] inside [-b, b]; the largest |score| must also be a real fraction
            # of the bound (otherwise a too-large denominator would pass vacuously).
            assert scores.abs().max().item() <= bound * (1 + 1e-5)
            assert scores.abs().max().item() > 0.05 * bound
        plain = LipGATConv(6, 5, heads=3, edge_dim=edge_dim, lipschitz_norm=False)
        _, plain_scores = plain.attention_scores(1e4 * torch.randn(20, 6), edge_index,
                                                 1e4 * torch.randn(60, 2) if edge_dim else None)
        assert plain_scores.abs().max().item() > 10 * alpha  # the bound is not a property of GAT itself


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_attention_invariant_to_input_scale(variant: str) -> None:
    torch.manual_seed(4)
    conv = LipGATConv(5, 4, heads=2, variant=variant).double().eval()
    x = torch.randn(15, 5, dtype=torch.float64)
    edge_index = _random_graph(15, 45, seed=7)
    _, (_, base) = conv(x, edge_index, return_attention_weights=True)
    for c in (1e-3, 0.5, 7.0, 1e4):
        _, (_, scaled) = conv(c * x, edge_index, return_attention_weights=True)
        assert torch.allclose(scaled, base, rtol=1e-9, atol=1e-12)
    plain = LipGATConv(5, 4, heads=2, lipschitz_norm=False).double().eval()
    _, (_, p1) = plain(x, edge_index, return_attention_weights=True)
    _, (_, p2) = plain(7.0 * x, edge_index, return_attention_weights=True)
    assert not torch.allclose(p1, p2, atol=1e-3)  # plain GAT's attention does depend on the scale


# --- Corollary 1: Lipschitz constant of the attention map --------------------------------------------


def _jacobian_spectral_norm(f: Callable[[Tensor], Tensor], z: Tensor) -> float:
    """||D f_z||_F -> F operator norm, i.e. the largest singular value of the full Jacobian (exact
    for these small maps: n*C backward passes, no power-iteration error)."""
    jac = torch.autograd.functional.jacobian(f, z)
    return torch.linalg.matrix_norm(jac.reshape(f(z).numel(), z.numel()), ord=2).item()


def _attention_map(lipschitz_norm: bool, channels: int = 2) -> LipGATConv:
    """Single head, W = I, no bias: the layer is exactly Att(Z) = sum_j softmax_j(g(Z))_ij z_j (eq. 4)
    on its projected inputs Z."""
    conv = LipGATConv(channels, channels, heads=1, bias=False, lipschitz_norm=lipschitz_norm).double()
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(channels))
        conv.att_src.copy_(torch.tensor([[[1.0, 0.0]]]))
        conv.att_dst.copy_(torch.tensor([[[0.5, 0.3]]]))
    return conv


# Nodes 0 and 1 tie for the largest a_src . z (= 1) and differ orthogonally to a_src: every row's
# softmax sits on the tie, where plain GAT's derivative grows with the input scale.
TIE_Z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 0.5], [-0.5, 2.0], [-2.0, -1.0], [0.0, 0.3]],
                     dtype=torch.float64)


def test_lipschitz_constant_below_corollary_1_bound() -> None:
    n = TIE_Z.size(0)
    bound = math.e * math.sqrt(n / n) + math.sqrt(8)  # complete graph with self-loops: m = n
    edge_index = _complete_graph(n)
    lip, plain = _attention_map(True), _attention_map(False)
    g = seeded(0)
    lip_est, plain_est = [], []
    for scale in (1.0, 10.0, 100.0, 1000.0):
        for z in (scale * TIE_Z, scale * torch.randn(n, 2, generator=g, dtype=torch.float64)):
            assert _jacobian_spectral_norm(lambda zz: lip(zz, edge_index), z) <= bound
        lip_est.append(_jacobian_spectral_norm(lambda zz: lip(zz, edge_index), scale * TIE_Z))
        plain_est.append(_jacobian_spectral_norm(lambda zz: plain(zz, edge_index), scale * TIE_Z))
    assert all(b > a * 5 for a, b in zip(plain_est, plain_est[1:], strict=False))  # grows ~ linearly
    assert plain_est[-1] > 10 * bound
    assert max(lip_est) - min(lip_est) < 1e-6  # Att(cZ) = c Att(Z): the Jacobian does not change


# --- numerical safety ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("edge_dim", [None, 2])
def test_zero_input_gives_finite_gradients(variant: str, edge_dim: int | None) -> None:
    torch.manual_seed(0)
    conv = LipGATConv(4, 3, heads=2, dropout=0.5, edge_dim=edge_dim, variant=variant).train()
    x = torch.zeros(8, 4, requires_grad=True)
    edge_index = _random_graph(8, 20, seed=1)
    edge_attr = torch.zeros(20, 2) if edge_dim else None
    out = conv(x, edge_index, edge_attr)
    assert torch.isfinite(out).all()
    (out.pow(2).sum() + out.sum()).backward()
    assert torch.isfinite(x.grad).all()
    for name, p in conv.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_isolated_zero_neighbourhoods_in_a_deep_stack_stay_finite(variant: str) -> None:
    # Nodes 0-3 form a component whose features are all zero (what attention dropout + ELU can
    # produce: an exactly-zero row whose neighbours are zero too); nodes 4-9 are ordinary. Five
    # stacked layers with attention dropout in train mode, as in a deep GAT-Lip.
    torch.manual_seed(2)
    edge_index = torch.cat([
        torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]]),
        4 + _random_graph(6, 15, seed=2),
    ], dim=1)
    x = torch.cat([torch.zeros(4, 6), torch.randn(6, 6)]).requires_grad_(True)
    layers = torch.nn.ModuleList(
        LipGATConv(6, 3, heads=2, dropout=0.6, variant=variant) for _ in range(5)
    ).train()
    h = x
    for layer in layers:
        h = torch.nn.functional.elu(layer(torch.nn.functional.dropout(h, 0.3), edge_index))
    assert torch.isfinite(h).all()
    h.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layers.parameters())
