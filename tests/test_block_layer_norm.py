"""model.layer_norm (none | pre | post) and model.activation for every model: hand-checked block outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from devices import exact, on_device, seeded
from omegaconf import OmegaConf
from torch import nn
from torch_geometric.nn import GCNConv

from lipgnn.config import CONF_DIR, validate
from lipgnn.data.spec import DataSpec
from lipgnn.errors import ConfigError
from lipgnn.models import MODEL_NAMES, build_model
from lipgnn.models.blocks import GNNBlock

CONF = Path(CONF_DIR)


def _cfg(name: str, **overrides):
    cfg = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    cfg.hidden = 8
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def _identity_gcn() -> GCNConv:
    """GCNConv with W = I and b = 0: out = D^-1/2 (A + I) D^-1/2 x."""
    conv = GCNConv(2, 2)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(2))
        conv.bias.zero_()
    return conv


# Path graph 0 - 1 - 2 (both directions). With self-loops the degrees are 2, 3, 2.
EDGES = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
X = torch.tensor([[1.0, -1.0], [2.0, 0.0], [0.0, 3.0]])


def _a_hat() -> torch.Tensor:
    deg = torch.tensor([2.0, 3.0, 2.0])
    a = torch.eye(3) + torch.tensor([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=torch.float)
    return a / torch.sqrt(deg[:, None] * deg[None, :])


def _ln(x: torch.Tensor) -> torch.Tensor:
    """Per-node LayerNorm by hand (affine = identity at init), eps as torch's default."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5)


@pytest.mark.parametrize("placement", ["none", "pre", "post"])
def test_block_output_by_hand(placement: str) -> None:
    block = GNNBlock(_identity_gcn(), "plain", act=nn.ReLU(), placement=placement,
                     block_norm=None if placement == "none" else nn.LayerNorm(2))
    out = block(X, EDGES)
    f = lambda z: torch.relu(_a_hat() @ z)  # noqa: E731
    expected = {"none": f(X), "pre": X + f(_ln(X)), "post": _ln(X + f(X))}[placement]
    torch.testing.assert_close(out, expected)


def test_pre_and_post_differ_and_post_rows_are_normalised() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 2) * 5
    pre = GNNBlock(_identity_gcn(), "plain", act=nn.ReLU(), placement="pre", block_norm=nn.LayerNorm(2))(x, EDGES)
    post = GNNBlock(_identity_gcn(), "plain", act=nn.ReLU(), placement="post", block_norm=nn.LayerNorm(2))(x, EDGES)
    assert not torch.allclose(pre, post)
    # Post-LN ends in LayerNorm: zero mean per node; Pre-LN's output keeps the raw residual stream.
    torch.testing.assert_close(post.mean(-1), torch.zeros(3), atol=1e-6, rtol=0)
    assert pre.abs().max() > 3


def test_residual_flag_is_not_added_twice_under_pre() -> None:
    kwargs = dict(act=nn.ReLU(), placement="pre")
    a = GNNBlock(_identity_gcn(), "plain", residual=False, block_norm=nn.LayerNorm(2), **kwargs)(X, EDGES)
    b = GNNBlock(_identity_gcn(), "plain", residual=True, block_norm=nn.LayerNorm(2), **kwargs)(X, EDGES)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_layer_norm_none_and_default_activation_leave_every_model_unchanged(name: str) -> None:
    spec = DataSpec(num_features=5, num_classes=3)
    x = torch.randn(6, 5, generator=seeded(1))
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    old_cfg = _cfg(name)
    for key in ("layer_norm", "activation"):
        old_cfg.pop(key)  # a config written before the keys existed
    torch.manual_seed(0)
    old = on_device(build_model(old_cfg, OmegaConf.create({"name": "none"}), spec, 3)).eval()
    torch.manual_seed(0)
    new = on_device(build_model(_cfg(name, layer_norm="none", activation="default"), OmegaConf.create({"name": "none"}),
                                spec, 3))
    new.eval()
    assert list(old.state_dict()) == list(new.state_dict())
    torch.testing.assert_close(old(x, edge_index), new(x, edge_index), **exact())


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("placement", ["pre", "post"])
def test_every_model_builds_with_pre_and_post(name: str, placement: str) -> None:
    spec = DataSpec(num_features=5, num_classes=3)
    torch.manual_seed(0)
    net = on_device(build_model(_cfg(name, layer_norm=placement), OmegaConf.create({"name": "none"}), spec, 2))
    assert all(block.placement == placement and isinstance(block.block_norm, nn.LayerNorm) for block in net.blocks)
    out = net(torch.randn(6, 5), torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]))
    out.sum().backward()
    assert out.shape == (6, 3)


def test_lip_norm_combines_with_post_ln() -> None:
    net = build_model(_cfg("gat", layer_norm="post"), OmegaConf.create({"name": "lip", "alpha": 1.0,
                                                                         "formula": "paper"}),
                      DataSpec(num_features=5, num_classes=3), 2)
    assert net.blocks[0].conv.lipschitz_norm and net.blocks[0].placement == "post"


@pytest.mark.parametrize(("activation", "cls"), [("relu", nn.ReLU), ("elu", nn.ELU), ("gelu", nn.GELU),
                                                  ("none", type(None)), ("default", nn.ELU)])
def test_activation_choice(activation: str, cls: type) -> None:
    net = build_model(_cfg("gat", activation=activation), OmegaConf.create({"name": "none"}),
                      DataSpec(num_features=5, num_classes=3), 2)
    assert isinstance(net.blocks[0].act, cls)
    assert net.blocks[-1].act is None  # the last block has none (an output Linear follows), as before


def test_ggnn_default_activation_is_none_and_can_be_set() -> None:
    spec = DataSpec(num_features=5, num_classes=3)
    none = build_model(_cfg("ggnn"), OmegaConf.create({"name": "none"}), spec, 2)
    relu = build_model(_cfg("ggnn", activation="relu"), OmegaConf.create({"name": "none"}), spec, 2)
    assert none.blocks[0].act is None and isinstance(relu.blocks[0].act, nn.ReLU)


@pytest.mark.parametrize(("key", "value"), [("layer_norm", "middle"), ("activation", "tanh")])
def test_bad_values_are_one_line_config_errors(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"model.{key}='{value}' is unknown"):
        build_model(_cfg("gcn", **{key: value}), OmegaConf.create({"name": "none"}),
                    DataSpec(num_features=5, num_classes=3), 2)
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"model.{key}={value}"])
    with pytest.raises(ConfigError, match=f"model.{key}='{value}' is unknown") as info:
        validate(cfg)
    assert "\n" not in str(info.value)


def test_neutral_values_keep_run_ids_of_older_configs() -> None:
    from hydra import compose, initialize_config_dir

    from lipgnn.identity import run_id as run_id_for

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["model=gcn"])
        post = compose(config_name="config", overrides=["model=gcn", "model.layer_norm=post"])
    old = OmegaConf.create(OmegaConf.to_container(cfg))
    old.model.pop("layer_norm")
    old.model.pop("activation")
    assert run_id_for(cfg) == run_id_for(old)
    assert run_id_for(post) != run_id_for(cfg)
