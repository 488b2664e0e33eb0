"""L2 self-attention (Kim et al. eq. 10, Appendix F): hand-written dense formula, DP-MHA against PyTorch's,
the graph L2 score of LipTransformerConv against the dense layer on a complete graph, the contractive
variant and invertible self-attention."""

from __future__ import annotations

import math

import pytest
import torch

from lipgnn.errors import ConfigError
from lipgnn.lipschitz import inf_norm, l2_mha_bound
from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention, LipTransformerConv


def _hand_l2_mha(x: torch.Tensor, attn: L2MultiheadAttention) -> torch.Tensor:
    """F(X) = [P^1 X A^1 W^{V,1}, ..., P^H X A^H W^{V,H}] W^O with explicit loops over i, j (App. F)."""
    n, d_model = x.shape
    heads = []
    for h in range(attn.num_heads):
        wq, wk, wv = attn.q_weight[h], attn.key_weight[h], attn.v_weight[h]
        d = wq.size(1)
        logits = torch.empty(n, n, dtype=x.dtype)
        for i in range(n):
            for j in range(n):
                diff = x[i] @ wq - x[j] @ wk
                logits[i, j] = -(diff @ diff) / math.sqrt(d_model / attn.num_heads)
        p = torch.exp(logits) / torch.exp(logits).sum(dim=1, keepdim=True)
        a = wq @ wq.T / math.sqrt(d)
        heads.append(p @ x @ a @ wv)
    return torch.cat(heads, dim=1) @ attn.o_weight


@pytest.mark.parametrize("tie_qk", [True, False])
def test_l2_mha_equals_hand_written_formula(tie_qk: bool) -> None:
    torch.manual_seed(0)
    attn = L2MultiheadAttention(6, 2, tie_qk=tie_qk).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    expected = _hand_l2_mha(x, attn)
    assert torch.allclose(attn(x), expected, atol=1e-12)
    batch = torch.stack([x, 2 * x])
    out = attn(batch)
    assert out.shape == (2, 5, 6)
    assert torch.allclose(out[1], _hand_l2_mha(2 * x, attn), atol=1e-12)
    assert torch.allclose(attn(x, rows=[3]), expected[3:4], atol=1e-12)


def test_tied_weights_share_one_parameter() -> None:
    attn = L2MultiheadAttention(4, 2, tie_qk=True)
    assert attn.k_weight is None and attn.key_weight is attn.q_weight
    assert {n for n, _ in attn.named_parameters()} == {"q_weight", "v_weight", "o_weight"}


def test_dp_mha_equals_torch_multihead_attention() -> None:
    torch.manual_seed(1)
    dp = DotProductMultiheadAttention(8, 2).double()
    ref = torch.nn.MultiheadAttention(8, 2, bias=False, batch_first=True).double()
    with torch.no_grad():
        # in_proj rows: head-stacked output columns of W^Q, W^K, W^V (torch computes x @ W^T).
        ref.in_proj_weight.copy_(torch.cat([
            torch.cat(list(w), dim=1).T for w in (dp.q_weight, dp.k_weight, dp.v_weight)
        ]))
        ref.out_proj.weight.copy_(dp.o_weight.T)
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    expected, _ = ref(x, x, x, need_weights=False)
    assert torch.allclose(dp(x), expected, atol=1e-12)
    assert torch.allclose(dp(x[0]), expected[0], atol=1e-12)


def _complete_graph_with_loops(n: int) -> torch.Tensor:
    idx = torch.arange(n)
    return torch.stack([idx.repeat_interleave(n), idx.repeat(n)])  # every (j -> i), i == j included


@pytest.mark.parametrize("heads", [1, 2])
def test_graph_l2_score_equals_dense_l2_mha_on_complete_graph(heads: int) -> None:
    torch.manual_seed(2)
    n, dim = 6, 4
    d = dim // heads
    attn = L2MultiheadAttention(dim, heads, tie_qk=True).double()
    conv = LipTransformerConv(dim, d, heads=heads, bias=False, root_weight=False, lipschitz_norm=False,
                              score="l2", tie_qk=True).double()
    assert conv.lin_key is conv.lin_query
    with torch.no_grad():
        conv.lin_query.weight.copy_(torch.cat([attn.q_weight[h].T for h in range(heads)]))
        # Values: head h's value map x -> (A^h W^{V,h})^T x, output projection W^O = I.
        a_v = [attn.q_weight[h] @ attn.q_weight[h].T @ attn.v_weight[h] / math.sqrt(d) for h in range(heads)]
        conv.lin_value.weight.copy_(torch.cat([m.T for m in a_v]))
        attn.o_weight.copy_(torch.eye(dim))
    x = torch.randn(n, dim, dtype=torch.float64)
    edge_index = _complete_graph_with_loops(n)

    edge_used, scores = conv.attention_scores(x, edge_index)
    dense_logits = attn.logits(x.unsqueeze(0))[0]  # [H, N, N], rows = targets i
    assert torch.allclose(scores, dense_logits[:, edge_used[1], edge_used[0]].T, atol=1e-12)

    out, (edge_used, weights) = conv(x, edge_index, return_attention_weights=True)
    dense_p = attn.attention_weights(x)
    assert torch.allclose(weights, dense_p[:, edge_used[1], edge_used[0]].T, atol=1e-12)
    assert torch.allclose(out, attn(x), atol=1e-12)


def test_graph_l2_score_rejects_lipschitz_norm_and_unknown_scores() -> None:
    with pytest.raises(ConfigError, match="dot-product"):
        LipTransformerConv(4, 4, score="l2", lipschitz_norm=True)
    with pytest.raises(ConfigError, match="unknown"):
        LipTransformerConv(4, 4, score="cosine", lipschitz_norm=False)
    with pytest.raises(ConfigError, match="tie_qk"):
        L2MultiheadAttention(4, 2, tie_qk=False, contractive=True)
    with pytest.raises(ConfigError, match="multiple"):
        L2MultiheadAttention(6, 4)


def _fixed_point_inverse(f, y: torch.Tensor, c: float, iters: int) -> torch.Tensor:
    x = y.clone()
    for _ in range(iters):
        x = y - c * f(x)
    return x


def test_contractive_l2_mha_is_contractive_and_invertible() -> None:
    torch.manual_seed(3)
    attn = L2MultiheadAttention(4, 2, contractive=True).double()
    plain = L2MultiheadAttention(4, 2).double()
    plain.load_state_dict(attn.state_dict())
    probe = torch.randn(6, 4, dtype=torch.float64)
    assert torch.allclose(attn(probe), plain(probe) / l2_mha_bound(plain, 6, "inf"), atol=1e-15)
    for scale in (0.1, 1.0, 10.0):
        x = scale * torch.randn(6, 4, dtype=torch.float64)
        assert inf_norm(attn, x) < 1.0
    x = torch.rand(8, 6, 4, dtype=torch.float64) * 2 - 1
    x[:, 0] = 0.0  # Section 5.2's inputs: one x_i = 0
    c = 0.9
    y = x + c * attn(x)
    recon = _fixed_point_inverse(attn, y, c, iters=60)
    assert (recon - x).abs().max() < 1e-8
