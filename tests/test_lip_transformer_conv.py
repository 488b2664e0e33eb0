"""LipTransformerConv: equality with TransformerConv when off, hand-computed scores (eq. 19 and the
reference formula), bounded scores, scale invariance, Corollary 2's Lipschitz bound, finite gradients."""

import math
import warnings
from collections.abc import Callable
from typing import Optional

import pytest
import torch
from devices import seeded
from torch import Tensor
from torch_geometric.nn import TransformerConv
from torch_geometric.typing import OptTensor
from torch_geometric.utils import coalesce, remove_self_loops, to_torch_csr_tensor

from lipgnn.errors import ConfigError
from lipgnn.nn import LipTransformerConv


def _random_graph(num_nodes: int, num_edges: int, seed: int) -> Tensor:
    g = seeded(seed)
    return torch.randint(0, num_nodes, (2, num_edges), generator=g)


def _complete_graph_with_loops(n: int) -> Tensor:
    dst, src = torch.ones(n, n, dtype=torch.bool).nonzero().t()
    return torch.stack([src, dst])


def _is_compiled(conv: torch.nn.Module) -> bool:
    """PyG generated the fast propagate for this class (it silently falls back to the generic path
    when the hook type hints are inconsistent with the parent's)."""
    return conv.propagate.__module__.startswith(f"{type(conv).__module__}_{type(conv).__name__}")


# --- drop-in compatibility ----------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_equals_transformerconv_when_norm_off(heads: int, concat: bool, edge_dim: int | None) -> None:
    torch.manual_seed(heads * 10 + concat)
    x = torch.randn(12, 5)
    edge_index = _random_graph(12, 40, seed=heads)
    edge_attr = torch.randn(40, 3) if edge_dim else None
    ref = TransformerConv(5, 4, heads=heads, concat=concat, edge_dim=edge_dim)
    lip = LipTransformerConv(5, 4, heads=heads, concat=concat, edge_dim=edge_dim, lipschitz_norm=False)
    assert list(lip.state_dict()) == list(ref.state_dict())
    lip.load_state_dict(ref.state_dict())
    out_ref, (_, att_ref) = ref(x, edge_index, edge_attr, return_attention_weights=True)
    out_lip, (_, att_lip) = lip(x, edge_index, edge_attr, return_attention_weights=True)
    assert torch.allclose(out_lip, out_ref, atol=1e-6)
    assert torch.allclose(att_lip, att_ref, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(beta=True), dict(root_weight=False, bias=False)])
def test_equals_transformerconv_options_and_bipartite(kwargs: dict) -> None:
    torch.manual_seed(0)
    ref = TransformerConv((5, 6), 4, heads=2, **kwargs)
    lip = LipTransformerConv((5, 6), 4, heads=2, lipschitz_norm=False, **kwargs)
    lip.load_state_dict(ref.state_dict())
    x = (torch.randn(9, 5), torch.randn(7, 6))
    edge_index = torch.stack([torch.randint(0, 9, (30,)), torch.randint(0, 7, (30,))])
    assert torch.allclose(lip(x, edge_index), ref(x, edge_index), atol=1e-6)


@pytest.mark.filterwarnings("ignore:Sparse")
def test_sparse_adjacency_matches_edge_index() -> None:
    torch.manual_seed(1)
    edge_index, _ = remove_self_loops(coalesce(_random_graph(10, 30, seed=2)))
    adj_t = to_torch_csr_tensor(edge_index.flip(0), size=(10, 10))
    x = torch.randn(10, 5)
    for variant in ("paper", "reference"):
        conv = LipTransformerConv(5, 4, heads=2, variant=variant)
        assert torch.allclose(conv(x, adj_t), conv(x, edge_index), atol=1e-6)


def test_fast_pyg_path_and_no_inconsistent_type_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv = LipTransformerConv(5, 4, heads=2, edge_dim=2)
        conv(torch.randn(6, 5), _random_graph(6, 10, seed=0), torch.randn(10, 2))
    assert not [w for w in caught if "inconsistent" in str(w.message).lower()]
    assert _is_compiled(conv)
    conv.inspector.get_flat_param_dict(["message", "aggregate", "update"])  # raises on inconsistent hints


def test_compiled_check_detects_a_hint_mismatch() -> None:
    # The check above can fail: a subclass whose message hint for `ptr` differs from aggregate's
    # (Optional[Tensor]) makes PyG drop to the generic propagate without any error.
    class _MismatchedHintsConv(LipTransformerConv):
        def message(self, query_i: Tensor, key_j: Tensor, value_j: Tensor,
                    edge_attr: OptTensor, index: Tensor, ptr: Tensor,
                    size_i: Optional[int]) -> Tensor:  # noqa: UP045 (PyG cannot parse `int | None`)
            return super().message(query_i, key_j, value_j, edge_attr, index, ptr, size_i)

    with pytest.raises(ValueError, match="inconsistent types"):
        _MismatchedHintsConv(4, 4).inspector.get_flat_param_dict(["message", "aggregate", "update"])
    assert not _is_compiled(_MismatchedHintsConv(4, 4))


def test_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="variant"):
        LipTransformerConv(4, 4, variant="exact")
    with pytest.raises(ConfigError, match="alpha"):
        LipTransformerConv(4, 4, alpha=-1.0)


# --- hand-computed scores -----------------------------------------------------------------------------


def _hand_layer(**kwargs) -> LipTransformerConv:
    conv = LipTransformerConv(2, 2, heads=1, bias=False, root_weight=False, **kwargs)
    with torch.no_grad():
        conv.lin_query.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))  # q = x
        conv.lin_key.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # k = (x_2, x_1)
        conv.lin_value.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 2.0]]))  # v = 2 x
    return conv


# x_0=(1,0), x_1=(0,2), x_2=(1,1), x_3=(0,-1)
# q: (1,0), (0,2), (1,1), (0,-1)   ||q|| = 1, 2, sqrt2, 1
# k: (0,1), (2,0), (1,1), (-1,0)   ||k|| = 1, 2, sqrt2, 1
# v: (2,0), (0,4), (2,2), (0,-2)   ||v|| = 2, 4, 2 sqrt2, 2
# Edges j->i: 1->0, 2->0, 0->0, 0->1, 3->2, 2->2 (node 3 receives nothing).
HAND_X = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, -1.0]])
HAND_EDGES = torch.tensor([[1, 2, 0, 0, 3, 2], [0, 0, 0, 1, 2, 2]])
HAND_DOT = [2.0, 1.0, 0.0, 2.0, -1.0, 2.0]  # q_0.k_1, q_0.k_2, q_0.k_0, q_1.k_0, q_2.k_3, q_2.k_2


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_paper_scores_by_hand(alpha: float) -> None:
    s2 = math.sqrt(2.0)
    # node 0: u=1, v=max(2, sqrt2, 1)=2, w=max(4, 2sqrt2, 2)=4   -> max(uv, uw, vw) = max(2, 4, 8) = 8
    # node 1: u=2, v=1, w=2                                       -> max(2, 4, 2) = 4
    # node 2: u=sqrt2, v=max(1, sqrt2)=sqrt2, w=max(2, 2sqrt2)    -> max(2, 4, 4) = 4
    c = [max(1 * 2, 1 * 4, 2 * 4), max(2 * 1, 2 * 2, 1 * 2), max(s2 * s2, s2 * 2 * s2, s2 * 2 * s2)]
    targets = [0, 0, 0, 1, 2, 2]
    expected = [alpha * d / c[i] for d, i in zip(HAND_DOT, targets, strict=True)]
    edge_index, scores = _hand_layer(alpha=alpha).attention_scores(HAND_X, HAND_EDGES)
    assert torch.equal(edge_index, HAND_EDGES)
    assert scores[:, 0].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_reference_scores_by_hand() -> None:
    s2 = math.sqrt(2.0)
    u = math.sqrt(1 + 1 + 1 + 4 + 2 + 2)  # ||Q||_F over the six per-edge queries q_0,q_0,q_0,q_1,q_2,q_2
    c = [max(u * 2, u * 4, 2 * 4), max(u * 1, u * 2, 1 * 2), max(u * s2, u * 2 * s2, s2 * 2 * s2)]
    targets = [0, 0, 0, 1, 2, 2]
    expected = [(d / math.sqrt(2.0)) / c[i] for d, i in zip(HAND_DOT, targets, strict=True)]
    _, scores = _hand_layer(variant="reference").attention_scores(HAND_X, HAND_EDGES)
    assert scores[:, 0].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_plain_scores_by_hand() -> None:
    _, scores = _hand_layer(lipschitz_norm=False).attention_scores(HAND_X, HAND_EDGES)
    assert scores[:, 0].tolist() == pytest.approx([d / math.sqrt(2.0) for d in HAND_DOT], rel=1e-6)


def test_edge_embedding_enters_keys_and_values_norms() -> None:
    # One edge 0 -> 0, edge embedding (0, 3): q = (1,1), k = (1,1) + (0,3) = (1,4), v = (2,2) + (0,3) = (2,5)
    conv = _hand_layer(edge_dim=1)
    with torch.no_grad():
        conv.lin_edge.weight.copy_(torch.tensor([[0.0], [3.0]]))
    x = torch.tensor([[1.0, 1.0]])
    _, scores = conv.attention_scores(x, torch.tensor([[0], [0]]), torch.tensor([[1.0]]))
    u, v, w = math.sqrt(2.0), math.sqrt(17.0), math.sqrt(29.0)
    assert scores.item() == pytest.approx((1 + 4) / max(u * v, u * w, v * w), rel=1e-6)


# --- bounded scores and scale invariance -------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_scores_bounded_by_alpha(alpha: float) -> None:
    torch.manual_seed(int(alpha * 10))
    edge_index = _random_graph(20, 60, seed=5)
    conv = LipTransformerConv(6, 5, heads=3, edge_dim=2, alpha=alpha)
    for scale in (1e-3, 1e-1, 1.0, 1e2, 1e4):
        _, scores = conv.attention_scores(scale * torch.randn(20, 6), edge_index, scale * torch.randn(60, 2))
        assert scores.abs().max().item() <= alpha * (1 + 1e-5)
        assert scores.abs().max().item() > 0.05 * alpha


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("edge_dim", [None, 2])
def test_attention_invariant_to_qkv_scale(variant: str, edge_dim: int | None) -> None:
    # bias=False: scaling x (and edge_attr) by c scales every query, key and value by c.
    torch.manual_seed(4)
    conv = LipTransformerConv(5, 4, heads=2, bias=False, edge_dim=edge_dim, variant=variant).double().eval()
    x = torch.randn(15, 5, dtype=torch.float64)
    edge_index = _random_graph(15, 45, seed=7)
    edge_attr = torch.randn(45, 2, dtype=torch.float64) if edge_dim else None
    _, (_, base) = conv(x, edge_index, edge_attr, return_attention_weights=True)
    for c in (1e-3, 0.5, 7.0, 1e4):
        scaled_attr = c * edge_attr if edge_dim else None
        _, (_, scaled) = conv(c * x, edge_index, scaled_attr, return_attention_weights=True)
        assert torch.allclose(scaled, base, rtol=1e-9, atol=1e-12)


# --- Corollary 2: Lipschitz constant of the attention map --------------------------------------------


def _jacobian_spectral_norm(f: Callable[[Tensor], Tensor], z: Tensor) -> float:
    """Largest singular value of the full Jacobian of f at z (exact: one backward pass per output)."""
    jac = torch.autograd.functional.jacobian(f, z)
    return torch.linalg.matrix_norm(jac.reshape(f(z).numel(), z.numel()), ord=2).item()


def _attention_map(lipschitz_norm: bool, channels: int = 2) -> LipTransformerConv:
    """Input rows X_i = [q_i || k_i || v_i]; the layer computes V softmax(g(Q, K))^T (eq. 7 / eq. 4
    with X = (Q||K||V)) and nothing else (no bias, no root weight)."""
    conv = LipTransformerConv(3 * channels, channels, heads=1, bias=False, root_weight=False,
                              lipschitz_norm=lipschitz_norm).double()
    with torch.no_grad():
        for block, lin in enumerate((conv.lin_query, conv.lin_key, conv.lin_value)):
            weight = torch.zeros(channels, 3 * channels, dtype=torch.float64)
            weight[:, block * channels:(block + 1) * channels] = torch.eye(channels)
            lin.weight.copy_(weight)
    return conv


# All queries point along (1, 0); keys 0 and 1 tie for the largest q_i . k_j in every row and differ
# orthogonally, and their values differ: plain GT's derivative grows like the square of the scale.
_Q = torch.tensor([[1.0, 0.0]]).repeat(6, 1) * torch.linspace(0.5, 1.5, 6).unsqueeze(1)
_K = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 0.5], [-0.5, 2.0], [-2.0, -1.0], [0.0, 0.3]])
_V = torch.tensor([[1.0, -2.0], [-1.0, 1.0], [0.5, 0.5], [2.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
TIE_X = torch.cat([_Q, _K, _V], dim=1).double()


def test_lipschitz_constant_below_corollary_2_bound() -> None:
    n = TIE_X.size(0)
    bound = math.exp(math.sqrt(3.0)) * math.sqrt(n / n) + 2 * math.sqrt(6.0)  # m = n
    edge_index = _complete_graph_with_loops(n)
    lip, plain = _attention_map(True), _attention_map(False)
    g = seeded(0)
    lip_est, plain_est = [], []
    for scale in (1.0, 10.0, 100.0, 1000.0):
        for z in (scale * TIE_X, scale * torch.randn(n, 6, generator=g, dtype=torch.float64)):
            assert _jacobian_spectral_norm(lambda zz: lip(zz, edge_index), z) <= bound
        lip_est.append(_jacobian_spectral_norm(lambda zz: lip(zz, edge_index), scale * TIE_X))
        plain_est.append(_jacobian_spectral_norm(lambda zz: plain(zz, edge_index), scale * TIE_X))
    assert all(b > a * 5 for a, b in zip(plain_est, plain_est[1:], strict=False))
    assert plain_est[-1] > 10 * bound
    assert max(lip_est) - min(lip_est) < 1e-6  # Att(cX) = c Att(X): the Jacobian does not change


# --- numerical safety ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("edge_dim", [None, 2])
def test_zero_input_gives_finite_gradients(variant: str, edge_dim: int | None) -> None:
    torch.manual_seed(0)
    conv = LipTransformerConv(4, 3, heads=2, dropout=0.5, bias=False, edge_dim=edge_dim,
                              variant=variant).train()
    x = torch.zeros(8, 4, requires_grad=True)
    edge_index = torch.cat([_random_graph(8, 20, seed=1), torch.arange(8).repeat(2, 1)], dim=1)
    edge_attr = torch.zeros(28, 2) if edge_dim else None
    out = conv(x, edge_index, edge_attr)
    assert torch.isfinite(out).all()
    (out.pow(2).sum() + out.sum()).backward()
    assert torch.isfinite(x.grad).all()
    for name, p in conv.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_isolated_zero_neighbourhoods_in_a_deep_stack_stay_finite(variant: str) -> None:
    torch.manual_seed(2)
    edge_index = torch.cat([
        torch.tensor([[0, 1, 2, 3, 1, 0, 1, 2, 3], [1, 2, 3, 0, 3, 0, 1, 2, 3]]),
        4 + _random_graph(6, 15, seed=2),
    ], dim=1)
    x = torch.cat([torch.zeros(4, 6), torch.randn(6, 6)]).requires_grad_(True)
    layers = torch.nn.ModuleList(
        LipTransformerConv(6, 3, heads=2, dropout=0.6, bias=False, root_weight=False, variant=variant)
        for _ in range(5)
    ).train()
    h = x
    for layer in layers:
        h = torch.nn.functional.elu(layer(torch.nn.functional.dropout(h, 0.3), edge_index))
    assert torch.isfinite(h).all()
    h.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in layers.parameters())
