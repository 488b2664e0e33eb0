"""Guan & He's self-attention GNN (§3.1, Fig. 3; block in :mod:`lipgnn.models.san`): dropout + MLP encoder,
``depth`` SAN blocks ``Y = LN(X + MP(X))``, ``X' = LN(Y + FFN(Y))`` (``model.layer_norm=post``) with
``MP(X) = (P_1 X V_1 || ... || P_h X V_h) W``, a linear decoder. ``norm`` is none or lip (its LayerNorm is
``model.layer_norm``)."""

from __future__ import annotations

from torch import nn

from lipgnn.models.blocks import DroppedInputMLP, EmbeddingSum
from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.san import SANBlock
from lipgnn.models.stack import (
    Build,
    activation_class,
    attention_conv_classes,
    input_linear_class,
    lip_kwargs,
    nonlocal_scale,
    spec_fields,
)


@register_model("san")
def build_san(b: Build) -> DeepGNN:
    model = b.model
    hidden, heads = model.hidden, model.heads
    act_cls = activation_class(model, nn.ReLU)  # the FFN's activation (the attention sublayer has none)
    lip = lip_kwargs(b.norm)
    _, gt_cls = attention_conv_classes(b.impl)
    input_kind, num_features, vocab_sizes, num_classes, _ = spec_fields(b.spec)

    blocks = []
    for _layer in range(b.depth):
        # root_weight=False: MP has no skip term (the block's residual is the skip); bias=False: Q, K, V
        # are the paper's linear maps K X, Q X, X V_i.
        conv = gt_cls(hidden, hidden // heads, heads=heads, concat=True, dropout=model.attn_dropout,
                      root_weight=False, bias=False, **lip)
        blocks.append(SANBlock(conv, hidden, model.ffn_hidden, model.layer_norm, act_cls, nonlocal_scale(model)))
    if input_kind == "embedding":
        encoder: nn.Module = EmbeddingSum(vocab_sizes, hidden)
    else:
        # The paper's "dropout, and a MLP" (App. B.1), its depth unstated: model.encoder_layers = 1 (Linear) or
        # 2 (Linear -> act -> Linear); results/reproduction/guan_he.md measures which reproduces its energies.
        layers: list[nn.Module] = [nn.Dropout(model.dropout), input_linear_class(model.impl)(num_features, hidden)]
        if model.encoder_layers == 2:
            if act_cls is not None:
                layers.append(act_cls())
            layers.append(nn.Linear(hidden, hidden))
        encoder = DroppedInputMLP(*layers)
    return DeepGNN(encoder, blocks, nn.Linear(hidden, num_classes), self_loops=True, model_name="san",
                   norm_name=b.norm.name)
