"""Deep GAT (Velickovic et al.), the authors' block: dropout -> ``LipGATConv(hidden, c, heads,
add_self_loops, dropout=attn_dropout)`` -> ELU (not last) -> [PairNorm]. Scores
``e_ij = LeakyReLU(a^T [W h_i || W h_j])`` (Velickovic et al. eq. 1), divided by LipschitzNorm's bound with
``norm=lip`` (eq. 17). With ``norm != lip`` the layer is PyG's ``GATConv`` (the same state-dict keys)."""

from __future__ import annotations

from torch import nn

from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import (
    Build,
    attention_conv_classes,
    attention_heads,
    attention_stack,
    lip_kwargs,
    spec_fields,
)


@register_model("gat")
def build_gat(b: Build) -> DeepGNN:
    model = b.model
    heads, concat, channels = attention_heads(model)
    gat_cls, _ = attention_conv_classes(b.impl)
    edge_dim = spec_fields(b.spec)[4]
    lip = lip_kwargs(b.norm)

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        return gat_cls(model.hidden, channels, heads=heads, concat=concat, dropout=model.attn_dropout,
                       add_self_loops=True, edge_dim=edge_dim, **lip), "attention"

    return attention_stack(b, make_conv)
