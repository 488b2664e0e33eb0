"""Deep GGNN (Li et al.): ``GatedGraphConv(hidden, num_layers=1)`` per block, one GRU step
``h' = GRU(h, sum_j W h_j)`` (Li et al. eq. 1-6 with one propagation step); no activation by default."""

from __future__ import annotations

from torch import nn

from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import Build, activation_class, deep_stack, plain_conv_class


@register_model("ggnn")
def build_ggnn(b: Build) -> DeepGNN:
    conv_cls = plain_conv_class("ggnn", b.impl)
    hidden = b.model.hidden

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        return conv_cls(hidden, num_layers=1), "plain"

    return deep_stack(b, make_conv, activation_class(b.model, None))
