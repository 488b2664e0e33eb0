"""Deep GIN (Xu et al.): ``GINConv(MLP)``, ``h' = MLP((1 + eps) h + sum_j h_j)`` (Xu et al. eq. 4.1), with
Alon & Yahav's TREES MLP Linear-BN-ReLU-Linear-BN-ReLU; ReLU after the block (not last)."""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import MLP

from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import Build, activation_class, deep_stack, plain_conv_class


@register_model("gin")
def build_gin(b: Build) -> DeepGNN:
    conv_cls = plain_conv_class("gin", b.impl)
    hidden = b.model.hidden

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        # Alon & Yahav's TREES GIN (the only GIN experiment): Linear-BN-ReLU-Linear-BN-ReLU;
        # plain_last=False puts BatchNorm and ReLU after the second Linear too.
        return conv_cls(MLP([hidden, hidden, hidden], norm="batch_norm", plain_last=False)), "plain"

    return deep_stack(b, make_conv, activation_class(b.model, nn.ReLU))
