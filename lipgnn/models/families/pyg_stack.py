"""PyG's stock attention layers in the suite's deep block (dropout -> conv -> ELU (not last)): ``model.conv``
picks ``GATConv`` | ``GATv2Conv`` | ``TransformerConv``; ``norm=lip`` passes each through
:func:`lipgnn.nn.lipschitz_norm` (eq. 17 GAT, eq. 19 Transformer, the GATv2 bound of docs/reference.md), its
fused CPU twin where one exists and ``model.impl`` is not ``pyg``."""

from __future__ import annotations

import torch
from torch import nn

from lipgnn.config_schema import LipNormConfig, PygStackConfig
from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import Build, attention_heads, attention_stack, spec_fields


@register_model("pyg_stack")
def build_pyg_stack(b: Build) -> DeepGNN:
    from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

    from lipgnn.nn.wrap import lipschitz_norm

    model, norm = b.model, b.norm
    assert isinstance(model, PygStackConfig)
    heads, concat, channels = attention_heads(model)
    edge_dim = spec_fields(b.spec)[4]
    common = {"heads": heads, "concat": concat, "dropout": model.attn_dropout, "edge_dim": edge_dim}
    on_cpu = b.device is None or torch.device(b.device).type == "cpu"
    requested = model.impl
    wrap_impl = "pyg" if requested == "pyg" or not on_cpu else ("fused" if requested == "fused" else "auto")

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        if model.conv == "gat":
            conv: nn.Module = GATConv(model.hidden, channels, add_self_loops=True, **common)
        elif model.conv == "gatv2":
            conv = GATv2Conv(model.hidden, channels, add_self_loops=True, **common)
        else:
            conv = TransformerConv(model.hidden, channels, root_weight=True, **common)
        if isinstance(norm, LipNormConfig):
            conv = lipschitz_norm(conv, float(norm.alpha), variant=norm.formula, impl=wrap_impl)
        return conv, "attention"

    return attention_stack(b, make_conv)
