"""Model zoo: deep GCN / GGNN / GIN / GAT / GT / GCNII with none | pairnorm | layernorm | lip, Pre-/Post-LN
blocks (``model.layer_norm``), Guan & He's SAN and nonlocal message passing (``model.nonlocal``); one builder
per family, registered by name (:mod:`lipgnn.models.registry`, :mod:`lipgnn.models.families`)."""

from lipgnn.models.blocks import EmbeddingSum, GNNBlock
from lipgnn.models.builder import (
    ALL_MODEL_NAMES,
    BLOCK_ATTENTION_MODELS,
    MODEL_NAMES,
    NONLOCAL_MODELS,
    NORM_NAMES,
    attention_conv_classes,
    build_model,
    plain_conv_class,
    xavier_init_,
)
from lipgnn.models.deep import DeepGNN
from lipgnn.models.grad_norms import attention_grad_norms, attention_parameters
from lipgnn.models.nonlocal_mp import NonlocalScale, head_laplacian_energy
from lipgnn.models.registry import register_model, registered_models
from lipgnn.models.san import SANBlock

__all__ = [
    "ALL_MODEL_NAMES",
    "BLOCK_ATTENTION_MODELS",
    "MODEL_NAMES",
    "NONLOCAL_MODELS",
    "NORM_NAMES",
    "DeepGNN",
    "EmbeddingSum",
    "GNNBlock",
    "NonlocalScale",
    "SANBlock",
    "attention_conv_classes",
    "attention_grad_norms",
    "attention_parameters",
    "build_model",
    "head_laplacian_energy",
    "plain_conv_class",
    "register_model",
    "registered_models",
    "xavier_init_",
]
