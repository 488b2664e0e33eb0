"""Model zoo: deep GCN / GGNN / GIN / GAT / GT / GCNII with none | pairnorm | layernorm | lip."""

from lipgnn.models.blocks import EmbeddingSum, GNNBlock
from lipgnn.models.builder import (
    ATTENTION_MODELS,
    MODEL_NAMES,
    NORM_NAMES,
    attention_conv_classes,
    build_model,
)
from lipgnn.models.deep import DeepGNN
from lipgnn.models.grad_norms import attention_grad_norms, attention_parameters

__all__ = [
    "ATTENTION_MODELS",
    "MODEL_NAMES",
    "NORM_NAMES",
    "DeepGNN",
    "EmbeddingSum",
    "GNNBlock",
    "attention_conv_classes",
    "attention_grad_norms",
    "attention_parameters",
    "build_model",
]
