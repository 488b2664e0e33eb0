"""The LipschitzNorm maths (lipgnn.nn.lipschitz): hand-computed values, brute-force definitions,
per-head independence and finite gradients at zero."""

import math

import pytest
import torch
from devices import seeded

from lipgnn.nn import (
    gat_lipschitz_denominator,
    neighbour_max,
    safe_norm,
    safe_sqrt,
    transformer_lipschitz_denominator,
)

EPS = 1e-12


def _random_graph(num_nodes: int, num_edges: int, seed: int) -> torch.Tensor:
    g = seeded(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    loops = torch.arange(num_nodes).repeat(2, 1)  # every node has a neighbourhood
    return torch.cat([edge_index, loops], dim=1)


# --- elementary helpers ------------------------------------------------------------------------------


def test_safe_norm_matches_norm_and_has_zero_gradient_at_zero() -> None:
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    n = safe_norm(x)
    assert n[0].item() == pytest.approx(5.0, abs=1e-12)
    assert n[1].item() == pytest.approx(EPS, rel=1e-6)
    n.sum().backward()
    assert torch.allclose(x.grad[0], torch.tensor([0.6, 0.8], dtype=torch.float64))
    assert torch.equal(x.grad[1], torch.zeros(2, dtype=torch.float64))


def test_safe_sqrt_gradient_finite_at_zero_where_plain_sqrt_is_not() -> None:
    s = torch.zeros(3, requires_grad=True)
    safe_sqrt(s).sum().backward()
    assert torch.isfinite(s.grad).all()
    s2 = torch.zeros(3, requires_grad=True)
    torch.sqrt(s2).sum().backward()
    assert not torch.isfinite(s2.grad).all()  # the failure mode safe_sqrt exists to avoid


def test_neighbour_max_by_hand() -> None:
    src = torch.tensor([[1.0, 5.0], [3.0, 2.0], [2.0, 7.0], [0.5, 0.5]])
    index = torch.tensor([0, 0, 2, 2])
    out = neighbour_max(src, index, num_nodes=4)
    expected = torch.tensor([[3.0, 5.0], [0.0, 0.0], [2.0, 7.0], [0.0, 0.0]])  # nodes 1, 3: no edges
    assert torch.equal(out, expected)


# --- GAT (eq. 17) --------------------------------------------------------------------------------------


def test_gat_denominator_by_hand_with_edge_features() -> None:
    # One head, C = 2. Edges j -> i: 1->0, 2->0, 0->0, 0->1.
    x = torch.tensor([[[1.0, 2.0]], [[2.0, 0.0]], [[0.0, 3.0]]])  # ||Wx||^2 = 5, 4, 9
    edge_index = torch.tensor([[1, 2, 0, 0], [0, 0, 0, 1]])
    edge_proj = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[2.0, 2.0]], [[0.0, 1.0]]])  # sq 1, 0, 8, 1
    att_src = torch.tensor([[[1.0, 0.0]]])
    att_dst = torch.tensor([[[0.0, 2.0]]])
    att_edge = torch.tensor([[[2.0, 2.0]]])
    # ||a||^2 = 1 + 4 + 8 = 13.
    # paper: c_0 = sqrt(13) * sqrt(||Wx_0||^2 + max(4 + 1, 9 + 0, 5 + 8)) = sqrt(13) * sqrt(5 + 13)
    #        c_1 = sqrt(13) * sqrt(||Wx_1||^2 + (5 + 1))                  = sqrt(13) * sqrt(4 + 6)
    c0 = math.sqrt(13.0) * math.sqrt(18.0)
    c1 = math.sqrt(13.0) * math.sqrt(10.0)
    paper = gat_lipschitz_denominator(
        x, x, att_src, att_dst, edge_index, 3, edge_proj=edge_proj, att_edge=att_edge
    )
    assert paper.shape == (4, 1)
    assert paper[:, 0].tolist() == pytest.approx([c0, c0, c0, c1], rel=1e-6)
    # reference: 4 ||a|| sqrt(max_k ||Wx_k||^2 + ||Wx_j||^2 + ||W_e e_ij||^2)
    #   max over N(0) = {1, 2, 0}: max(4, 9, 5) = 9;  N(1) = {0}: 5
    ref = gat_lipschitz_denominator(
        x, x, att_src, att_dst, edge_index, 3, edge_proj=edge_proj, att_edge=att_edge, variant="reference"
    )
    expected = [
        4 * math.sqrt(13.0) * math.sqrt(9 + 4 + 1),  # 1 -> 0
        4 * math.sqrt(13.0) * math.sqrt(9 + 9 + 0),  # 2 -> 0
        4 * math.sqrt(13.0) * math.sqrt(9 + 5 + 8),  # 0 -> 0
        4 * math.sqrt(13.0) * math.sqrt(5 + 5 + 1),  # 0 -> 1
    ]
    assert ref[:, 0].tolist() == pytest.approx(expected, rel=1e-6)


def _gat_brute_force(x, att_src, att_dst, att_edge, edge_index, edge_proj, variant):
    """Dense, loop-based reading of eq. 17 (paper) and of the authors' formula (reference)."""
    num_edges, heads = edge_index.size(1), x.size(1)
    out = torch.empty(num_edges, heads, dtype=x.dtype)
    a_all = torch.cat([att_src, att_dst] + ([att_edge] if att_edge is not None else []), dim=-1)
    for e in range(num_edges):
        j, i = edge_index[0, e].item(), edge_index[1, e].item()
        into_i = (edge_index[1] == i).nonzero().flatten().tolist()
        for h in range(heads):
            if variant == "paper":
                a_h = torch.cat([att_dst[0, h], att_src[0, h]] + ([att_edge[0, h]] if att_edge is not None else []))
                best = max(
                    torch.cat([x[i, h], x[edge_index[0, f], h]] + ([edge_proj[f, h]] if edge_proj is not None else []))
                    .norm()
                    .item()
                    for f in into_i
                )
                out[e, h] = a_h.norm() * best
            else:
                max_k = max(x[edge_index[0, f], h].pow(2).sum().item() for f in into_i)
                per_edge = max_k + x[j, h].pow(2).sum().item()
                if edge_proj is not None:
                    per_edge += edge_proj[e, h].pow(2).sum().item()
                out[e, h] = 4 * a_all.norm() * math.sqrt(per_edge)
    return out


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("with_edges", [False, True])
def test_gat_denominator_matches_brute_force(variant: str, with_edges: bool) -> None:
    g = seeded(3)
    num_nodes, heads, channels = 7, 3, 4
    edge_index = _random_graph(num_nodes, 15, seed=4)
    x = torch.randn(num_nodes, heads, channels, generator=g, dtype=torch.float64)
    att_src, att_dst, att_edge = (torch.randn(1, heads, channels, generator=g, dtype=torch.float64) for _ in range(3))
    edge_proj = torch.randn(edge_index.size(1), heads, channels, generator=g, dtype=torch.float64)
    if not with_edges:
        edge_proj = att_edge = None
    got = gat_lipschitz_denominator(
        x, x, att_src, att_dst, edge_index, num_nodes, edge_proj=edge_proj, att_edge=att_edge, variant=variant
    )
    expected = _gat_brute_force(x, att_src, att_dst, att_edge, edge_index, edge_proj, variant)
    assert torch.allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_gat_paper_denominator_is_per_head() -> None:
    # Head h of a multi-head call equals a single-head call with head h's tensors: no mixing of heads
    # (the authors' code mixes them through a reshape; here that must not happen).
    g = seeded(5)
    edge_index = _random_graph(6, 12, seed=6)
    x = torch.randn(6, 4, 3, generator=g) * torch.tensor([1.0, 10.0, 0.1, 3.0]).view(1, 4, 1)
    att_src, att_dst = torch.randn(1, 4, 3, generator=g), torch.randn(1, 4, 3, generator=g)
    full = gat_lipschitz_denominator(x, x, att_src, att_dst, edge_index, 6)
    for h in range(4):
        sl = slice(h, h + 1)
        single = gat_lipschitz_denominator(x[:, sl], x[:, sl], att_src[:, sl], att_dst[:, sl], edge_index, 6)
        assert torch.allclose(full[:, sl], single, rtol=1e-6)


def test_gat_denominator_without_target_features() -> None:
    # Bipartite layer without target features: the input vector is [W x_j] alone, the query a_src.
    x_src = torch.tensor([[[3.0, 4.0]], [[1.0, 0.0]]])
    edge_index = torch.tensor([[0, 1], [0, 0]])
    att_src, att_dst = torch.tensor([[[0.0, 2.0]]]), torch.tensor([[[100.0, 100.0]]])
    got = gat_lipschitz_denominator(x_src, None, att_src, att_dst, edge_index, 1)
    assert got[:, 0].tolist() == pytest.approx([2.0 * 5.0, 2.0 * 5.0], rel=1e-6)  # ||a_src|| * max ||Wx_j||


def test_unknown_variant_raises() -> None:
    x = torch.ones(2, 1, 2)
    with pytest.raises(ValueError, match="variant"):
        gat_lipschitz_denominator(x, x, x[:1], x[:1], torch.tensor([[0], [1]]), 2, variant="nope")
    with pytest.raises(ValueError, match="variant"):
        transformer_lipschitz_denominator(x, x, x, torch.tensor([0, 1]), 2, variant="nope")


# --- GT (eq. 19) ---------------------------------------------------------------------------------------


def test_transformer_denominator_by_hand() -> None:
    # One head. Edges 0->0, 1->0, 0->1 (targets 0, 0, 1); per-edge q_i, k_j, v_j:
    q = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 3.0]]])  # ||q_0|| = 1, ||q_1|| = 3
    k = torch.tensor([[[2.0, 0.0]], [[0.0, 1.0]], [[2.0, 0.0]]])  # norms 2, 1, 2
    v = torch.tensor([[[0.0, 5.0]], [[3.0, 4.0]], [[0.0, 1.0]]])  # norms 5, 5, 1
    index = torch.tensor([0, 0, 1])
    # node 0: u=1, v=max(2, 1)=2, w=max(5, 5)=5 -> max(2, 5, 10) = 10
    # node 1: u=3, v=2, w=1                    -> max(6, 3, 2)  = 6
    paper = transformer_lipschitz_denominator(q, k, v, index, 2)
    assert paper[:, 0].tolist() == pytest.approx([10.0, 10.0, 6.0], rel=1e-6)
    # reference: u = ||Q||_F over the per-edge queries = sqrt(1 + 1 + 9) = sqrt(11)
    u = math.sqrt(11.0)
    ref = transformer_lipschitz_denominator(q, k, v, index, 2, variant="reference")
    assert ref[:, 0].tolist() == pytest.approx([max(2 * u, 5 * u, 10), max(2 * u, 5 * u, 10), max(2 * u, u, 2)])


def test_transformer_denominator_matches_brute_force_multihead() -> None:
    g = seeded(8)
    num_nodes, heads, channels = 6, 2, 3
    edge_index = _random_graph(num_nodes, 14, seed=9)
    index = edge_index[1]
    q_nodes = torch.randn(num_nodes, heads, channels, generator=g, dtype=torch.float64)
    k = torch.randn(edge_index.size(1), heads, channels, generator=g, dtype=torch.float64)
    v = torch.randn(edge_index.size(1), heads, channels, generator=g, dtype=torch.float64) * 3
    q = q_nodes[index]
    got = transformer_lipschitz_denominator(q, k, v, index, num_nodes)
    for e in range(edge_index.size(1)):
        into_i = (index == index[e]).nonzero().flatten()
        for h in range(heads):
            uu = q[e, h].norm()
            vv = k[into_i, h].norm(dim=-1).max()
            ww = v[into_i, h].norm(dim=-1).max()
            assert got[e, h].item() == pytest.approx(max(uu * vv, uu * ww, vv * ww).item(), rel=1e-10)


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_denominators_have_finite_gradients_at_zero(variant: str) -> None:
    edge_index = _random_graph(5, 8, seed=1)
    x = torch.zeros(5, 2, 3, requires_grad=True)
    att = torch.randn(1, 2, 3, requires_grad=True)
    raw = torch.zeros(edge_index.size(1), 2, requires_grad=True)
    d = gat_lipschitz_denominator(x, x, att, att, edge_index, 5, variant=variant)
    (raw / d).sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(att.grad).all() and torch.isfinite(raw.grad).all()

    qkv = torch.zeros(3, edge_index.size(1), 2, 3, requires_grad=True)
    d = transformer_lipschitz_denominator(qkv[0], qkv[1], qkv[2], edge_index[1], 5, variant=variant)
    ((qkv[0] * qkv[1]).sum(-1) / d).sum().backward()
    assert torch.isfinite(qkv.grad).all()
