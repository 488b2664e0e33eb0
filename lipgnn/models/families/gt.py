"""Deep graph transformer (UniMP's ``TransformerConv``), the authors' block: dropout ->
``LipTransformerConv(hidden, c, heads, root_weight, dropout=attn_dropout)`` -> [LayerNorm] -> ELU -> [PairNorm].
Scores ``q_i . k_j / sqrt(d)`` (LipschitzNorm's eq. 19 with ``norm=lip``) or, with ``model.score=l2``,
``-||q_i - k_j||^2 / sqrt(d)`` (Kim et al. eq. 10; ``model.tie_qk`` shares W^Q = W^K)."""

from __future__ import annotations

from typing import Any

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


@register_model("gt")
def build_gt(b: Build) -> DeepGNN:
    model = b.model
    heads, concat, channels = attention_heads(model)
    _, gt_cls = attention_conv_classes(b.impl)
    edge_dim = spec_fields(b.spec)[4]
    lip = lip_kwargs(b.norm)
    # The defaults (dot, untied) pass nothing, so the layer is built exactly as before the keys existed.
    score: dict[str, Any] = {} if model.score == "dot" and not model.tie_qk else {"score": model.score,
                                                                                  "tie_qk": model.tie_qk}

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        return gt_cls(model.hidden, channels, heads=heads, concat=concat, dropout=model.attn_dropout,
                      edge_dim=edge_dim, root_weight=True, **lip, **score), "attention"

    return attention_stack(b, make_conv)
