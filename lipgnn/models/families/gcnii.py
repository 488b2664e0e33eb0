"""GCNII (Chen et al. 2020): ``GCN2Conv(hidden, alpha, theta, layer=l+1)`` with the initial representation
``x_0 = ReLU(Linear(Dropout(x)))``: ``h' = ReLU(((1 - alpha) P h + alpha x_0)((1 - beta_l) I + beta_l W))``,
``beta_l = log(theta / l + 1)`` (Chen et al. eq. 5), ReLU after every layer, ``Linear(Dropout(h))`` out."""

from __future__ import annotations

from torch import nn

from lipgnn.config_schema import GCNIIConfig
from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import register_model
from lipgnn.models.stack import Build, activation_class, deep_stack, plain_conv_class


@register_model("gcnii")
def build_gcnii(b: Build) -> DeepGNN:
    model = b.model
    assert isinstance(model, GCNIIConfig)
    conv_cls = plain_conv_class("gcnii", b.impl)

    def make_conv(layer: int) -> tuple[nn.Module, str]:
        return conv_cls(model.hidden, alpha=model.gcnii_alpha, theta=model.gcnii_theta, layer=layer + 1), "initial"

    return deep_stack(b, make_conv, activation_class(model, nn.ReLU), act_on_last=True, initial_residual=True)
