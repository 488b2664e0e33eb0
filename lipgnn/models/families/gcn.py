"""Deep GCN (Kipf & Welling): dropout -> ``GCNConv(hidden, hidden)`` -> ReLU (not last) -> [norm],
``H' = D^{-1/2} (A + I) D^{-1/2} H W`` (Kipf & Welling eq. 2)."""

from __future__ import annotations

from torch import nn

from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import Build, activation_class, deep_stack, plain_conv_class


@register_model("gcn")
def build_gcn(b: Build) -> DeepGNN:
    conv_cls = plain_conv_class("gcn", b.impl)
    hidden = b.model.hidden

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        return conv_cls(hidden, hidden), "plain"

    return deep_stack(b, make_conv, activation_class(b.model, nn.ReLU))
