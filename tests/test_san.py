"""model=san (Guan & He §3.1) and model.nonlocal (§4.1): dense and hand-computed references."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from devices import seeded
from omegaconf import OmegaConf
from torch import nn

from lipgnn.config import CONF_DIR, validate
from lipgnn.data.spec import DataSpec
from lipgnn.errors import ConfigError
from lipgnn.models import build_model
from lipgnn.models.nonlocal_mp import NonlocalScale, head_laplacian_energy
from lipgnn.models.san import SANBlock
from lipgnn.nn import LipTransformerConv
from lipgnn.train.trainer import set_warmup_lr

CONF = Path(CONF_DIR)
NONE = OmegaConf.create({"name": "none"})


pytestmark = pytest.mark.usefixtures("single_thread")


def san_cfg(**overrides):
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg.hidden = 8
    cfg.heads = 2
    cfg.ffn_hidden = 16
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


# Path graph 0 - 1 - 2 - 3, both directions, without self-loops (SAN adds them).
PATH = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
ADJ_SELF = torch.eye(4) + torch.tensor([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.float)


def dense_attention(conv: LipTransformerConv, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    """P_h [H, n, n] with e_ij = (1/sqrt(d)) q_i . k_j, softmax over {j : adj_ij = 1} (neighbours + self)."""
    heads, c = conv.heads, conv.out_channels
    q = conv.lin_query(x).view(-1, heads, c).transpose(0, 1)
    k = conv.lin_key(x).view(-1, heads, c).transpose(0, 1)
    e = q @ k.transpose(1, 2) / math.sqrt(c)
    return torch.softmax(e.masked_fill(adj == 0, float("-inf")), dim=-1)


def dense_mp(block: SANBlock, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    """MP(X) = (P_1 X V_1 || ... || P_h X V_h) W, dense."""
    conv = block.conv
    p = dense_attention(conv, x, adj)
    v = conv.lin_value(x).view(-1, conv.heads, conv.out_channels).transpose(0, 1)
    heads = (p @ v).transpose(0, 1).reshape(x.size(0), -1)
    return block.out_proj(heads)


def test_san_attention_equals_dense_softmax_over_neighbours_and_self() -> None:
    torch.manual_seed(0)
    net = build_model(san_cfg(), NONE, DataSpec(num_features=3, num_classes=2), 1).eval()
    x = torch.randn(4, 8)
    conv = net.blocks[0].conv
    edge_index = net.prepare_edges(PATH, 4)
    _, (used, alpha) = conv(x, edge_index, return_attention_weights=True)
    p = dense_attention(conv, x, ADJ_SELF)
    for h in range(conv.heads):
        torch.testing.assert_close(alpha[:, h], p[h][used[1], used[0]])
    assert used.size(1) == int(ADJ_SELF.sum())  # every neighbour and every node itself, once


@pytest.mark.parametrize("placement", ["post", "pre", "none"])
def test_san_block_order_matches_the_paper(placement: str) -> None:
    torch.manual_seed(1)
    net = build_model(san_cfg(layer_norm=placement), NONE, DataSpec(num_features=3, num_classes=2), 1).eval()
    block = net.blocks[0]
    x = torch.randn(4, 8) * 3
    out = block(x, net.prepare_edges(PATH, 4))
    mp = lambda z: dense_mp(block, z, ADJ_SELF)  # noqa: E731
    if placement == "post":  # Y = LN(X + MP(X)); X' = LN(Y + FFN(Y))
        y = block.norm1(x + mp(x))
        expected = block.norm2(y + block.ffn(y))
    elif placement == "pre":  # Y = X + MP(LN(X)); X' = Y + FFN(LN(Y))
        y = x + mp(block.norm1(x))
        expected = y + block.ffn(block.norm2(y))
    else:
        y = x + mp(x)
        expected = y + block.ffn(y)
    torch.testing.assert_close(out, expected)


def test_nonlocal_factor_by_hand_on_a_4_node_path() -> None:
    # Zero queries: every score is 0, so P is uniform over neighbours + self:
    # rows 0 and 3 average 2 nodes, rows 1 and 2 average 3. X has row 0 = (1, 2), the rest 0:
    # PX - X = ((-1/2, -1), (1/3, 2/3), 0, 0), so (1/n)||PX - X||^2 = (5/4 + 5/9) / 4 = 65/144 per head
    # (a sum over the features, not a mean: the paper's Frobenius norm).
    conv = LipTransformerConv(2, 2, heads=2, root_weight=False, bias=False, lipschitz_norm=False)
    with torch.no_grad():
        conv.lin_query.weight.zero_()
    x = torch.tensor([[1.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    looped = torch.cat([PATH, torch.arange(4).repeat(2, 1)], dim=1)
    _, (used, alpha) = conv(x, looped, return_attention_weights=True)
    torch.testing.assert_close(head_laplacian_energy(x, alpha, used), torch.full((2,), 65 / 144))
    plain = conv(x, looped)
    scaled = NonlocalScale()(conv, x, looped)
    torch.testing.assert_close(scaled, plain * 65 / 144)


def test_nonlocal_xv_source_and_detached_grad() -> None:
    torch.manual_seed(2)
    conv = LipTransformerConv(4, 2, heads=2, root_weight=False, bias=False, lipschitz_norm=False)
    x = torch.randn(4, 4, requires_grad=True)
    looped = torch.cat([PATH, torch.arange(4).repeat(2, 1)], dim=1)
    p = dense_attention(conv, x, ADJ_SELF)
    xv = conv.lin_value(x).view(4, 2, 2).transpose(0, 1)
    expected_factor = ((p @ xv - xv) ** 2).sum(dim=(1, 2)) / 4
    scale = NonlocalScale(source="xv")
    scale(conv, x, looped)
    torch.testing.assert_close(scale.last_factor, expected_factor.detach())
    # grad=False: the factor is a constant, so the output is linear in V (doubling V doubles it).
    detached = NonlocalScale(grad=False)
    out = detached(conv, x, looped)
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", ["gat", "gt"])
def test_nonlocal_gat_gt_scale_the_aggregation_only(name: str) -> None:
    cfg = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    cfg.hidden, cfg.heads, cfg.dropout, cfg.attn_dropout = 8, 2, 0.0, 0.0
    torch.manual_seed(3)
    plain = build_model(cfg, NONE, DataSpec(num_features=3, num_classes=2), 1).eval()
    cfg["nonlocal"] = True
    torch.manual_seed(3)
    nonlocal_net = build_model(cfg, NONE, DataSpec(num_features=3, num_classes=2), 1).eval()
    x = torch.randn(4, 8)
    conv = plain.blocks[0].conv
    out, (used, alpha) = conv(x, PATH, return_attention_weights=True)
    root = conv.lin_skip(x) if name == "gt" else conv.bias
    factor = head_laplacian_energy(x, alpha, used)
    expected = root + ((out - root).view(4, 2, 4) * factor.view(1, 2, 1)).reshape(4, 8)
    block = nonlocal_net.blocks[0]
    torch.testing.assert_close(block.nonlocal_mp(block.conv, x, PATH), expected)


def test_skip_blocks_leaves_a_block_out() -> None:
    torch.manual_seed(4)
    net = build_model(san_cfg(), NONE, DataSpec(num_features=3, num_classes=2), 3).eval()
    x = torch.randn(4, 3)
    edges = net.prepare_edges(PATH, 4)
    h = net.encode(x)
    for k in (0, 2):
        h = net.blocks[k](h, edges)
    torch.testing.assert_close(net(x, PATH, skip_blocks={1}), net.head(h))


def test_self_loops_are_added_once_and_cached() -> None:
    net = build_model(san_cfg(), NONE, DataSpec(num_features=3, num_classes=2), 1)
    with_loop = torch.cat([PATH, torch.tensor([[0], [0]])], dim=1)
    edges = net.prepare_edges(with_loop, 4)
    assert edges.size(1) == PATH.size(1) + 4 and net.prepare_edges(with_loop, 4) is edges


def test_xavier_init_zero_biases() -> None:
    net = build_model(san_cfg(init="xavier"), NONE, DataSpec(num_features=3, num_classes=2), 2)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            assert m.bias is None or torch.count_nonzero(m.bias) == 0
            bound = math.sqrt(6.0 / (m.in_features + m.out_features))
            assert m.weight.abs().max() <= bound
    default = build_model(san_cfg(init="default"), NONE, DataSpec(num_features=3, num_classes=2), 2)
    assert torch.count_nonzero(default.blocks[0].out_proj.bias) > 0


def test_san_lip_uses_eq19_scores() -> None:
    net = build_model(san_cfg(), OmegaConf.create({"name": "lip", "alpha": 1.0, "formula": "paper"}),
                      DataSpec(num_features=3, num_classes=2), 1)
    conv = net.blocks[0].conv
    assert conv.lipschitz_norm
    _, scores = conv.attention_scores(torch.randn(4, 8), net.prepare_edges(PATH, 4))
    assert scores.abs().max() <= 1.0 + 1e-6  # eq. 19 bounds the scores by alpha


def test_warmup_is_linear_then_constant() -> None:
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1.0)
    lrs = []
    for epoch in range(1, 7):
        set_warmup_lr(opt, 1e-4, 4, epoch)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4])


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=san", "norm=pairnorm"], "does not apply to model=san"),
    (["model=gcn", "model.nonlocal=true"], "model.nonlocal=true needs an attention model"),
    (["model=san", "model.nonlocal=true", "model.nonlocal_source=y"], "model.nonlocal_source='y'"),
    (["model=san", "model.init=he"], "model.init='he'"),
    (["model=san", "model.ffn_hidden=0"], "model.ffn_hidden=0"),
    (["train.warmup_epochs=-1"], "train.warmup_epochs=-1"),
    (["train.warmup_epochs=5", "train.scheduler=plateau"], "use it with train.scheduler=none"),
])
def test_bad_guan_he_config_is_one_line_error(overrides: list[str], message: str) -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    with pytest.raises(ConfigError, match=message) as info:
        validate(cfg)
    assert "\n" not in str(info.value)


def test_builder_rejects_nonlocal_without_attention() -> None:
    cfg = OmegaConf.load(CONF / "model" / "gcn.yaml")
    cfg["nonlocal"] = True
    with pytest.raises(ConfigError, match="model.nonlocal=true needs an attention model"):
        build_model(cfg, NONE, DataSpec(num_features=3, num_classes=2), 1)


@pytest.mark.slow
def test_256_layer_nonlocal_san_on_cora_runs() -> None:
    """A 256-layer nonlocal Post-LN SAN on Cora-sized data (hidden 32): one training step stays finite."""
    from lipgnn.data import load

    data = next(iter(load(OmegaConf.load(CONF / "dataset" / "cora.yaml"), 0).eval_batches()))
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg["nonlocal"] = True
    torch.manual_seed(0)
    net = build_model(cfg, NONE, DataSpec(num_features=data.num_features, num_classes=7), 256)
    out = net(data.x, data.edge_index)
    torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


@pytest.mark.parametrize("use_nonlocal", [False, True])
def test_fused_san_equals_pyg_san(use_nonlocal: bool) -> None:
    x = torch.randn(4, 3, generator=seeded(5))
    outs = []
    for impl in ("pyg", "fused"):
        torch.manual_seed(6)
        net = build_model(san_cfg(impl=impl, **{"nonlocal": use_nonlocal}), NONE,
                          DataSpec(num_features=3, num_classes=2), 2).eval()
        outs.append(net(x, PATH))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_encoder_depth_one_linear_or_linear_act_linear() -> None:
    """model.encoder_layers (Guan & He's "a dropout, and a MLP", depth unstated): 1 -> Dropout, Linear; 2 (the
    default) -> Dropout, Linear, ReLU, Linear; anything else is refused in one line."""
    spec = DataSpec(num_features=3, num_classes=2)
    two = build_model(san_cfg(), NONE, spec, 1).encoder
    assert len(two) == 4 and [type(m).__name__ for m in two][2:] == ["ReLU", "Linear"]
    one = build_model(san_cfg(encoder_layers=1), NONE, spec, 1).encoder
    assert len(one) == 2 and isinstance(one[0], nn.Dropout) and one[1].out_features == 8
    with pytest.raises(ConfigError, match="model.encoder_layers=3 is out of range: it must be >= 1 and <= 2"):
        build_model(san_cfg(encoder_layers=3), NONE, spec, 1)
